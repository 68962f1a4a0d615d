"""The emulated rig's own plant: a parameter set the stack does not know (no ROS).

Every graph, test and environment ran against a plant equal to the model the stack believes. A
`RigTruth` is what `rig_emulator --truth` simulates instead: the leg's parameters (stiffness,
area, rest length, damping, the knee's stop, hinge friction), the valve/chamber dynamics (dead
time, fill and vent constants), the VPPE's hysteresis and repeatability, each channel's DAC gain
and offset error and the noise of the board's ADC reading of the VPPE's actual-value output,
and the motion capture's latency and marker noise. `RigTruth()` is the nominal model (the
description as it is, no error anywhere): today's rig. `draw(seed)` draws one within `RANGES`;
`dump`/`load` write and read it (truth.yaml in a run folder; its `parameters` section is a leg
override file). The stack never reads it: only the rig emulator and the reports that score an
identification against it.

Where the ranges come from (`RANGES`; docs/adapt.md): each leg and valve parameter spans the
values this leg has been given: the paper's Table V (dynamic, the description's defaults, and
static), and the fit shipped when the ranges were set, config/superseded/leg_fit_constant_area.yaml
(later fits did not move them), widened by that fit's 95 % interval (its standard errors at the
fit, `STANDARD_ERRORS`); friction from 0 to a few times what the held-out fits
left (docs/identification.md); the VPPE's hysteresis and repeatability up to its datasheet's
3 kPa (../shared/spec/valve.md); DAC errors of a ×2 op-amp stage with 1 % parts; Motive's
latency and marker noise as OptiTrack systems report them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from equimus_description.valve import REPEATABILITY_KPA

__all__ = [
    'NOMINAL',
    'RANGES',
    'STANDARD_ERRORS',
    'CHANNEL_ERRORS',
    'Regulation',
    'RigTruth',
    'TruthError',
    'draw',
    'dump',
    'load',
    'parse_spec',
]

#: Standard errors of config/superseded/leg_fit_constant_area.yaml's free parameters at the fit
#: (identifiability on the 36 ToCenter segments + StaticPoint_all_36 filled from rest, dt 0.01 s,
#: the fit's bounds).
STANDARD_ERRORS: dict[str, float] = {
    'actuators.maa.k': 1.286,
    'actuators.baa.k': 0.3546,
    'actuators.maa.area': 1.169e-6,
    'actuators.baa.area': 9.033e-7,
    'actuators.maa.l0': 1.415e-4,
    'actuators.baa.l0': 6.898e-5,
    'actuators.baa.c': 0.2688,
    'joints.hip.damping': 0.003260,
    'joints.knee.damping': 8.814e-4,
    'valve.dead_time': 9.698e-4,
    'valve.fill_time_constant.maa': 0.002640,
    'valve.fill_time_constant.baa': 0.003144,
    'valve.vent_time_constant.maa': 0.001388,
    'valve.vent_time_constant.baa': 0.001919,
    'joints.knee.range.0': 2.408e-4,
}


@dataclass(frozen=True)
class Span:
    """A drawn quantity's range: uniform in [lo, hi], or in log space (`log`)."""

    lo: float
    hi: float
    log: bool = False

    def sample(self, rng: np.random.Generator) -> float:
        if self.lo == self.hi:
            return self.lo
        if self.log:
            return float(math.exp(rng.uniform(math.log(self.lo), math.log(self.hi))))
        return float(rng.uniform(self.lo, self.hi))


def _hull(*values: float, se: float = 0.0, log: bool = False) -> Span:
    """The smallest range holding every value, widened by 1.96 se on both sides."""
    lo, hi = min(values) - 1.96 * se, max(values) + 1.96 * se
    return Span(lo, hi, log)


