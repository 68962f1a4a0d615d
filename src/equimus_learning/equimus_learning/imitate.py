"""A policy taught by an expert controller with DAgger (`equimus train --algo dagger`).

The expert is the LTV MPC on the exact actuation model (equimus_control.ltv_mpc), which plans
over the reference's preview; the learner is a small network that sees what the MPC decides
from (`policy.PREVIEW_LAYOUT`: the estimate, the reference and its next 0.3 s, its last command
and the chamber pressures it gives) and costs a fraction of the MPC's compute. Plain behaviour
cloning trains the network on the expert's states only, and its own small errors then take it
where it has never been taught. DAgger (Ross, Gordon and Bagnell 2011) therefore lets the learner
drive: in iteration i the command sent is the expert's with probability β_i and the learner's
otherwise, the expert labels every state visited, all labels are kept, and the network is refit
on the growing set. When the learner drives, the expert is told what was sent (`LTVMPC.sent`),
so its valve observer follows the real chambers.

Episodes run the plain-code closed loop of the sim graph (`equimus_control.closed_loop.run`:
virtual mocap, estimator, the one `ControlStep`, the valve driver's safety filter) with the
reference sending its preview as the reference node does, on legs drawn from the identified
intervals (`randomize.identified`: stiffness, areas, rest lengths, dampings, the valve dead time
and fill and vent constants) and, for a share of them, on the nominal leg. The expert plans on
the nominal model whatever leg it runs on, as it does on the rig. Episodes are collected on
`workers` processes; the network (tanh hidden layers) is fitted with Adam in NumPy, so the base
install trains it. Each iteration ends with the learner alone on the nominal leg (triangle and
steps, from rest at 0 kPa as the sim graph starts): the iteration with the lowest summed RMSE
there is the one written.
"""

from __future__ import annotations

import math
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from equimus_control.controller import ControlOutput, Estimate, Reference
from equimus_control.policy import (
    MLP,
    PREVIEW_LAYOUT,
    PolicyCore,
    PolicyIO,
    kpa_to_action,
    mlp_arrays,
)
from equimus_control.reference import PREVIEW_S
from equimus_description.valve import MIN_REGULATED_KPA
from equimus_description.workers import init_worker

from .env import RANDOM_HI, RANDOM_LO, STEP_POSES, EpisodeReference
from .randomize import Randomization

#: the nominal leg's validation tasks: (name, poses or None for the triangle, move s)
VALIDATION = (('triangle', None, 0.5), ('steps', STEP_POSES, 0.5))


@dataclass(frozen=True)
class ImitateConfig:
    """One DAgger run; see the module docstring."""

    iterations: int = 8
    episodes: int = 16  # per iteration
    episode_s: float = 12.0
    #: the expert's share of the commands: beta0 · decay^i in iteration i (0 from `pure_after`)
    beta0: float = 1.0
    decay: float = 0.5
    hidden: tuple[int, ...] = (128, 128)
    epochs: int = 20  # per refit
    batch: int = 512
    learning_rate: float = 1e-3
    #: probabilities of the triangle, the step set and random waypoints
    mix: tuple[float, float, float] = (0.4, 0.4, 0.2)
    #: probability that a looping reference starts with the leg at rest at 0 kPa (as the graph)
    rest_start: float = 0.3
    #: the leg the expert plans on, the "nominal" share of the episodes and the validation run
    #: on: an override file (e.g. an identified params.yaml); '' = config/leg.yaml
    leg: str = ''
    #: where the other legs are drawn: an identified leg file (`randomize.identified`: between
    #: config/leg.yaml and it, ± 2 standard errors), intervals of override keys as they are
    #: (a `randomize.Randomization`, drawn on top of `leg`), or '' = the nominal leg only
    randomize: str | Randomization = 'config/leg_fit.yaml'
    nominal_share: float = 0.5  # of the episodes on the nominal leg
    preview: float = PREVIEW_S  # s the reference sends ahead
    #: frames (1/120 s) the valves get each command late beyond the loop's own one, in every
    #: episode, and the expert plans with that much more dead time: the latency a running graph
    #: adds (equimus adapt measures it on the rig; a learner taught without it meets it there)
    delay_frames: int = 0
    validation_s: float = 15.0
    workers: int = 2
    minutes: float = 0.0  # stop after the iteration past this wall time; 0 = no limit
    seed: int = 0
    io: PolicyIO = field(
        default_factory=lambda: PolicyIO(PREVIEW_LAYOUT, min_regulated_kpa=MIN_REGULATED_KPA)
    )

    def __post_init__(self) -> None:
        if self.iterations < 1 or self.episodes < 1 or self.workers < 1:
            raise ValueError('iterations, episodes and workers must be at least 1')
        if self.delay_frames < 0:
            raise ValueError(f'delay_frames {self.delay_frames}: 0 or more frames')
        if not (self.episode_s > 0 and self.validation_s > 0):
            raise ValueError('episode_s and validation_s must be > 0 s')
        if len(self.mix) != 3 or min(self.mix) < 0 or not math.isclose(sum(self.mix), 1.0):
            raise ValueError(f'mix {self.mix}: three probabilities (triangle, steps, random)')
        if not (0 <= self.beta0 <= 1 and 0 <= self.decay <= 1):
            raise ValueError('beta0 and decay must lie in [0, 1]')
        if not (0 <= self.nominal_share <= 1 and 0 <= self.rest_start <= 1):
            raise ValueError('nominal_share and rest_start must lie in [0, 1]')

    def beta(self, iteration: int) -> float:
        return self.beta0 * self.decay**iteration


