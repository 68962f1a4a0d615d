"""The leg identified from the valves' measured pressures (no ROS).

With the board's read-back of each valve (/valve/pressure) the leg needs no valve model: the
measured pressures drive the simulated actuators (`dynamic.Evaluator(pressure='measured')`), so
the DAC's gain and offset errors and the VPPE's hysteresis and repeatability, which the model
does not have, cannot bend the leg's parameters (the valves are identified on their own:
`valve_fit`). Multiple shooting (windows restarted from the measured states, seeds/003; or from
fitted ones, `Starts`), robust least squares over the unit cube of the bounds, and intervals
that allow for residuals correlated over whole pressure levels (`intervals.batch_covariance`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import multiprocessing
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from equimus_description.leg import LegDescription
from equimus_description.workers import init_worker

from . import data, intervals, parallel
from . import dynamic as D
from .data import Experiment, Recording

#: the free parameters: Table V's ten, the knee's stop, both hinges' dry friction, and the lag of
#: the valves' read-back stamps behind the motion capture's (a few ms on the emulated rig, from
#: its board's and stream's timing; left out, the actuators' stiffness and area absorbed it)
#: Held at the description's value, with the two parameter sets (config/leg.yaml) whose spread
#: is the doubt in that value. The MAA's damping and the hip's act alike (the MAA's moment arm
#: barely changes over the workspace: their Jacobian columns are 0.9998 collinear on an
#: excitation), so the data determine their sum, not each (c_MAA alone ±127 %); fitted, c_MAA
#: ran to its bound and the hip's damping took the rest (+7 %), as in the ToCenter fits
#: (config/leg_fit.yaml fixes it too). Half the spread between Table II's bench value and Table
#: V's (`held_sd`) is passed on to the fitted parameters' intervals
#: (`intervals.consider_covariance`).
FIXED = {'actuators.maa.c': ('table_ii', 'table_v_dynamic')}
#: What the real leg's held-out fit found beyond Table V (config/leg_fit.yaml,
#: docs/identification.md): muscle areas that change with length and the BAA's damping growing
#: with its pressure. On an emulated rig run as that fit, the loop's fit without them left a
#: residual 5 times the one with them and held the truth in 3 of 10 intervals, 9 of 13 with
#: them (docs/adapt.md). The MAA's pressure damping stays at the description's 0, as in that
#: fit (free, it ended on its 0 bound there).
REAL_LEG_PARAMS = (*D.AREA_SLOPE_PARAMS, 'actuators.baa.c_per_kpa')
NAMES = tuple(
    n
    for n in (
        *D.PAPER_PARAMS,
        'joints.knee.range.0',
        *D.FRICTION_PARAMS,
        *REAL_LEG_PARAMS,
        *D.TIMING_PARAMS,
    )
    if n not in FIXED
)
#: Bounds beyond dynamic.BOUNDS: the real leg's MAA area was fitted at 8.1e-4 m², past the
#: default bound (as in the held-out fit's command).
BOUNDS: dict[str, tuple[float, float]] = {'actuators.maa.area': (1.5e-4, 1.2e-3)}


def bounds_of(name: str) -> tuple[float, float]:
    """The fit's bounds of a parameter: BOUNDS, else dynamic.BOUNDS."""
    return BOUNDS.get(name) or D.BOUNDS[name]


#: s of a shooting window. Each window restarts from the measured angles and velocities, so the
#: motion capture's noise enters as errors in the initial states, which a stiffer, more damped
#: leg forgets faster: on 0.6 s windows that biased the actuators' stiffness and area by 5-10 %
#: on the emulated rig (docs/benchmarks.md, issue 26). Driven by the measured pressures the leg
#: is damped, so a longer window does not drift.
HORIZON_S = 3.0
#: part of an excitation the fits use; the rest is the validation segment (`excitation_parts`)
FIT_FRACTION = 0.7
F_SCALE_RAD = 0.01  # rad, scale of the robust loss (intervals.LOSS)
#: how far a shooting window's start may move from the measured state, [q (rad) × 2, qd (rad/s)
#: × 2]: many times the motion capture's noise on the angles and on their local-cubic slope
START_FREEDOM = np.array([0.03, 0.03, 1.0, 1.0])
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