def _leg_ranges() -> dict[str, Span]:
    se = STANDARD_ERRORS
    # (Table V dynamic = the description's default, Table V static, the constant-area fit)
    return {
        'actuators.maa.k': _hull(265.82, 203.95, 198.52, se=se['actuators.maa.k']),
        'actuators.baa.k': _hull(110.36, 105.07, 111.60, se=se['actuators.baa.k']),
        'actuators.maa.area': _hull(4.03e-4, 4.11e-4, 3.8273e-4, se=se['actuators.maa.area']),
        'actuators.baa.area': _hull(4.36e-4, 3.24e-4, 3.2964e-4, se=se['actuators.baa.area']),
        'actuators.maa.l0': _hull(0.1803, 0.1642, 0.17491, se=se['actuators.maa.l0']),
        'actuators.baa.l0': _hull(0.2565, 0.2579, 0.25784, se=se['actuators.baa.l0']),
        # the fit fixed c_MAA at Table II's bench value 10.8
        'actuators.maa.c': _hull(12.48, 10.8),
        'actuators.baa.c': _hull(24.79, 18.618, se=se['actuators.baa.c']),
        'joints.hip.damping': _hull(0.524, 0.30304, se=se['joints.hip.damping']),
        'joints.knee.damping': _hull(0.062, 0.017330, se=se['joints.knee.damping']),
        'joints.knee.range.0': _hull(0.0, -0.028476, se=se['joints.knee.range.0']),
        # the description's lag (no dead time, 0.2171 s both ways) and the fit's chamber
        'valve.dead_time': Span(0.0, 0.09498 + 1.96 * se['valve.dead_time']),
        'valve.fill_time_constant.maa': _hull(
            0.2171, 0.22328, se=se['valve.fill_time_constant.maa']
        ),
        'valve.fill_time_constant.baa': _hull(
            0.2171, 0.32302, se=se['valve.fill_time_constant.baa']
        ),
        'valve.vent_time_constant.maa': Span(0.005, 0.2171, log=True),
        'valve.vent_time_constant.baa': _hull(
            0.2171, 0.11573, se=se['valve.vent_time_constant.baa']
        ),
        # dry friction: the held-out fits left at most 0.0022 N·m at either hinge
        'joints.hip.frictionloss': Span(0.0, 0.01),
        'joints.knee.frictionloss': Span(0.0, 0.005),
    }


#: Per-channel and mocap quantities, drawn per channel where the field is a pair.
_DEVICE_RANGES: dict[str, Span] = {
    'dac_gain': Span(0.97, 1.03),  # ×2 op-amp stage with 1 % resistors, DAC reference 1 %
    'dac_offset_kpa': Span(-1.0, 1.0),  # ±17 mV of offset at 60 kPa/V
    'hysteresis_kpa': Span(0.0, 3.0),  # VPPE datasheet: hysteresis 0.5 % FS = 3 kPa
    'repeatability_kpa': Span(0.0, REPEATABILITY_KPA),  # up to the datasheet's
    'adc_noise_kpa': Span(0.05, 0.5),  # σ of the read-back (a 12-bit code is 0.146 kPa)
    'mocap_latency_s': Span(0.002, 0.015),  # Motive's system latency at 120 Hz
    'position_noise_m': Span(0.0001, 0.0004),  # marker jitter on the rigid bodies
    'orientation_noise_rad': Span(0.0005, 0.003),
}

RANGES: dict[str, Span] = {**_leg_ranges(), **_DEVICE_RANGES}

#: The rig emulator's mocap noise before truths existed (rig_emulator --position-noise).
NOMINAL_POSITION_NOISE_M = 0.0002
#: Repeatability: the regulated pressure's random error decorrelates over this much setpoint
#: travel (kPa); it does not change while the setpoint holds.
REPEATABILITY_TRAVEL_KPA = 5.0

Pair = tuple[float, float]


class TruthError(ValueError):
    """A truth file or specification that cannot be used (one line)."""