@dataclass
class Episode:
    """What one episode sends back: the learner's observations, the expert's actions (its
    commands before the low-band modulation, as actions in [-1, 1]) and the tracking RMSE."""

    obs: np.ndarray
    actions: np.ndarray
    rmse: np.ndarray
    task: str


class Teacher:
    """A `Controller` that runs the expert and the learner side by side: every cycle the expert
    labels the learner's observation, and the command of one of them is sent (the expert's
    with probability `beta`)."""

    def __init__(self, expert: Any, core: PolicyCore, mlp: MLP | None, beta: float, rng) -> None:
        self.expert, self.core, self.mlp, self.beta, self.rng = expert, core, mlp, beta, rng
        self.obs: list[np.ndarray] = []
        self.labels: list[np.ndarray] = []

    def reset(self) -> None:
        self.expert.reset()
        self.core.reset()

    def step(self, state: Estimate, ref: Reference, dt: float, p_max: float) -> ControlOutput:
        obs = _observe(self.core, state, ref, dt, p_max)
        out = self.expert.step(state, ref, dt, p_max)
        demand = np.asarray(out.info.get('demand', out.pressures), float)
        self.obs.append(obs)
        self.labels.append(kpa_to_action(demand, p_max))
        if self.mlp is None or self.rng.uniform() < self.beta:
            self.core.sent(out.pressures)
            return out
        mine = _learner_output(self.core, self.mlp, obs, p_max)
        self.expert.sent(mine.pressures)
        return mine


class Learner:
    """The learner alone, as a `Controller`: what a validation episode runs. The Teacher at
    beta 0 sends the same commands, but also plans the expert's labels every cycle, which are
    thrown away there and cost most of an episode."""

    def __init__(self, core: PolicyCore, mlp: MLP) -> None:
        self.core, self.mlp = core, mlp
        self.obs: list[np.ndarray] = []
        self.labels: list[np.ndarray] = []

    def reset(self) -> None:
        self.core.reset()

    def step(self, state: Estimate, ref: Reference, dt: float, p_max: float) -> ControlOutput:
        return _learner_output(
            self.core, self.mlp, _observe(self.core, state, ref, dt, p_max), p_max
        )


def _observe(core: PolicyCore, state: Estimate, ref: Reference, dt: float, p_max: float):
    """The learner's observation of one cycle (the reference's preview ahead included)."""
    ahead = ref.at(np.asarray(core.ahead)) if core.ahead else None
    return core.observe(state.q, state.qd, ref.q, ref.qd, dt, p_max, q_ahead=ahead)[0]