@dataclass(frozen=True)
class ExcitationParts:
    """An excitation recording cut for identification: the fit part's gap-free windows and
    the longest gap-free window of the rest (validation), on the valve series' clock."""

    fit: list[Experiment]
    validation: Experiment
    split_s: float
    end_s: float


def excitation_parts(rec: Recording, fraction: float = FIT_FRACTION) -> ExcitationParts:
    """The first `fraction` of an excitation for the fits, the rest for validation. The clock
    is the valve series' (`valve_fit.series`): its grid starts at max(first command, first
    read-back)."""
    from . import valve_fit

    t_end = float(valve_fit.series(rec).t_grid[-1])
    split = fraction * t_end
    grid0 = max(float(rec.t_cmd[0]), float(rec.t_p[0])) if rec.t_p is not None else 0.0
    lo = max(grid0, float(rec.t_q[0]))
    windows = data.gap_free_windows(rec, lo, grid0 + split, min_len=1.0)
    rest = data.gap_free_windows(rec, grid0 + split, grid0 + t_end, min_len=1.0)
    return ExcitationParts(
        fit=[data.bag_window(rec, a, b) for a, b in windows],
        validation=data.bag_window(rec, *max(rest, key=lambda w: w[1] - w[0])),
        split_s=split,
        end_s=t_end,
    )


class Starts:
    """The shooting windows' start states as free variables on the unit cube, `START_FREEDOM`
    about the measured ones (none when `free` is False). Measured starts carry the motion
    capture's noise into each window, which biased a synthetic leg seen through 1.5 mrad of
    white angle noise (MAA stiffness +5 %, +2 % with fitted starts); on the emulated rig fitted
    starts did worse (docs/benchmarks.md), so they are an option (`fit(free_starts=True)`)."""

    def __init__(self, ev: D.Evaluator, free: bool = True) -> None:
        self.ev = ev
        self.rows = (
            [r for r, ro in enumerate(ev.rollouts) if not ev.experiments[ro.exp].is_static]
            if free
            else []
        )
        measured = ev.start_states()[self.rows].reshape(-1, 4)
        self.lower = measured - START_FREEDOM
        self.span = np.tile(2.0 * START_FREEDOM, len(self.rows))
        self.u0 = np.full(self.span.size, 0.5)

    def apply(self, u: np.ndarray) -> None:
        if self.rows:
            states = self.lower + np.clip(u, 0.0, 1.0).reshape(-1, 4) * 2.0 * START_FREEDOM
            self.ev.set_starts(self.rows, states)

    def mask(self, k: int) -> np.ndarray | None:
        """The Jacobian's sparsity over (k parameters, the starts): a start moves its own
        window's residuals only. None without free starts (dense)."""
        if not self.rows:
            return None
        slices = self.ev.residual_rows()
        m = np.zeros((self.ev.n_residuals, k + self.span.size), bool)
        m[:, :k] = True
        for i, r in enumerate(self.rows):
            m[slices[r], k + 4 * i : k + 4 * i + 4] = True
        return m


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
    horizon: float = HORIZON_S,
) -> D.Evaluator:
    """The fit's loss: multiple shooting driven by the measured pressures."""
    return D.Evaluator(
        experiments,
        list(names),
        leg=leg,
        loss='shooting',
        horizon=horizon,
        dt=SIM_DT,
        sign_weight=0.0,
        bounds={**BOUNDS, **(bounds or {})},
        pressure='measured',
    )


