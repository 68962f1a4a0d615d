"""The identification commands' parameter options (`--params`, `--bound`), shared by
`equimus identify`, the held-out search, cross-validation and excitation design: names and
presets to override keys, one `OptionError` line for what is not one."""

from __future__ import annotations

import os

ALIASES = {
    'valve.tau': 'valve.time_constant',
    'tau': 'valve.time_constant',
    'hip.damping': 'joints.hip.damping',
    'knee.damping': 'joints.knee.damping',
}


def presets() -> dict[str, tuple[str, ...]]:
    """Named groups of free parameters; `--params` joins them with '+' (and names with ',')."""
    from equimus_identification import dynamic as D

    return {
        'paper': D.PAPER_PARAMS,  # Table V's ten
        'lag': ('valve.time_constant',),  # the authors' valve: one time constant
        'valve': ('valve.time_constant',),  # (as in 'paper+valve', the earlier name)
        'chamber': D.VALVE_PARAMS,  # dead time, fill and vent time constants (both valves)
        'chamber-per-valve': D.VALVE_CHANNEL_PARAMS,  # dead time, fill and vent of each valve
        'rate': D.RATE_PARAMS,  # the fill's rate limit
        'regulator': D.REGULATOR_PARAMS,  # each valve's slack, integral gain and leak
        'slack-rate': D.SLACK_RATE_PARAMS,  # each slack's least uptake rate
        'friction': D.FRICTION_PARAMS,  # hinge dry friction
        'armature': D.ARMATURE_PARAMS,
        'stop': ('joints.knee.range.0',),  # the knee's stop
        'stiffening': D.AREA_SLOPE_PARAMS,  # the muscles' area against length
        'pressure-damping': D.PRESSURE_DAMPING_PARAMS,  # the muscles' damping per kPa
        'static': (
            'actuators.maa.k',
            'actuators.baa.k',
            'actuators.maa.area',
            'actuators.baa.area',
        ),
    }


class OptionError(ValueError):
    """A parameter name or bound given on the command line is not one; str() is the line."""


def parse_params(spec: str) -> list[str]:
    """'paper+chamber+friction', 'paper,valve.dead_time', ... → override keys, in order."""
    from equimus_identification.dynamic import BOUNDS

    groups = presets()
    out: list[str] = []
    for token in spec.replace('+', ',').split(','):
        s = token.strip()
        if s in groups:
            keys = list(groups[s])
        else:
            key = ALIASES.get(s, s)
            if key not in BOUNDS and f'actuators.{key}' in BOUNDS:
                key = f'actuators.{key}'
            if key not in BOUNDS:
                raise OptionError(
                    f'unknown parameter {s!r}; use presets '
                    f'({", ".join(groups)}, joined with +) or names from {sorted(BOUNDS)}'
                )
            keys = [key]
        out += [k for k in keys if k not in out]
    return out


def parse_bounds(specs) -> dict[str, tuple[float, float]]:
    """--bound NAME=LO:HI entries → {override key: (lo, hi)}."""
    out = {}
    for spec in specs:
        try:
            name, rng = spec.split('=', 1)
            lo, hi = (float(v) for v in rng.split(':'))
        except ValueError:
            raise OptionError(f'--bound {spec!r}: expected NAME=LO:HI') from None
        key = parse_params(name)[0]
        if not lo < hi:
            raise OptionError(f'--bound {spec!r}: LO must be below HI')
        out[key] = (lo, hi)
    return out


def portable_path(arg: str) -> str:
    """A path argument relative to the working directory, so a recorded command names no
    machine's absolute path."""
    return os.path.relpath(arg) if os.path.exists(arg) else arg