def _learner_output(core: PolicyCore, mlp: MLP, obs, p_max: float) -> ControlOutput:
    """The learner's command for an observation (remembered by `core` for the next one)."""
    u = core.command(mlp(obs), p_max)[0]
    return ControlOutput(u, (u <= 0.0) | (u >= p_max))


def _reference(
    rng: np.random.Generator, cfg: ImitateConfig, triangle: np.ndarray
) -> tuple[str, EpisodeReference]:
    kind = ('triangle', 'steps', 'random')[int(rng.choice(3, p=np.asarray(cfg.mix, float)))]
    if kind == 'random':
        poses = rng.uniform(RANDOM_LO, RANDOM_HI, (4, 2))
        move, hold = float(rng.uniform(0.3, 0.8)), float(rng.uniform(0.4, 1.2))
        return kind, EpisodeReference(poses, move, hold, loop=False)
    poses = triangle if kind == 'triangle' else np.asarray(STEP_POSES, float)
    move = 0.5 if kind == 'triangle' else float(rng.choice([0.3, 0.5]))
    hold = 1.5
    if rng.uniform() < cfg.rest_start:
        return kind, EpisodeReference(poses, move, hold, True, 0.0, rest=True)
    v = int(rng.integers(len(poses)))
    t0 = v * (move + hold) + move + float(rng.uniform(0.0, hold))
    return kind, EpisodeReference(poses, move, hold, True, t0)


def _episode(job: dict[str, Any]) -> Episode:
    """One closed-loop episode (a worker process runs it; everything it needs is in `job`)."""
    from equimus_control.closed_loop import delayed
    from equimus_control.closed_loop import run as run_loop
    from equimus_control.ltv_mpc import LTVMPC, LTVMPCConfig
    from equimus_control.policy import mlp_from_arrays
    from equimus_control.reference import triangle_poses
    from equimus_control.step import PERIOD
    from equimus_description.dynamics import DynamicParams, LegDynamics
    from equimus_description.leg import load_leg, load_overrides
    from equimus_description.statics import StaticParams, holding_pressures
    from equimus_hw.valve.stage import SimulatedDriver
    from equimus_sim.leg_model import LegModel
    from equimus_sim.mocap import MocapConfig, VirtualMocap
    from equimus_sim.simulator import make_simulator

    cfg: ImitateConfig = job['cfg']
    rng = np.random.default_rng(job['seed'])
    base = load_overrides(cfg.leg) if cfg.leg else {}
    nominal = load_leg(overrides=base or None)
    params = StaticParams.from_leg(nominal)
    # the reference node's triangle: the description's static model, whatever the controller's
    triangle = triangle_poses(StaticParams.from_leg(load_leg()))
    if job.get('task'):
        name, poses, move = next(v for v in VALIDATION if v[0] == job['task'])
        kind = name
        ref = EpisodeReference(
            triangle if poses is None else np.asarray(poses, float), move, 1.5, True, rest=True
        )
    else:
        kind, ref = _reference(rng, cfg, triangle)
    overrides = {**base, **(job['overrides'] or {})} or None
    if ref.rest:
        q0 = LegModel(load_leg(overrides=overrides)).static_equilibrium(np.zeros(2))
        p0 = np.zeros(2)
    else:
        q0 = ref.start
        p0 = np.clip(holding_pressures(q0, params), 0.0, 50.0)
    sim = make_simulator(
        overrides=overrides, timestep=1 / 1200, initial_q=q0, initial_pressures=tuple(p0)
    )
    mocap = VirtualMocap(
        MocapConfig(
            position_noise=0.0003,
            orientation_noise=0.002,
            seed=int(rng.integers(2**31)),
        )
    )
    mlp = None if job['mlp'] is None else mlp_from_arrays(job['mlp'], 'the learner')
    teacher: Teacher | Learner
    if mlp is not None and job['beta'] == 0.0:
        teacher = Learner(PolicyCore(cfg.io, params, 1), mlp)
    else:
        valve = replace(
            nominal.valve, dead_time=nominal.valve.dead_time + cfg.delay_frames * PERIOD
        )
        expert = LTVMPC(LegDynamics(DynamicParams.from_leg(nominal)), LTVMPCConfig(), valve)
        expert.reset(p_valve=p0)
        teacher = Teacher(expert, PolicyCore(cfg.io, params, 1), mlp, job['beta'], rng)
    duration = job['duration']
    actuation = delayed(SimulatedDriver(), cfg.delay_frames, p0)
    r = run_loop(sim, mocap, teacher, ref, duration, actuation=actuation, preview_s=cfg.preview)
    return Episode(np.array(teacher.obs), np.array(teacher.labels), r.rmse(skip=0.5), kind)