def residual_rms(
    experiments: Sequence[Experiment],
    leg: LegDescription,
    values: Mapping[str, float],
    horizon: float = HORIZON_S,
    names: Sequence[str] = NAMES,
) -> float:
    """RMS of the residuals (rad) of a fit of `names` at `values`: scored at a known plant's
    own parameters, a figure above the fit's residual means the data hold an effect the model
    lacks, which the fitted parameters absorb."""
    ev = _evaluator(experiments, leg, names, horizon=horizon)
    r = ev.residuals(np.array([float(values[n]) for n in names]))
    return math.sqrt(float(r @ r) / max(1, r.size))


class ResidualPool:
    """`fit`'s residuals on `workers` processes, each holding the fit's evaluator (built once,
    for every start of a `multistart`): the finite-difference Jacobian's points, which are
    independent, go to them in parallel. A fit with a pool ends where it ends without
    (`intervals.forward_jacobian`); a context manager."""

    def __init__(
        self,
        experiments: Sequence[Experiment],
        leg: LegDescription,
        names: Sequence[str],
        bounds: Mapping[str, tuple[float, float]] | None,
        horizon: float,
        free_starts: bool,
        workers: int,
    ) -> None:
        self.key = (list(names), dict(bounds or {}), horizon, free_starts)
        self.evaluations = 0
        context = multiprocessing.get_context('spawn')  # the caller may hold threads
        self._pool = ProcessPoolExecutor(
            workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(experiments, leg, list(names), bounds, horizon, free_starts),
        )
        # Every worker up before the fit: one still starting when a Ctrl-C ends this process
        # prints a traceback of its own. The pool starts them on demand: each of `workers`
        # points lasts a moment, so the next goes to a new worker, until all have answered.
        seen: set[int] = set()
        while len(seen) < workers:
            seen |= set(self._pool.map(_worker_pid, range(workers)))

    def __call__(self, points: list[np.ndarray]) -> list[np.ndarray]:
        self.evaluations += len(points)
        return list(self._pool.map(_worker_residuals, points))

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)  # on Ctrl-C: the points not started yet

    def __enter__(self) -> ResidualPool:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


#: a ResidualPool worker's residual function: (evaluator, window starts, number of parameters)
_WORKER: tuple[D.Evaluator, Starts, int] | None = None


def _init_worker(
    experiments: Sequence[Experiment],
    leg: LegDescription,
    names: list[str],
    bounds: Mapping[str, tuple[float, float]] | None,
    horizon: float,
    free_starts: bool,
) -> None:
    global _WORKER
    init_worker()
    ev = _evaluator(experiments, leg, names, bounds, horizon)
    _WORKER = (ev, Starts(ev, free_starts), len(names))


def _worker_pid(_point: int) -> int:
    """This worker's pid, after a moment (so that the other points go to other workers)."""
    import os
    import time

    time.sleep(0.05)
    return os.getpid()


def _worker_residuals(u: np.ndarray) -> np.ndarray:
    assert _WORKER is not None
    ev, starts, k = _WORKER
    starts.apply(u[k:])
    return ev.residuals(ev.from_unit(u[:k]))