@dataclass(frozen=True)
class RigTruth:
    """One plant for the emulated rig (see the module docstring). Pairs are per valve channel
    (maa, baa); `parameters` are leg override keys (`load_leg(overrides=...)`)."""

    parameters: tuple[tuple[str, float], ...] = ()
    dac_gain: Pair = (1.0, 1.0)
    dac_offset_kpa: Pair = (0.0, 0.0)
    hysteresis_kpa: Pair = (0.0, 0.0)
    repeatability_kpa: Pair = (0.0, 0.0)
    adc_noise_kpa: Pair = (0.0, 0.0)
    mocap_latency_s: float = 0.0
    position_noise_m: float = NOMINAL_POSITION_NOISE_M
    orientation_noise_rad: float = 0.0
    seed: int | None = None  # the draw's seed (None: written by hand or nominal)
    note: str = field(default='', compare=False)

    def __post_init__(self) -> None:
        from equimus_description.leg import LegDescriptionError, load_leg

        params = tuple((str(k), float(v)) for k, v in dict(self.parameters).items())
        object.__setattr__(self, 'parameters', params)
        for name in ('dac_gain', 'dac_offset_kpa', 'hysteresis_kpa', 'repeatability_kpa'):
            object.__setattr__(self, name, _pair(getattr(self, name), name))
        object.__setattr__(self, 'adc_noise_kpa', _pair(self.adc_noise_kpa, 'adc_noise_kpa'))
        problems = []
        if not all(0.5 < g < 1.5 for g in self.dac_gain):
            problems.append(f'dac_gain {self.dac_gain} must be within (0.5, 1.5)')
        if not all(abs(o) <= 10.0 for o in self.dac_offset_kpa):
            problems.append(f'dac_offset_kpa {self.dac_offset_kpa} must be within ±10 kPa')
        for name in ('hysteresis_kpa', 'repeatability_kpa', 'adc_noise_kpa'):
            if not all(0.0 <= v <= 20.0 for v in getattr(self, name)):
                problems.append(f'{name} {getattr(self, name)} must be within 0..20 kPa')
        if not 0.0 <= self.mocap_latency_s <= 0.2:
            problems.append(f'mocap_latency_s {self.mocap_latency_s} must be within 0..0.2 s')
        if not (0.0 <= self.position_noise_m <= 0.01 and 0.0 <= self.orientation_noise_rad <= 0.1):
            problems.append('position_noise_m must be within 0..0.01 m, orientation 0..0.1 rad')
        if problems:
            raise TruthError('rig truth: ' + '; '.join(problems))
        try:
            load_leg(overrides=self.overrides())
        except LegDescriptionError as exc:
            raise TruthError(f'rig truth parameters: {exc}') from None

    def overrides(self) -> dict[str, float]:
        """The leg parameters as a leg override mapping."""
        return dict(self.parameters)

    def leg(self, leg_path: str | None = None) -> Any:
        """The truth's leg description (the stack's description with the truth's parameters)."""
        from equimus_description.leg import load_leg

        return load_leg(leg_path, overrides=self.overrides())

    @property
    def is_nominal(self) -> bool:
        return self == RigTruth()

    def mocap_delay_frames(self, rate_hz: float) -> int:
        """Whole frames a pose is held back: the latency on the stream's frame clock."""
        return int(round(self.mocap_latency_s * rate_hz))

    def regulation(self, channel: int, seed: int | None = None) -> Regulation | None:
        """The VPPE's setpoint-to-regulated-pressure error of one channel (None when ideal)."""
        h, r = self.hysteresis_kpa[channel], self.repeatability_kpa[channel]
        if h == 0.0 and r == 0.0:
            return None
        base = self.seed if seed is None else seed
        return Regulation(h, r, seed=None if base is None else base * 7919 + channel)

    def board_keywords(self) -> dict[str, Any]:
        """The DAC board emulator's device errors (BoardEmulator keywords): the VPPE's
        regulation, and the DAC/ADC channel errors under the board's own keyword names only
        when they are not ideal (the board emulator takes those as `dac_gain`, `dac_offset_kpa`,
        `adc_noise_kpa`)."""
        regulation = [self.regulation(i) for i in range(2)]
        out: dict[str, Any] = {}
        if any(r is not None for r in regulation):
            out['regulation'] = regulation
        if self.dac_gain != (1.0, 1.0):
            out['dac_gain'] = self.dac_gain
        if self.dac_offset_kpa != (0.0, 0.0):
            out['dac_offset_kpa'] = self.dac_offset_kpa
        if self.adc_noise_kpa != (0.0, 0.0):
            out['adc_noise_kpa'] = self.adc_noise_kpa
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d['parameters'] = self.overrides()
        for k, v in list(d.items()):
            if isinstance(v, tuple):
                d[k] = [float(x) for x in v]
        return d

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], source: str = 'rig truth') -> RigTruth:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise TruthError(
                f'{source}: unknown key(s) {", ".join(unknown)} (known: {sorted(known)})'
            )
        kw = dict(doc)
        params = kw.get('parameters') or {}
        if not isinstance(params, Mapping):
            raise TruthError(f'{source}: parameters must be a mapping of leg override keys')
        kw['parameters'] = tuple(params.items())
        try:
            return cls(**kw)
        except (TypeError, ValueError) as exc:
            raise TruthError(f'{source}: {exc}') from None