def fit_mlp(
    X: np.ndarray,
    Y: np.ndarray,
    io: PolicyIO,
    hidden: tuple[int, ...],
    epochs: int,
    batch: int,
    learning_rate: float,
    rng: np.random.Generator,
    start: MLP | None = None,
) -> tuple[MLP, float]:
    """A tanh network (`policy.MLP`, output clipped to [-1, 1]) fitted to actions Y (n, 2) of
    observations X by Adam on the mean squared error; `start` continues from its weights
    (the observation normalisation is taken afresh from X). Returns it and its final loss."""
    mean = X.mean(axis=0)
    std = np.maximum(X.std(axis=0), 1e-6)
    Z = np.clip((X - mean) / std, -10.0, 10.0)
    sizes = [X.shape[1], *hidden, Y.shape[1]]
    if start is not None and [W.shape for W in start.weights] == list(
        zip(sizes[:-1], sizes[1:], strict=True)
    ):
        Ws = [W.copy() for W in start.weights]
        bs = [b.copy() for b in start.biases]
    else:
        Ws = [
            rng.normal(0.0, math.sqrt(1.0 / a), (a, b))
            for a, b in zip(sizes[:-1], sizes[1:], strict=True)
        ]
        bs = [np.zeros(b) for b in sizes[1:]]
    params = Ws + bs
    m1 = [np.zeros_like(p) for p in params]
    m2 = [np.zeros_like(p) for p in params]
    b1, b2, eps = 0.9, 0.999, 1e-8
    n, t, loss = len(X), 0, math.inf
    for _ in range(epochs):
        order = rng.permutation(n)
        total = 0.0
        for s in range(0, n, batch):
            idx = order[s : s + batch]
            acts = [Z[idx]]
            for W, b in zip(Ws[:-1], bs[:-1], strict=True):
                acts.append(np.tanh(acts[-1] @ W + b))
            out = acts[-1] @ Ws[-1] + bs[-1]
            err = out - Y[idx]
            total += float(np.sum(err**2))
            g = 2.0 * err / len(idx)
            grads_W: list[np.ndarray] = []
            grads_b: list[np.ndarray] = []
            for k in range(len(Ws) - 1, -1, -1):
                grads_W.append(acts[k].T @ g)
                grads_b.append(g.sum(axis=0))
                if k:
                    g = (g @ Ws[k].T) * (1.0 - acts[k] ** 2)
            grads = grads_W[::-1] + grads_b[::-1]
            t += 1
            for p, gr, a, v in zip(params, grads, m1, m2, strict=True):
                a *= b1
                a += (1 - b1) * gr
                v *= b2
                v += (1 - b2) * gr**2
                p -= learning_rate * (a / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        loss = total / n
    mlp = MLP(tuple(Ws), tuple(bs), 'tanh', mean, std, 10.0, 'clip', io)
    return mlp, loss


@dataclass
class ImitateResult:
    mlp: MLP
    #: per iteration: samples, beta, fit loss and the labels' variance, validation RMSE
    #: {task: (hip, knee)}, seconds
    history: list[dict[str, Any]]
    best_iteration: int
    seconds: float


def with_valve_of(io: PolicyIO, leg_file: str) -> PolicyIO:
    """`io` with the fill and vent constants of the valves of `leg_file` (an override file)."""
    from equimus_description.leg import load_leg

    v = load_leg(overrides=leg_file).valve

    def pair(x: Any) -> tuple[float, float]:
        a = np.broadcast_to(np.asarray(x, float), (2,))
        return (float(a[0]), float(a[1]))

    return replace(io, valve_tau_fill=pair(v.tau_fill), valve_tau_vent=pair(v.tau_vent))


def imitate(
    cfg: ImitateConfig | None = None, progress: Callable[[str], None] | None = None
) -> ImitateResult:
    """Run DAgger (see the module docstring)."""
    cfg = cfg if cfg is not None else ImitateConfig()
    if cfg.leg:  # the learner's valve estimates (p_est) on the leg the expert plans on
        cfg = replace(cfg, io=with_valve_of(cfg.io, cfg.leg))
    say = progress or (lambda _text: None)
    start = time.monotonic()
    rng = np.random.default_rng(cfg.seed)
    draw = None
    if isinstance(cfg.randomize, Randomization):
        draw = cfg.randomize
    elif cfg.randomize:
        from .randomize import identified

        draw = identified(cfg.randomize)
    X: list[np.ndarray] = []
    Y: list[np.ndarray] = []
    mlp: MLP | None = None
    best: tuple[float, int, MLP] | None = None
    history: list[dict[str, Any]] = []
    # spawned workers: the caller may hold threads (DDS, executors) that a fork would copy
    # mid-lock
    context = multiprocessing.get_context('spawn')
    with ProcessPoolExecutor(
        max_workers=cfg.workers, mp_context=context, initializer=init_worker
    ) as pool:
        for it in range(cfg.iterations):
            t_it = time.monotonic()
            beta = cfg.beta(it) if mlp is not None else 1.0
            sent = None if mlp is None else mlp_arrays(mlp)
            jobs = []
            for _ in range(cfg.episodes):
                nominal = draw is None or rng.uniform() < cfg.nominal_share
                jobs.append(
                    {
                        'cfg': cfg,
                        'seed': int(rng.integers(2**31)),
                        'overrides': None if nominal or draw is None else draw.sample(rng),
                        'mlp': sent,
                        'beta': beta,
                        'duration': cfg.episode_s,
                    }
                )
            episodes = list(pool.map(_episode, jobs))
            X.extend(e.obs for e in episodes)
            Y.extend(e.actions for e in episodes)
            Xa, Ya = np.concatenate(X), np.concatenate(Y)
            mlp, loss = fit_mlp(
                Xa,
                Ya,
                cfg.io,
                cfg.hidden,
                cfg.epochs,
                cfg.batch,
                cfg.learning_rate,
                rng,
                start=mlp,
            )
            checks = [
                {
                    'cfg': cfg,
                    'seed': 10_000 + i,
                    'overrides': None,
                    'mlp': mlp_arrays(mlp),
                    'beta': 0.0,
                    'duration': cfg.validation_s,
                    'task': name,
                }
                for i, (name, _, _) in enumerate(VALIDATION)
            ]
            valid = {e.task: e.rmse for e in pool.map(_episode, checks)}
            score = float(sum(np.sum(v) for v in valid.values()))
            history.append(
                {
                    'iteration': it,
                    'samples': len(Xa),
                    'beta': beta,
                    'loss': loss,
                    'label_variance': float(np.mean(np.var(Ya, axis=0))),
                    'validation_rmse': {k: [float(x) for x in v] for k, v in valid.items()},
                    'seconds': time.monotonic() - t_it,
                }
            )
            if best is None or score < best[0]:
                best = (score, it, mlp)
            leg_name = Path(cfg.leg).name if cfg.leg else 'nominal'
            say(
                f'iteration {it + 1}/{cfg.iterations}: beta {beta:.2f}, {len(Xa)} samples, '
                f'fit loss {loss:.4f}; learner alone, leg {leg_name}: '
                + ', '.join(f'{k} {v[0]:.4f}/{v[1]:.4f}' for k, v in valid.items())
                + f' rad ({time.monotonic() - t_it:.0f} s)'
            )
            if cfg.minutes and time.monotonic() - start > 60.0 * cfg.minutes:
                say(f'stopping: past {cfg.minutes:g} min')
                break
    assert best is not None
    return ImitateResult(best[2], history, best[1], time.monotonic() - start)