def fit(
    experiments: Sequence[Experiment],
    leg: LegDescription,
    start: Mapping[str, float] | None = None,
    names: Sequence[str] = NAMES,
    bounds: Mapping[str, tuple[float, float]] | None = None,
    max_nfev: int = 30,
    log: Callable[[str], None] = lambda _: None,
    horizon: float = HORIZON_S,
    free_starts: bool = False,
    pool: ResidualPool | None = None,
) -> LegFit:
    """Robust least squares of the shooting residuals from `start` (default: the leg's own
    values, friction from heldout.START). free_starts: every shooting window's start state is
    fitted too, within `START_FREEDOM` of the measured one (`Starts`). pool: a ResidualPool
    made with the same experiments, leg, names, bounds, horizon and free_starts."""
    from .heldout import START

    names = list(names)
    if pool is not None and pool.key != (names, dict(bounds or {}), horizon, free_starts):
        raise ValueError('the ResidualPool was made for another fit')
    ev = _evaluator(experiments, leg, names, bounds, horizon)
    pooled0 = pool.evaluations if pool is not None else 0

    def evaluations() -> int:
        return ev.n_evals + (pool.evaluations - pooled0 if pool is not None else 0)

    x0 = np.array([D.leg_value(leg, n) for n in names])
    for i, n in enumerate(names):
        if start and n in start:
            x0[i] = start[n]
        elif n in START and x0[i] <= ev.lower[i]:
            x0[i] = START[n]
    starts = Starts(ev, free_starts)
    span = np.concatenate([ev.upper - ev.lower, starts.span])
    u0 = np.concatenate([np.clip(ev.to_unit(x0), 1e-4, 1 - 1e-4), starts.u0])
    k = len(names)

    def residuals(u: np.ndarray) -> np.ndarray:
        starts.apply(u[k:])
        return ev.residuals(ev.from_unit(u[:k]))

    mask = starts.mask(k)
    # forward differences of a fixed step in the cube, in this process or on the pool's
    # (scipy's '2-point' steps 1e-4 of a parameter's place in the cube: 1e-8 of its range for
    # one started next to its lower bound)
    evaluate = pool or (lambda points: [residuals(v) for v in points])
    r = intervals.fit_unit_cube(residuals, u0, F_SCALE_RAD, max_nfev, mask, evaluate)
    x = ev.from_unit(r.x[:k])
    res = residuals(r.x)
    robust = 1.4826 * float(np.median(np.abs(res)))
    log(f'leg fit: {evaluations()} simulations, robust residual {robust:.4f} rad')
    consider = [
        (_fixed_column(experiments, leg, names, bounds, horizon, n, x, r.x[k:]), held_sd(n))
        for n in FIXED
        if n not in names
    ]
    se_all, white_all, dof = intervals.std_errors(
        residuals, r.x, res, span, rollout_samples(ev), F_SCALE_RAD, mask, consider, evaluate
    )
    se, white = se_all[:k], white_all[:k]
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
        evaluations=evaluations(),
        at_bounds=D.at_bounds(ev, x),
    )


@functools.cache
def held_sd(name: str) -> float:
    """The standard deviation of a held parameter's value: half the spread between the two
    parameter sets FIXED names for it."""
    from equimus_description.leg import load_leg

    a, b = (D.leg_value(load_leg(parameter_set=p), name) for p in FIXED[name])
    return 0.5 * abs(a - b)


def _fixed_column(
    experiments: Sequence[Experiment],
    leg: LegDescription,
    names: Sequence[str],
    bounds: Mapping[str, tuple[float, float]] | None,
    horizon: float,
    fixed: str,
    x: np.ndarray,
    starts_u: np.ndarray,
) -> np.ndarray:
    """∂r/∂c of a parameter held fixed, at the fit's optimum `x` (and its fitted window starts,
    `starts_u`): a forward difference of 1e-4 of its range."""
    ev = _evaluator(experiments, leg, [*names, fixed], bounds, horizon)
    if starts_u.size:
        Starts(ev).apply(starts_u)
    xc = np.append(x, D.leg_value(leg, fixed))
    h = 1e-4 * (ev.upper[-1] - ev.lower[-1])
    r0 = ev.residuals(xc)
    xc[-1] += h
    return (ev.residuals(xc) - r0) / h


#: a multi-start fit's other starts: each static leg parameter scaled by a uniform draw within
#: this fraction of the description's value
START_SPREAD = 0.15


