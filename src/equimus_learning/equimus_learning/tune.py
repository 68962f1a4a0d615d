"""PID auto-tuning on the model (`equimus tune pid`), as the EquiMus authors tuned theirs: a local
method (L-BFGS-B on finite differences) from the current gains, then a global one (differential
evolution, seeded with the local optimum), minimising the joint-angle mean squared error.

Each evaluation is a closed-loop run of the sim graph's pieces as plain code
(`equimus_control.closed_loop.run`: LegSimulator with valve lag, VirtualMocap with noise, the
estimator, the one ControlStep around `PIDController`, and `SimulatedDriver`, the valve driver's
safety filter), so the gains are tuned through the same control step the node runs. The noise
seed is fixed, which makes the objective deterministic. The result is a ROS parameter file for
the controller node that the launch files take as `params_file:=…`.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from equimus_control.closed_loop import delayed, run
from equimus_control.pid import PIDController, PIDGains
from equimus_control.reference import PREVIEW_S, Waypoints, triangle_poses
from equimus_description.leg import load_leg
from equimus_description.statics import StaticParams, holding_pressures
from equimus_description.workers import init_worker
from equimus_hw.valve.stage import SimulatedDriver
from equimus_sim.mocap import MocapConfig, VirtualMocap
from equimus_sim.simulator import make_simulator

from .env import PHYSICS_DT, STEP_POSES

TASKS = ('triangle', 'steps', 'upright')
#: the authors' tuning pose: the leg upright, θ = (π/2, 0) rad
UPRIGHT = (math.pi / 2, 0.0)
#: log10 bounds of the tuned gains [kp hip, kp knee, ki hip, ki knee, kd hip, kd knee]
LOG_LO = np.log10([0.1, 0.05, 0.01, 0.01, 0.002, 0.001])
LOG_HI = np.log10([30.0, 20.0, 40.0, 30.0, 1.5, 1.0])
#: the local search's finite-difference step in log10 of the gains (5 %)
LOCAL_STEP = 0.02
#: mean squared error (rad²) charged for a run in which a guard vented
VENT_COST = 1.0

Progress = Callable[[str], None]


@dataclass(frozen=True)
class TuneConfig:
    task: str = 'triangle'
    duration: float = 8.0  # s per evaluation: all three moves of the triangle (2 s each + hold)
    skip: float = 0.5  # s left out of the error at the start
    local_evals: int = 40  # the local search stops at the first gradient after this many
    global_generations: int = 4
    population: int = 3  # × 6 gains per generation
    seed: int = 0  # of the global search
    noise_seed: int = 7  # of the virtual mocap's noise (fixed: a deterministic objective)
    workers: int = 1  # processes for the evaluations (`Costs`)
    # leg override file of the model tuned on (the plant and the PID's feedforward; e.g. an
    # identified params.yaml); '' = the description as it is. The reference stays the
    # reference node's (the description's triangle), so gains tuned on any model track the
    # same poses.
    leg_overrides: str = ''
    # frames (1/120 s) the valves get each command late beyond the loop's own one: the latency
    # a running graph adds (equimus adapt measures it on the rig)
    delay_frames: int = 0
    # frames more the gains must also hold with: the cost is the mean over delay_frames and
    # delay_frames + delay_margin_frames. A loop tuned to its measured delay alone can sit at
    # the edge of stability, and a rig's loop is later than measured now and then (its board
    # applies codes on a tick of its own, the machine is loaded)
    delay_margin_frames: int = 0

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f'task {self.task!r}: use one of {", ".join(TASKS)}')


def task_reference(task: str, params: StaticParams) -> Waypoints:
    if task == 'triangle':
        return Waypoints(triangle_poses(params).tolist(), move=0.5, hold=1.5)
    if task == 'steps':
        return Waypoints([list(p) for p in STEP_POSES], move=0.3, hold=1.5)
    start = triangle_poses(params)[0].tolist()
    return Waypoints([start, list(UPRIGHT)], move=0.5, hold=3.0, loop=False)


def gains_from_x(x: np.ndarray, base: PIDGains) -> PIDGains:
    g = np.power(10.0, np.clip(x, LOG_LO, LOG_HI))
    return replace(
        base,
        kp=(float(g[0]), float(g[1])),
        ki=(float(g[2]), float(g[3])),
        kd=(float(g[4]), float(g[5])),
    )


def x_from_gains(g: PIDGains) -> np.ndarray:
    return np.clip(np.log10(np.maximum([*g.kp, *g.ki, *g.kd], 1e-9)), LOG_LO, LOG_HI)


def closed_loop_rmse(
    gains: PIDGains,
    task: str,
    duration: float,
    noise_seed: int,
    skip: float = 0.5,
    leg_overrides: str = '',
    plant_overrides: str | None = None,
    delay_frames: int = 0,
) -> tuple[np.ndarray, bool]:
    """(RMSE per joint in rad, whether a guard vented) of the PID on `task` in the sim graph's
    plain-code loop. The PID's feedforward model is `leg_overrides`, the plant's
    `plant_overrides` (default: the same); the reference is the description's. `delay_frames`:
    the valves get each command that many frames later."""
    params = StaticParams.from_leg(load_leg(overrides=leg_overrides or None))
    ref = task_reference(task, StaticParams.from_leg(load_leg()))
    plant = leg_overrides if plant_overrides is None else plant_overrides
    q0 = np.asarray(ref(0.0)[0])
    plant_params = StaticParams.from_leg(load_leg(overrides=plant or None))
    p0 = np.clip(holding_pressures(q0, plant_params), 0.0, 50.0)
    sim = make_simulator(
        overrides=plant or None,
        timestep=PHYSICS_DT,
        initial_q=q0,
        initial_pressures=tuple(p0),
    )
    mocap = VirtualMocap(
        MocapConfig(position_noise=0.0003, orientation_noise=0.002, seed=noise_seed)
    )
    driver = SimulatedDriver()  # the sim graph's valve driver: safety filter + DAC
    actuation = delayed(lambda u, t: driver(u.tolist(), t), int(delay_frames), p0)
    # the reference sends its own future as the reference node does, for a PID with a lead
    preview = PREVIEW_S if gains.lead > 0 else 0.0
    r = run(
        sim,
        mocap,
        PIDController(params, gains),
        ref,
        duration,
        actuation=actuation,
        preview_s=preview,
    )
    return r.rmse(skip=skip), bool(np.any(r.vented))


def delays(cfg: TuneConfig) -> list[int]:
    """The loop delays (frames) a cost is averaged over."""
    return sorted({cfg.delay_frames, cfg.delay_frames + cfg.delay_margin_frames})


def run_cost(job: tuple[PIDGains, TuneConfig, int]) -> float:
    """One closed-loop run's part of a cost: (gains, cfg, delay) → the joint-angle mean squared
    error (rad²), plus VENT_COST if a guard vented (a module function: picklable for workers)."""
    gains, cfg, d = job
    rmse, vented = closed_loop_rmse(
        gains, cfg.task, cfg.duration, cfg.noise_seed, cfg.skip, cfg.leg_overrides, delay_frames=d
    )
    mse = float(np.mean(rmse**2))
    return mse + (VENT_COST if vented or not math.isfinite(mse) else 0.0)


def gains_cost(gains: PIDGains, cfg: TuneConfig) -> float:
    """The tuning's cost of `gains`: `run_cost` averaged over the loop delays cfg names
    (`delay_margin_frames`)."""
    return float(np.mean([run_cost((gains, cfg, d)) for d in delays(cfg)]))


class Costs:
    """`gains_cost` of many gain sets at once, their runs (a set and a delay each) spread over
    cfg.workers spawned processes: the runs are independent, and a cost with a delay margin is
    two of them. Spawned, not forked: the caller may hold threads (DDS, executors) that a fork
    would copy mid-lock. Ctrl-C reaches only the caller."""

    def __init__(self, cfg: TuneConfig) -> None:
        self.cfg = cfg
        self._pool: ProcessPoolExecutor | None = None
        if cfg.workers > 1:
            self._pool = ProcessPoolExecutor(
                max_workers=cfg.workers,
                mp_context=multiprocessing.get_context('spawn'),
                initializer=init_worker,
            )

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        """builtins.map on the workers (scipy's `workers=` takes it)."""
        if self._pool is None:
            return list(map(fn, items))
        return list(self._pool.map(fn, items))

    def __call__(self, gains: Sequence[PIDGains]) -> list[float]:
        ds = delays(self.cfg)
        runs = self.map(run_cost, [(g, self.cfg, d) for g in gains for d in ds])
        return [float(np.mean(runs[i : i + len(ds)])) for i in range(0, len(runs), len(ds))]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> Costs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Spent(Exception):
    """The local search's evaluations are spent (raised through scipy, caught by tune_pid)."""


class _Objective:
    """`gains_cost` of a gain vector (picklable for parallel workers)."""

    def __init__(self, cfg: TuneConfig, base: PIDGains) -> None:
        self.cfg, self.base = cfg, base

    def __call__(self, x: np.ndarray) -> float:
        return gains_cost(gains_from_x(np.asarray(x), self.base), self.cfg)


@dataclass
class TuneResult:
    gains: PIDGains
    start: PIDGains
    cost: float  # mean squared error, rad²
    start_cost: float
    evaluations: int
    seconds: float


def tune_pid(
    cfg: TuneConfig | None = None,
    start: PIDGains | None = None,
    progress: Progress | None = None,
    costs: Costs | None = None,
) -> TuneResult:
    """Local (L-BFGS-B) then global (differential evolution) search from `start` (see module),
    on `costs` (default: its own on cfg.workers processes)."""
    cfg = cfg or TuneConfig()
    if costs is None:
        with Costs(cfg) as own:
            return tune_pid(cfg, start, progress, own)
    from scipy.optimize import differential_evolution, minimize

    start = start or PIDGains()
    say = progress or (lambda _: None)
    f = _Objective(cfg, start)
    t0 = time.perf_counter()
    evals = 0
    best_cost, best_x = math.inf, x_from_gains(start)

    def counted(xs: Sequence[np.ndarray]) -> list[float]:
        nonlocal evals, best_cost, best_x
        cs = costs([gains_from_x(np.asarray(x), start) for x in xs])
        for x, c in zip(xs, cs, strict=True):
            evals += 1
            if c < best_cost:
                best_cost, best_x = c, np.array(x, float)
                say(f'  eval {evals}: MSE {c:.3e} rad² (RMSE {math.sqrt(c):.4f} rad) new best')
        return cs

    def with_gradient(x: np.ndarray) -> tuple[float, np.ndarray]:
        """The cost and its forward differences (steps of LOCAL_STEP, backwards at an upper
        bound), evaluated as one batch: L-BFGS-B's own differences would come one by one.
        Once local_evals are spent the search stops: scipy checks its own count only between
        iterations, and a line search that finds no decrease ran to 148 evaluations."""
        if evals - 1 >= cfg.local_evals:
            raise _Spent
        h = np.where(x + LOCAL_STEP <= LOG_HI, LOCAL_STEP, -LOCAL_STEP)
        cs = counted([x, *(x + np.diag(h))])
        return cs[0], (np.asarray(cs[1:]) - cs[0]) / h

    x0 = x_from_gains(start)
    start_cost = counted([x0])[0]
    say(f'start: gains {_fmt(start)}, MSE {start_cost:.3e} rad²')
    bounds = list(zip(LOG_LO, LOG_HI, strict=True))
    if cfg.local_evals > 0:
        say(f'local search (L-BFGS-B, until {cfg.local_evals} evaluations are spent)')
        with contextlib.suppress(_Spent):
            minimize(with_gradient, x0, jac=True, method='L-BFGS-B', bounds=bounds)
    if cfg.global_generations > 0:
        say(
            f'global search (differential evolution, {cfg.global_generations} generations of '
            f'{cfg.population * len(x0)})'
        )
        rng = np.random.default_rng(cfg.seed)
        n = cfg.population * len(x0)
        init = np.clip(best_x + rng.normal(0.0, 0.3, (n, len(x0))), LOG_LO, LOG_HI)
        init[0] = best_x
        if cfg.workers > 1:
            res = differential_evolution(
                f,
                bounds,
                maxiter=cfg.global_generations,
                init=init,
                seed=cfg.seed,
                polish=False,
                tol=0.0,
                workers=costs.map,
                updating='deferred',
            )
            evals += int(res.nfev)
            if float(res.fun) < best_cost:
                best_cost, best_x = float(res.fun), np.asarray(res.x, float)
                say(f'  global best: MSE {res.fun:.3e} rad²')
        else:
            differential_evolution(
                lambda x: counted([x])[0],
                bounds,
                maxiter=cfg.global_generations,
                init=init,
                seed=cfg.seed,
                polish=False,
                tol=0.0,
            )
    gains = gains_from_x(best_x, start)
    return TuneResult(gains, start, float(best_cost), start_cost, evals, time.perf_counter() - t0)


def _fmt(g: PIDGains) -> str:
    return f'kp {_pair(g.kp)}, ki {_pair(g.ki)}, kd {_pair(g.kd)}'


def _pair(v: tuple[float, float]) -> str:
    return f'[{v[0]:.4g}, {v[1]:.4g}]'


def write_params(path: str | Path, result: TuneResult, cfg: TuneConfig) -> None:
    """The controller node's parameter file with the tuned gains (`params_file:=path`)."""
    g = result.gains
    doc = {
        'controller': {
            'ros__parameters': {
                'kp': [round(v, 6) for v in g.kp],
                'ki': [round(v, 6) for v in g.ki],
                'kd': [round(v, 6) for v in g.kd],
                **({'lead': round(g.lead, 6)} if g.lead > 0 else {}),
            }
        }
    }
    head = (
        f'# PID gains from `equimus tune pid --task {cfg.task}` '
        f'({result.evaluations} closed-loop evaluations of {cfg.duration:g} s, '
        f'{result.seconds:.0f} s).\n'
        f'# Joint-angle RMSE on the model: {math.sqrt(result.start_cost):.4f} rad with the start '
        f'gains, {math.sqrt(result.cost):.4f} rad tuned.\n'
        f'# Use: equimus launch sim params_file:={Path(path).name} (or ros2 launch ... '
        f'params_file:=...).\n'
    )
    Path(path).write_text(head + yaml.safe_dump(doc, sort_keys=False))


def read_gains(path: str | Path, base: PIDGains | None = None) -> PIDGains:
    """The gains of a parameter file written by `write_params` (or any controller section)."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f'{path}: cannot read the parameter file ({exc.strerror})') from None
    except yaml.YAMLError as exc:
        raise ValueError(f'{path}: not YAML ({str(exc).splitlines()[0]})') from None
    try:
        p = doc['controller']['ros__parameters']
    except (KeyError, TypeError):
        raise ValueError(
            f'{path}: no controller gains there (a parameter file with controller: '
            'ros__parameters: kp, ki, kd, e.g. config/tuned_pid.yaml)'
        ) from None
    g = base or PIDGains()

    def pair(key: str, default: tuple[float, float]) -> tuple[float, float]:
        if key not in p:
            return default
        try:
            a, b = (float(v) for v in p[key])
        except (TypeError, ValueError):
            raise ValueError(f'{path}: {key}: {p[key]!r} is not two numbers') from None
        return a, b

    try:
        lead = float(p.get('lead', g.lead))
    except (TypeError, ValueError):
        raise ValueError(f'{path}: lead: {p["lead"]!r} is not a number') from None
    return replace(g, kp=pair('kp', g.kp), ki=pair('ki', g.ki), kd=pair('kd', g.kd), lead=lead)