def _pair(value: Any, name: str) -> Pair:
    if isinstance(value, (int, float)):
        return (float(value), float(value))
    try:
        a, b = (float(v) for v in value)
    except (TypeError, ValueError):
        raise TruthError(f'rig truth: {name} must be one number or two (maa, baa)') from None
    if not (math.isfinite(a) and math.isfinite(b)):
        raise TruthError(f'rig truth: {name} must be finite')
    return (a, b)


NOMINAL = RigTruth()


#: Channel errors `draw` leaves ideal: the board emulator models them under these names, but
#: a draw only includes them once `channel_errors=True` is asked for.
CHANNEL_ERRORS = ('dac_gain', 'dac_offset_kpa', 'adc_noise_kpa')


def draw(seed: int, channel_errors: bool = False) -> RigTruth:
    """A truth drawn uniformly within RANGES (log-uniform where marked), reproducible by seed.
    The DAC gain/offset and ADC noise (`CHANNEL_ERRORS`) are drawn only with `channel_errors`;
    every other quantity's draw is the same either way."""
    rng = np.random.default_rng(seed)
    params = {name: RANGES[name].sample(rng) for name in _leg_ranges()}
    pairs = {
        name: (RANGES[name].sample(rng), RANGES[name].sample(rng))
        for name in ('dac_gain', 'dac_offset_kpa', 'hysteresis_kpa', 'repeatability_kpa')
    }
    adc = (RANGES['adc_noise_kpa'].sample(rng), RANGES['adc_noise_kpa'].sample(rng))
    if not channel_errors:
        pairs['dac_gain'], pairs['dac_offset_kpa'], adc = (1.0, 1.0), (0.0, 0.0), (0.0, 0.0)
    return RigTruth(
        parameters=tuple(params.items()),
        adc_noise_kpa=adc,
        mocap_latency_s=RANGES['mocap_latency_s'].sample(rng),
        position_noise_m=RANGES['position_noise_m'].sample(rng),
        orientation_noise_rad=RANGES['orientation_noise_rad'].sample(rng),
        seed=int(seed),
        note=f'drawn by equimus_sim.truth.draw({seed})',
        **pairs,
    )


def dump(truth: RigTruth, path: str | Path) -> Path:
    """Write truth.yaml (`parameters` is a leg override section: load_leg(overrides=path))."""
    import yaml

    path = Path(path)
    head = (
        "# The emulated rig's plant (equimus_sim.truth.RigTruth): never read by the stack.\n"
        '# parameters: leg override keys; pairs are per valve (maa, baa).\n'
    )
    path.write_text(head + yaml.safe_dump(truth.to_dict(), sort_keys=False))
    return path


def load(path: str | Path) -> RigTruth:
    """A truth file written by `dump` (or by hand: any subset of the fields), or a fitted
    parameter file (`equimus identify`'s params.yaml, the heldout run's chosen.yaml,
    config/leg_fit.yaml: `parameters` beside an `identification` record): its parameters as
    the plant, every device ideal. That runs the emulated rig as the real leg's fit says it
    behaves, with physics the stack's own fits may lack (docs/adapt.md)."""
    from equimus_description import yamlfile

    try:
        doc = yamlfile.load(path)[0] or {}
    except yamlfile.YamlFileError as exc:
        raise TruthError(str(exc)) from None
    if not isinstance(doc, Mapping):
        raise TruthError(f'{path}: expected a mapping (the fields of RigTruth)')
    if 'identification' in doc:
        doc = {
            'parameters': doc.get('parameters') or {},
            'note': f'the fitted parameters of {path}',
        }
    return RigTruth.from_dict(doc, source=str(path))