def perturbed_start(leg: LegDescription, names: Sequence[str], seed: int) -> dict[str, float]:
    """The description's values of the actuators' parameters and the hinges' dampings, each
    scaled by a uniform draw within ±START_SPREAD (clipped to the bounds); the stop, friction,
    the real leg's terms (0 in the description: a scale does not move them) and the lag keep
    their defaults."""
    rng = np.random.default_rng(seed)
    out = {}
    for n in names:
        if (n.startswith('actuators.') or n.endswith('.damping')) and n not in REAL_LEG_PARAMS:
            lo, hi = bounds_of(n)
            v = D.leg_value(leg, n) * (1.0 + rng.uniform(-START_SPREAD, START_SPREAD))
            out[n] = float(min(hi, max(lo, v)))
    return out


def multistart(
    experiments: Sequence[Experiment],
    leg: LegDescription,
    n_starts: int,
    names: Sequence[str] = NAMES,
    max_nfev: int = 100,
    horizon: float = HORIZON_S,
    log: Callable[[str], None] = lambda _: None,
    workers: int = 1,
) -> LegFit:
    """`fit` from the description's values and from n_starts − 1 `perturbed_start`s, one after
    the other, each fit's Jacobian on `workers` processes (`ResidualPool`; a start per process
    left one idle once its start was done, 1046 of 1651 simulations on one of two). The data
    determine a curve more than a point (the actuators' stiffness and area, c_MAA and the hip's
    damping trade at one residual, docs/benchmarks.md): the fits end at different places on it
    with the same loss. The best fit's values, with intervals whose variance adds the endpoints'
    spread (their sample variance, Student's t of n_starts − 1 degrees of freedom) to the fit's
    own."""
    if n_starts < 2:
        raise ValueError('a multi-start fit needs two starts or more')
    starts = [perturbed_start(leg, names, k) if k else None for k in range(n_starts)]
    pool = None
    if workers > 1:
        log(f'leg fits: the Jacobians on {workers} processes')
        pool = ResidualPool(experiments, leg, names, None, horizon, False, workers)
    fits = []
    try:
        for k, start in enumerate(starts):
            f = fit(experiments, leg, start, names, max_nfev=max_nfev, horizon=horizon, pool=pool)
            log(
                f'leg fit from start {k + 1}: {f.evaluations} simulations, residual '
                f'{f.residual_rms_rad:.4f} rad'
            )
            fits.append(f)
    finally:
        if pool is not None:
            pool.close()
    best = min(fits, key=lambda f: f.residual_rms_rad)
    ends = np.array([[f.values[n] for n in names] for f in fits])
    spread = ends.std(axis=0, ddof=1)
    dof = min(best.dof, n_starts - 1)
    se = {n: math.hypot(best.std_error[n], s) for n, s in zip(names, spread, strict=True)}
    return LegFit(
        values=best.values,
        std_error=se,
        interval={n: intervals.interval(best.values[n], se[n], *bounds_of(n), dof) for n in names},
        white_std_error=best.white_std_error,
        residual_rms_rad=best.residual_rms_rad,
        dof=dof,
        evaluations=sum(f.evaluations for f in fits),
        at_bounds=best.at_bounds,
    )


