"""The leg identified from the valves' measured pressures (no ROS).

With the board's read-back of each valve (/valve/pressure) the leg needs no valve model: the
measured pressures drive the simulated actuators (`dynamic.Evaluator(pressure='measured')`), so
the DAC's gain and offset errors and the VPPE's hysteresis and repeatability, which the model
does not have, cannot bend the leg's parameters (the valves are identified on their own:
`valve_fit`). Multiple shooting (windows restarted from the measured states, seeds/003), robust
least squares over the unit cube of the bounds, and intervals that allow for residuals
correlated over whole pressure levels (`intervals.batch_covariance`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from equimus_description.leg import LegDescription

from . import dynamic as D
from . import intervals
from .data import Experiment

#: the free parameters: Table V's ten, the knee's stop, both hinges' dry friction, and the lag of
#: the valves' read-back stamps behind the motion capture's (a few ms on the emulated rig, from
#: its board's and stream's timing; left out, the actuators' stiffness and area absorbed it)
NAMES = (*D.PAPER_PARAMS, 'joints.knee.range.0', *D.FRICTION_PARAMS, *D.TIMING_PARAMS)
#: s of a shooting window. Each window restarts from the measured angles and velocities, so the
#: motion capture's noise enters as errors in the initial states, which a stiffer, more damped
#: leg forgets faster: on 0.6 s windows that biased the actuators' stiffness and area by 5-10 %
#: on the emulated rig (docs/benchmarks.md, issue 26). Driven by the measured pressures the leg
#: is damped, so a longer window does not drift.
HORIZON_S = 3.0
F_SCALE_RAD = 0.01  # rad, scale of the robust loss (intervals.LOSS)
SIM_DT = 1.0 / 600.0  # the simulation node's step: five per 120 Hz frame


@dataclass
class LegFit:
    values: dict[str, float]
    std_error: dict[str, float]
    interval: dict[str, tuple[float, float]]
    white_std_error: dict[str, float]
    residual_rms_rad: float
    dof: int
    evaluations: int
    at_bounds: list[str] = field(default_factory=list)

    def leg_overrides(self) -> dict[str, float]:
        """The leg's parameters (an override file's keys): the values without the timing."""
        return {k: v for k, v in self.values.items() if k not in D.TIMING_PARAMS}


def rollout_samples(ev: D.Evaluator) -> np.ndarray:
    """The recording sample of every residual (two per sample: hip, knee), across experiments
    in order, for the batches of `intervals.batch_covariance`."""
    offsets = np.cumsum([0] + [len(e) for e in ev.experiments])
    out = []
    for ro in ev.rollouts:
        k = offsets[ro.exp] + ro.i0 + np.arange(ro.n)
        out.append(np.repeat(k, 2))
    return np.concatenate(out)


def _evaluator(
    experiments: Sequence[Experiment],
    leg: LegDescription,
    names: Sequence[str],
    bounds: Mapping[str, tuple[float, float]] | None = None,
) -> D.Evaluator:
    """The fit's loss: multiple shooting driven by the measured pressures."""
    return D.Evaluator(
        experiments,
        list(names),
        leg=leg,
        loss='shooting',
        horizon=HORIZON_S,
        dt=SIM_DT,
        sign_weight=0.0,
        bounds=dict(bounds or {}),
        pressure='measured',
    )


def residual_rms(
    experiments: Sequence[Experiment], leg: LegDescription, values: Mapping[str, float]
) -> float:
    """RMS of the fit's residuals (rad) at `values` (the free parameters `NAMES`): scored at
    a known plant's own parameters, a figure above the fit's residual means the data hold an
    effect the model lacks, which the fitted parameters absorb."""
    ev = _evaluator(experiments, leg, NAMES)
    r = ev.residuals(np.array([float(values[n]) for n in NAMES]))
    return math.sqrt(float(r @ r) / max(1, r.size))


def fit(
    experiments: Sequence[Experiment],
    leg: LegDescription,
    start: Mapping[str, float] | None = None,
    names: Sequence[str] = NAMES,
    bounds: Mapping[str, tuple[float, float]] | None = None,
    max_nfev: int = 30,
    log: Callable[[str], None] = lambda _: None,
) -> LegFit:
    """Robust least squares of the shooting residuals from `start` (default: the leg's own
    values, friction from heldout.START)."""
    from .heldout import START

    names = list(names)
    ev = _evaluator(experiments, leg, names, bounds)
    x0 = np.array([D.leg_value(leg, n) for n in names])
    for i, n in enumerate(names):
        if start and n in start:
            x0[i] = start[n]
        elif n in START and x0[i] <= ev.lower[i]:
            x0[i] = START[n]
    span = ev.upper - ev.lower
    u0 = np.clip(ev.to_unit(x0), 1e-4, 1 - 1e-4)

    def residuals(u: np.ndarray) -> np.ndarray:
        return ev.residuals(ev.from_unit(u))

    r = intervals.fit_unit_cube(residuals, u0, F_SCALE_RAD, max_nfev)
    x = ev.from_unit(r.x)
    res = residuals(r.x)
    robust = 1.4826 * float(np.median(np.abs(res)))
    log(f'leg fit: {ev.n_evals} simulations, robust residual {robust:.4f} rad')
    se, white, dof = intervals.std_errors(
        residuals, r.x, res, span, rollout_samples(ev), F_SCALE_RAD
    )
    values = dict(zip(names, map(float, x), strict=True))
    return LegFit(
        values=values,
        std_error=dict(zip(names, se.tolist(), strict=True)),
        interval={
            n: intervals.interval(values[n], e, lo, hi, dof)
            for n, e, lo, hi in zip(names, se.tolist(), ev.lower, ev.upper, strict=True)
        },
        white_std_error=dict(zip(names, white.tolist(), strict=True)),
        residual_rms_rad=math.sqrt(float(res @ res) / max(1, res.size)),
        dof=dof,
        evaluations=ev.n_evals,
        at_bounds=D.at_bounds(ev, x),
    )
