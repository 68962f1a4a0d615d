"""Predictive sampling on batched rollouts of the full EquiMus model (MuJoCo MPC's simplest planner,
Howell et al. 2022, which the EquiMus paper cites).

Each control period: the previous best pressure plan, shifted by one period, and `samples − 2`
Gaussian perturbations of it, plus the constant static-holding plan of the reference, are rolled
out from the measured state through the full model (3-2-1 actuators, loop closures) with the
valve lag, in one `mujoco.rollout` call on `threads` threads. The cheapest plan becomes the
nominal and its first value is the command. A plan is `knots` values per valve spread evenly over
the horizon and interpolated linearly; the rollouts step the model at the control period
(implicitfast stays within 0.01 rad of Δt = 1/1200 s over 1.5 s swings at that step), so the
0.25 s horizon is 30 steps.

No linearisation and no QP: the cost can be anything computed from the rolled-out states, and
the model is the one the simulation runs. The price is compute, which grows with samples ×
horizon; the defaults fit the 8.3 ms period with room on 2 cores (benchmarks/bench_control.py).
The valve pressures are not measured; they are predicted from the commands sent, as in the
linear MPC, through the description's valve model (equimus_description.valve.follow: dead time,
fill and vent constants), which also turns every plan into the pressures its rollout applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from equimus_description.config import check_pair, param, validate_fields
from equimus_description.statics import StaticParams, holding_pressures
from equimus_description.valve import HARD_MAX_KPA, VALVE_TAU_S, ValveParams, follow

from .controller import ControlOutput, Estimate, Reference
from .plant import PlantModel

# mujoco is imported where used: every controller process imports this module for SamplingConfig
# (controllers.configs declares every kind's parameters), and a PID controller's start need not
# pay the 0.1 s it takes to import.


@dataclass(frozen=True)
class SamplingConfig:
    """Predictive sampling settings, fixed at start-up (buffers and thread pool are sized from
    them). Parameter names carry the prefix `sampling_`."""

    horizon: float = param(0.25, 's, planning horizon', range=(0.02, 5.0))
    knots: int = param(4, 'plan values per valve over the horizon', range=(2, 100))
    samples: int = param(
        12, 'rollouts per control period (nominal + static plan + perturbations)', range=(3, 10000)
    )
    sigma: float = param(6.0, 'kPa, perturbation of each plan value', range=(0.0, HARD_MAX_KPA))
    w_theta: tuple[float, float] = param(
        (1.0, 1.0), 'cost per rad² of angle error per step [hip, knee]', range=(0.0, 1e9)
    )
    w_vel: float = param(0.002, 'cost per (rad/s)² per step', range=(0.0, 1e9))
    w_u: float = param(
        2e-6, 'cost per kPa² away from the static pressures of the target', range=(0.0, 1e9)
    )
    du_max: float = param(
        25.0, 'kPa per control period, rate limit of the command', range=(0.01, HARD_MAX_KPA)
    )
    threads: int = param(2, 'rollout threads', range=(1, 64))
    seed: int = param(0, 'seed of the perturbations', range=(0, 2**31 - 1))
    period: float = 1.0 / 120.0  # s, control period = the planning model's step
    valve_tau: float = VALVE_TAU_S  # s; the lag used when no valve model is given

    def __post_init__(self) -> None:
        validate_fields(self)
        check_pair('w_theta', self.w_theta)


class PredictiveSampling:
    """Receding-horizon pressure commands from (θ, θ̇) and the reference pose."""

    def __init__(
        self,
        leg_model: PlantModel,
        params: StaticParams,
        cfg: SamplingConfig | None = None,
        valve: ValveParams | None = None,
    ) -> None:
        """valve: the valve model (the leg description's `valve`); None = the lag of
        cfg.valve_tau."""
        cfg = cfg if cfg is not None else SamplingConfig()
        self.valve = valve if valve is not None else ValveParams.lag(cfg.valve_tau)
        if cfg.samples < 3 or cfg.knots < 2:
            raise ValueError('predictive sampling needs samples >= 3 and knots >= 2')
        self.cfg, self.params, self.lm = cfg, params, leg_model
        m = leg_model.model
        if abs(m.opt.timestep - cfg.period) > 1e-12:
            raise ValueError(
                f'the planning model must step at the control period '
                f'({cfg.period:g} s), '
                f'not {m.opt.timestep:g} s: build it with leg.with_timestep(period)'
            )
        self.model = m
        self.steps = max(2, int(round(cfg.horizon / cfg.period)))
        self.knot_t = np.linspace(0.0, self.steps * cfg.period, cfg.knots)
        self.step_t = np.arange(self.steps) * cfg.period
        import mujoco
        import mujoco.rollout

        self.spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
        nstate = mujoco.mj_stateSize(m, self.spec)
        self._data = mujoco.MjData(m)
        self._threads = [mujoco.MjData(m) for _ in range(max(1, cfg.threads))]
        self._models = [m] * cfg.samples
        # our own pool, kept for the controller's life (starting threads every period costs
        # about as much as a third of the rollouts)
        self._roller = mujoco.rollout.Rollout(nthread=cfg.threads if cfg.threads > 1 else 0)
        self._init = np.zeros((cfg.samples, nstate))
        self._ctrl = np.zeros((cfg.samples, self.steps, m.nu))
        self._state = np.zeros((cfg.samples, self.steps, nstate))
        self._qcols = 1 + np.asarray(leg_model.qpos_idx)
        self._vcols = 1 + m.nq + np.asarray(leg_model.qvel_idx)
        # ctrl = pressures (kPa) · _force.T: every motor of an actuator gets its F = S·P
        per_kpa = leg_model.forces_from_pressures(np.ones(len(leg_model.actuator_names)))
        self._force = np.zeros((m.nu, len(per_kpa)))
        for i, idx in enumerate(leg_model.ctrl_idx):
            self._force[idx, i] = per_kpa[i]
        self._w_theta = np.asarray(cfg.w_theta, float)
        self.rng = np.random.default_rng(cfg.seed)
        self.reset()

    def reset(self, p_valve: np.ndarray | None = None) -> None:
        self.p_valve = np.zeros(2) if p_valve is None else np.asarray(p_valve, float)
        self.u_last = self.p_valve.copy()
        self._history: np.ndarray | None = None  # commands the dead time holds (None: settled)
        self.nominal = None  # (knots, 2) kPa at knot_t from the last plan's start
        self.last_cost = math.nan

    # ----- one period ------------------------------------------------------------------------
    def step(self, state: Estimate, ref: Reference, dt: float, p_max: float) -> ControlOutput:
        """One command (kPa) for the next period."""
        c = self.cfg
        q, qd = np.asarray(state.q, float), np.asarray(state.qd, float)
        u_star = np.clip(holding_pressures(ref.q, self.params), 0.0, p_max)
        plans = self._candidates(u_star, p_max)
        commands = self._interpolate(plans)  # (S, steps, 2)
        states = self._rollout(q, qd, commands)
        cost = self._cost(states, commands, ref.at(self.step_t), u_star)
        best = int(np.argmin(cost))
        self.nominal = plans[best]
        self.last_cost = float(cost[best])
        u = commands[best, 0]
        u = np.clip(u, self.u_last - c.du_max, self.u_last + c.du_max)
        u = np.clip(u, 0.0, p_max)
        sat = (u <= 1e-6) | (u >= p_max - 1e-6)
        self.u_last = u.copy()
        p, self._history = follow(self.valve, u[None], self.p_valve, c.period, self._history)
        self.p_valve = p[0]
        return ControlOutput(u, sat, {'best': best, 'cost': self.last_cost})

    def _candidates(self, u_star: np.ndarray, p_max: float) -> np.ndarray:
        """(samples, knots, 2): shifted nominal, the static plan, perturbations of the nominal."""
        c = self.cfg
        if self.nominal is None:
            nominal = np.tile(u_star, (c.knots, 1))
        else:  # the last plan, one period later; its end value is held
            t = np.minimum(self.knot_t + c.period, self.knot_t[-1])
            nominal = np.stack([np.interp(t, self.knot_t, self.nominal[:, i]) for i in range(2)], 1)
        plans = np.empty((c.samples, c.knots, 2))
        plans[0] = nominal
        plans[1] = u_star
        plans[2:] = nominal + self.rng.normal(0.0, c.sigma, (c.samples - 2, c.knots, 2))
        return np.clip(plans, 0.0, p_max)

    def _interpolate(self, plans) -> np.ndarray:
        # linear interpolation of every plan at the step times, vectorised over plans and valves
        t = self.step_t
        j = np.clip(np.searchsorted(self.knot_t, t, side='right') - 1, 0, len(self.knot_t) - 2)
        w = ((t - self.knot_t[j]) / (self.knot_t[j + 1] - self.knot_t[j]))[None, :, None]
        return plans[:, j] * (1 - w) + plans[:, j + 1] * w

    def _rollout(self, q, qd, commands) -> np.ndarray:
        """Roll every plan out from the measured state; (S, steps, nstate) after each step."""
        import mujoco

        m, d = self.model, self._data
        self.lm.reset(d, q, qd)
        mujoco.mj_getState(m, d, self._init[0], self.spec)
        self._init[1:] = self._init[0]
        # the valve per step from the predicted valve state and the commands in flight, its
        # pressure at the end of the step applied in that step (as the simulator does)
        hist = self._history
        p, _ = follow(
            self.valve, commands, self.p_valve, self.cfg.period, None if hist is None else hist
        )
        np.matmul(p, self._force.T, out=self._ctrl)
        self._roller.rollout(
            self._models,
            self._threads,
            self._init,
            self._ctrl,
            nstep=self.steps,
            state=self._state,
            skip_checks=True,
        )
        return self._state

    def close(self) -> None:
        """Stop the rollout threads (also done when the controller is garbage-collected)."""
        self._roller.close()

    def _cost(
        self, states: np.ndarray, commands: np.ndarray, target: np.ndarray, u_star: np.ndarray
    ) -> np.ndarray:
        """Cost of each rollout; `target` (steps, 2) is the reference previewed at each step."""
        theta = states[:, :, self._qcols]
        vel = states[:, :, self._vcols]
        e = theta - target[None, :, :]
        c = self.cfg
        cost = (
            np.einsum('skj,j->s', e * e, self._w_theta)
            + c.w_vel * np.einsum('skj->s', vel * vel)
            + c.w_u * np.einsum('skj->s', (commands - u_star) ** 2)
        ) / self.steps
        return np.where(np.isfinite(cost), cost, np.inf)