def main(argv: list[str] | None = None) -> int:
    """python -m equimus_identification.leg_fit RUN: refit the leg on an `equimus adapt` run's
    excitation (RUN/bag_excite, the part adapt fits) with other settings, and score every
    parameter against RUN/truth.yaml when the rig was emulated."""
    import pathlib
    import sys

    from equimus_description.leg import load_leg

    p = argparse.ArgumentParser(
        prog='python -m equimus_identification.leg_fit', description=main.__doc__
    )
    p.add_argument('run', help='an equimus adapt --out folder')
    p.add_argument(
        '--fraction', type=float, default=FIT_FRACTION, help='part of the excitation fitted'
    )
    p.add_argument('--horizon', type=float, default=HORIZON_S, help='s of a shooting window')
    p.add_argument('--nfev', type=int, default=100, help='least-squares iterations (at most)')
    p.add_argument('--fixed-lag', action='store_true', help='read-back lag held at 0 ms')
    p.add_argument(
        '--starts',
        type=int,
        default=1,
        help="fits from this many starts; intervals widened by their endpoints' spread",
    )
    p.add_argument(
        '--free-starts',
        action='store_true',
        help="fit every shooting window's start state too (leg_fit.Starts)",
    )
    p.add_argument(
        '--from-truth',
        action='store_true',
        help="start from the truth's own parameters (emulated rig): does the fit stay there?",
    )
    p.add_argument(
        '--workers',
        type=int,
        default=parallel.default_workers(),
        help="processes for the fits' Jacobians (default: the usable cores, %(default)s here)",
    )
    a = p.parse_args(argv)
    if a.workers < 1:
        print('leg_fit: --workers must be 1 or more', file=sys.stderr)
        return 2
    run = pathlib.Path(a.run)
    try:
        rec = data.load_bag(run / 'bag_excite')
    except data.DataError as exc:
        print(f'leg_fit: {exc}', file=sys.stderr)
        return 2
    truth = None
    if (run / 'truth.yaml').is_file():
        from equimus_sim.truth import load

        truth = load(run / 'truth.yaml').overrides()
    if a.from_truth and truth is None:
        print(
            f'leg_fit: --from-truth needs {run / "truth.yaml"} (an emulated rig)', file=sys.stderr
        )
        return 2
    names = [n for n in NAMES if not (a.fixed_lag and n in D.TIMING_PARAMS)]
    parts = excitation_parts(rec, a.fraction)
    if a.starts > 1 and (a.from_truth or a.free_starts):
        print('leg_fit: --starts goes with neither --from-truth nor --free-starts', file=sys.stderr)
        return 2
    try:
        lf = _refit(a, parts.fit, names, truth if a.from_truth else None)
    except KeyboardInterrupt:
        print('leg_fit: interrupted; nothing written', file=sys.stderr)
        return 130
    held = scored = 0
    for n, v in lf.values.items():
        lo, hi = lf.interval[n]
        line = f'{n:30s} {v:11.5g}  [{lo:.5g}, {hi:.5g}]'
        if truth is not None and n in truth:
            scored += 1
            held += lo <= truth[n] <= hi
            line += f'  truth {truth[n]:.5g}'
            if truth[n] != 0.0:
                line += f' ({100 * (v / truth[n] - 1):+.1f} %)'
        print(line)
    print(
        f'residual {lf.residual_rms_rad:.5f} rad, horizon {a.horizon:g} s, '
        f'{lf.evaluations} simulations'
    )
    if truth is not None:
        at_truth = residual_rms(parts.fit, load_leg(), {**lf.values, **truth}, a.horizon, names)
        print(
            f"at the truth's own parameters: {at_truth:.5f} rad; "
            f'intervals holding the truth {held}/{scored}'
        )
    return 0


def _refit(
    a: argparse.Namespace, exps: list[Experiment], names: list[str], start: dict | None
) -> LegFit:
    """The fit `main` was asked for: from several starts, or from one, its Jacobians on
    `a.workers` processes."""
    from equimus_description.leg import load_leg

    if a.starts > 1:
        return multistart(exps, load_leg(), a.starts, names, a.nfev, a.horizon, print, a.workers)
    with contextlib.ExitStack() as stack:
        pool = None
        if a.workers > 1:
            pool = stack.enter_context(
                ResidualPool(exps, load_leg(), names, None, a.horizon, a.free_starts, a.workers)
            )
        print(
            f'fitting {len(names)} parameters to {sum(len(e) for e in exps)} samples on '
            f'{a.workers} process(es) (Ctrl-C stops)',
            flush=True,
        )
        return fit(
            exps,
            load_leg(),
            start=start,
            names=names,
            max_nfev=a.nfev,
            log=print,
            horizon=a.horizon,
            free_starts=a.free_starts,
            pool=pool,
        )


if __name__ == '__main__':
    raise SystemExit(main())
