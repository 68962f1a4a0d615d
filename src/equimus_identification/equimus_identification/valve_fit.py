"""The valves identified from their own read-back: command in, measured pressure out (no ROS).

The board reads each VPPE's actual-value output through its ADC (/valve/pressure), so the valve
is identified apart from the leg: the applied command u (/valve/applied, what the driver's codes
mean nominally) drives the model

    v = g·u + o while u > 0, else 0 (vent)     each channel's DAC chain: gain g, offset o (kPa)
    p = the description's valve model of v     dead time, fill and vent time constants

(`equimus_description.valve.follow` on a 1 ms grid), and least squares fits g, o, the dead
time, each valve's fill and vent constants and the VPPE's hysteresis (a play) to the measured
pressures at their own sample times. The VPPE's repeatability is not in the model: an error per
pressure level, it stays in the residual, shared by every sample of a level. So the intervals
come from refits that leave out one level of one channel at a time (`intervals.group_jackknife`):
over 30 rigs drawn as `--truth random` draws them, 8 time batches of a linearised sandwich held
the truth in 76 % of the intervals, the jackknife 85 % (benchmarks/bench_intervals.py,
docs/benchmarks.md). The fit turns most of a level's error into the gain, offset and play, where
no residual shows it; `repeatability_kpa` adds it from an assumed spread instead (`equimus
adapt`: the datasheet's, held 100 % over the same 30 rigs with intervals 2–5 times as wide).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from equimus_description.valve import ValveParams, follow

from . import intervals
from .data import Recording, hold

RATE_HZ = 1000.0  # the command grid: a step is held from its own time, within 1 ms
NAMES = (
    'valve.dead_time',
    'valve.fill_time_constant.maa',
    'valve.fill_time_constant.baa',
    'valve.vent_time_constant.maa',
    'valve.vent_time_constant.baa',
    'dac_gain.maa',
    'dac_gain.baa',
    'dac_offset_kpa.maa',
    'dac_offset_kpa.baa',
    'hysteresis_kpa.maa',
    'hysteresis_kpa.baa',
)
BOUNDS = {
    'valve.dead_time': (0.0, 0.3),
    'valve.fill_time_constant.maa': (0.005, 1.0),
    'valve.fill_time_constant.baa': (0.005, 1.0),
    'valve.vent_time_constant.maa': (0.002, 1.0),
    'valve.vent_time_constant.baa': (0.002, 1.0),
    'dac_gain.maa': (0.8, 1.2),
    'dac_gain.baa': (0.8, 1.2),
    'dac_offset_kpa.maa': (-6.0, 6.0),
    'dac_offset_kpa.baa': (-6.0, 6.0),
    'hysteresis_kpa.maa': (0.0, 8.0),
    'hysteresis_kpa.baa': (0.0, 8.0),
}
START = {
    'valve.dead_time': 0.05,
    'valve.fill_time_constant.maa': 0.2,
    'valve.fill_time_constant.baa': 0.2,
    'valve.vent_time_constant.maa': 0.1,
    'valve.vent_time_constant.baa': 0.1,
    'dac_gain.maa': 1.0,
    'dac_gain.baa': 1.0,
    'dac_offset_kpa.maa': 0.0,
    'dac_offset_kpa.baa': 0.0,
    'hysteresis_kpa.maa': 1.0,
    'hysteresis_kpa.baa': 1.0,
}


@dataclass
class ValveFit:
    """The fitted valve model, its standard errors and 95 % intervals (correlation-aware)."""

    values: dict[str, float]
    std_error: dict[str, float]
    interval: dict[str, tuple[float, float]]
    white_std_error: dict[str, float]
    residual_rms_kpa: float  # robust: 1.4826 × the median absolute residual
    dof: int  # of the intervals' Student t (intervals.group_jackknife: levels − 1)
    at_bounds: list[str] = field(default_factory=list)

    def params(self) -> ValveParams:
        return valve_params(self.values)

    def leg_overrides(self) -> dict[str, float]:
        """The valve section of a leg override file (the DAC gain and offset are not in it)."""
        return {k: v for k, v in self.values.items() if k.startswith('valve.')}


def valve_params(v: dict[str, float]) -> ValveParams:
    return ValveParams(
        (v['valve.fill_time_constant.maa'], v['valve.fill_time_constant.baa']),
        (v['valve.vent_time_constant.maa'], v['valve.vent_time_constant.baa']),
        v['valve.dead_time'],
    )


@dataclass
class Series:
    """One recording on the command grid: the applied command held per 1/120 s step, and the
    measured pressures at their own times (s from the grid's start)."""

    t_grid: np.ndarray
    command: np.ndarray  # (n, 2) kPa, held over [t_k, t_k+1)
    t_meas: np.ndarray
    measured: np.ndarray  # (m, 2) kPa

    def window(self, t0: float, t1: float) -> Series:
        g = (self.t_grid >= t0) & (self.t_grid < t1)
        m = (self.t_meas >= t0) & (self.t_meas < t1)
        i0 = int(np.argmax(g))
        return Series(
            self.t_grid[g] - self.t_grid[i0],
            self.command[g],
            self.t_meas[m] - self.t_grid[i0],
            self.measured[m],
        )


def series(rec: Recording, rate: float = RATE_HZ) -> Series:
    if rec.t_p is None or rec.pressure_kpa is None or len(rec.t_p) < 10:
        raise ValueError(
            f'{rec.source}: no measured valve pressure (/valve/pressure): the valves are '
            "identified from the board's read-back; record it (a board with an ADC)"
        )
    t0 = max(rec.t_cmd[0], rec.t_p[0])
    grid = np.arange(t0, min(rec.t_cmd[-1], rec.t_p[-1]), 1.0 / rate)
    keep = (rec.t_p >= grid[0]) & (rec.t_p <= grid[-1])
    return Series(
        grid - grid[0],
        hold(rec.t_cmd, rec.command_kpa, grid),
        rec.t_p[keep] - grid[0],
        rec.pressure_kpa[keep],
    )


def predict(values: dict[str, float], s: Series, p0: np.ndarray | None = None) -> np.ndarray:
    """Predicted pressures (m, 2) at the measured samples' times."""
    g = np.array([values['dac_gain.maa'], values['dac_gain.baa']])
    o = np.array([values['dac_offset_kpa.maa'], values['dac_offset_kpa.baa']])
    u = np.where(s.command > 0.0, np.maximum(g * s.command + o, 0.0), 0.0)
    h = (values.get('hysteresis_kpa.maa', 0.0), values.get('hysteresis_kpa.baa', 0.0))
    u = np.column_stack([play(u[:, c], h[c]) for c in range(2)])
    start = s.measured[0] if p0 is None else p0
    dt = float(s.t_grid[1] - s.t_grid[0])
    p, _ = follow(valve_params(values), u, np.clip(start, 0.0, None), dt)
    # p[k] is the pressure at the end of step k (t_grid[k] + dt); the start is at t_grid[0]
    t = np.concatenate([[s.t_grid[0]], s.t_grid + dt])
    full = np.vstack([start[None, :], p])
    return np.column_stack([np.interp(s.t_meas, t, full[:, c]) for c in range(2)])


#: Residuals (samples × channels) a level needs to be left out on its own by the jackknife; the
#: frames of a slew-limited ramp between levels stay in every refit.
MIN_LEVEL_RESIDUALS = 20
#: least-squares evaluations of each jackknife refit, from the full fit's optimum
JACKKNIFE_NFEV = 10

#: Scale of the robust loss (intervals.LOSS) of the pressure residuals: a driver or recorder
#: held up by the machine's load stamps a command tens of ms late, and the fast transients then
#: leave residuals of tens of kPa that a square loss would fit the dynamics to.
F_SCALE_KPA = 1.0


def play(u: np.ndarray, width: float) -> np.ndarray:
    """The VPPE's hysteresis as a play of `width` kPa: the regulated level follows the
    setpoint once it has moved width/2 past it; venting (0) is exact, and a fill from the
    vented state is approached from below."""
    if width <= 0.0:
        return u
    out = np.empty_like(u)
    half = 0.5 * width
    level = None
    changes = np.flatnonzero(np.diff(u, prepend=np.nan) != 0)
    ends = np.append(changes[1:], len(u))
    for a, b in zip(changes.tolist(), ends.tolist(), strict=True):
        v = float(u[a])
        if v <= 0.0:
            level = None
            out[a:b] = 0.0
            continue
        if level is None or v > level + half:
            level = v - half
        elif v < level - half:
            level = v + half
        out[a:b] = max(0.0, level)
    return out


def level_groups(s: Series) -> np.ndarray:
    """For each residual (sample, channel), in the order `fit` makes them: its channel's run of
    one applied command (a pressure level, or a frame of a ramp), a label per channel."""
    out = []
    for c in range(s.command.shape[1]):
        u = s.command[:, c]
        run = np.concatenate([[0], np.cumsum(np.diff(u) != 0)])
        k = np.clip(np.searchsorted(s.t_grid, s.t_meas, side='right') - 1, 0, len(u) - 1)
        out.append(run[k] * s.command.shape[1] + c)
    return np.stack(out, axis=1).ravel()


def fit(
    s: Series,
    start: dict[str, float] | None = None,
    names: Sequence[str] = NAMES,
    max_nfev: int = 200,
    repeatability_kpa: float = 0.0,
) -> ValveFit:
    """Robust least squares of the pressure residuals over the unit cube of BOUNDS, from
    `start`. repeatability_kpa > 0: the intervals also carry what a level error of that spread
    (±2σ; the datasheet's is REPEATABILITY_KPA) does to the fit through each level
    (`intervals.group_consider_covariance`); 0: the jackknife alone."""
    names = list(names)
    values = dict(START)
    values.update(start or {})
    lo = np.array([BOUNDS[n][0] for n in names])
    hi = np.array([BOUNDS[n][1] for n in names])

    def full(u: np.ndarray) -> dict[str, float]:
        v = dict(values)
        v.update(zip(names, (lo + np.clip(u, 0, 1) * (hi - lo)).tolist(), strict=True))
        return v

    def residuals(u: np.ndarray) -> np.ndarray:
        return (predict(full(u), s) - s.measured).ravel()

    u0 = np.clip((np.array([values[n] for n in names]) - lo) / (hi - lo), 1e-6, 1 - 1e-6)
    r = intervals.fit_unit_cube(residuals, u0, F_SCALE_KPA, max_nfev)
    best = full(r.x)
    res = residuals(r.x)

    def refit(keep: np.ndarray) -> np.ndarray:
        again = intervals.fit_unit_cube(
            lambda u: residuals(u)[keep], r.x, F_SCALE_KPA, JACKKNIFE_NFEV
        )
        return lo + again.x * (hi - lo)

    groups = level_groups(s)
    cov, dof = intervals.group_jackknife(refit, groups, MIN_LEVEL_RESIDUALS)
    J = intervals.forward_jacobian(residuals, r.x, res) / (hi - lo)[None, :]
    if repeatability_kpa > 0.0:
        cov += intervals.group_consider_covariance(
            J, groups, repeatability_kpa / 4.0, MIN_LEVEL_RESIDUALS
        )
    se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    # white: the usual σ²(JᵀJ)⁻¹ on every residual, for comparison
    white = np.sqrt(np.clip(np.diag(intervals.white_covariance(J, res)), 0.0, None))
    at = [n for n, u in zip(names, r.x, strict=True) if u <= 1e-3 or u >= 1 - 1e-3]
    return ValveFit(
        values=best,
        std_error=dict(zip(names, se.tolist(), strict=True)),
        interval={
            n: intervals.interval(best[n], e, BOUNDS[n][0], BOUNDS[n][1], dof)
            for n, e in zip(names, se.tolist(), strict=True)
        },
        white_std_error=dict(zip(names, white.tolist(), strict=True)),
        residual_rms_kpa=float(np.median(np.abs(res))) * 1.4826,
        dof=dof,
        at_bounds=at,
    )