def parse_spec(spec: str) -> RigTruth:
    """'' (nominal) | 'random:SEED' | a truth file: what `rig_truth:=` and `--truth` take."""
    spec = spec.strip()
    if not spec or spec == 'nominal':
        return NOMINAL
    if spec.startswith('random'):
        _, _, seed = spec.partition(':')
        try:
            return draw(int(seed))
        except ValueError:
            raise TruthError(f'rig truth {spec!r}: use random:SEED, e.g. random:3') from None
    if not Path(spec).is_file():
        raise TruthError(f'rig truth file {spec} does not exist (or use random:SEED)')
    return load(spec)


class Regulation:
    """The VPPE's regulated pressure for a setpoint, with hysteresis and repeatability.

    Hysteresis: a play of width h: the regulated level follows the setpoint only once it has
    moved h/2 past it, so a level approached from below settles h/2 low and from above h/2
    high. Repeatability: a random error (σ = r/4, so ±2σ spans r) that changes only while the
    setpoint moves, decorrelating over REPEATABILITY_TRAVEL_KPA of travel. Venting (0 kPa) is
    exact: the VPPE opens its exhaust."""

    def __init__(self, hysteresis_kpa: float, repeatability_kpa: float, seed: int | None = None):
        self.h = float(hysteresis_kpa)
        self.sigma = float(repeatability_kpa) / 4.0
        self.rng = np.random.default_rng(seed)
        self.level: float | None = None
        self.last: float | None = None
        self.error = float(self.rng.normal(0.0, self.sigma)) if self.sigma > 0 else 0.0

    def __call__(self, setpoint_kpa: float) -> float:
        u = float(setpoint_kpa)
        if u <= 0.0:
            self.level, self.last = None, None
            return 0.0
        if self.level is None:
            self.level = u - 0.5 * self.h  # filled from the vented state: approached from below
        elif u > self.level + 0.5 * self.h:
            self.level = u - 0.5 * self.h
        elif u < self.level - 0.5 * self.h:
            self.level = u + 0.5 * self.h
        if self.sigma > 0 and self.last is not None and u != self.last:
            a = math.exp(-abs(u - self.last) / REPEATABILITY_TRAVEL_KPA)
            self.error = a * self.error + math.sqrt(1.0 - a * a) * float(
                self.rng.normal(0.0, self.sigma)
            )
        self.last = u
        return max(0.0, self.level + self.error)


def describe(truth: RigTruth, names: Sequence[str] | None = None) -> str:
    """One line per quantity, for logs."""
    d = truth.to_dict()
    lines = [f'{k:34s} {v:.6g}' for k, v in d.pop('parameters').items() if not names or k in names]
    lines += [f'{k:34s} {v}' for k, v in d.items() if k != 'note']
    return '\n'.join(lines)


def with_parameters(truth: RigTruth, **params: float) -> RigTruth:
    """The truth with some leg parameters replaced (dotted keys given with '__' for '.')."""
    p = truth.overrides()
    p.update({k.replace('__', '.'): float(v) for k, v in params.items()})
    return replace(truth, parameters=tuple(p.items()))


def main(argv: list[str] | None = None) -> int:
    """python -m equimus_sim.truth --seed S [--out truth.yaml]: print (and write) a draw."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog='python -m equimus_sim.truth', description=main.__doc__)
    p.add_argument('--seed', type=int, required=True)
    p.add_argument('--out', default='', help='write the truth here (truth.yaml)')
    a = p.parse_args(argv)
    t = draw(a.seed)
    print(describe(t))
    if a.out:
        print(f'wrote {dump(t, a.out)}')
    sys.stdout.flush()
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
