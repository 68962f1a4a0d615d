"""The tracking task as a batched vector environment, for throughput (tens of thousands of steps/s).

`TrackEnv` runs the sim graph's objects one environment at a time (≈ 4,000 steps/s here, mostly
Python). `VectorTrackEnv` runs the same chain for N environments as array operations:

- command: action → [0, p_max] kPa; the joint-limit guard of `ControlStep` vents (0 kPa) an
  environment whose estimate is outside the safe range;
- valve driver: clamp to [0, max_kpa] (NaN → 0), slew limit per period, and the DAC quantisation
  as a table of the driver's own calibration (`DriverConfig.calibration()`, kPa → code → kPa, on
  a 1e-3 kPa grid);
- valves: the description's valve model (`equimus_description.valve.hold`: dead time, fill and
  vent dynamics, the regulator, the lag's closed form per physics step) for the command held
  over the period, all N environments at once, turned into per-step motor forces F = S·P (with
  `randomize`, each environment's own dead time and fill and vent constants, no regulator);
- physics: one `mujoco.rollout` call of all N environments × 10 physics steps (1/1200 s),
  multithreaded (`nthread`);
- estimation: the hinge angles plus Gaussian noise of the virtual mocap's orientation noise
  (σ = √2·σ_orientation: two noisy bodies per hinge), dropped frames held as the estimator holds
  them, and the estimator's constant-velocity Kalman filter per joint, vectorised.

Differences from `TrackEnv`, which is the reference: the estimator sees angles with equivalent
noise, not noisy poses; each rollout starts MuJoCo's solver from a zero warm start; the rearm
margin of the guard is not modelled (an environment that leaves the safe range terminates).
Gymnasium conventions, as `gymnasium.make_vec(..., vectorization_mode='sync')` of `TrackEnv`
gives them: `metadata['autoreset_mode']` is NEXT_STEP by default (Gymnasium's default for
sync and async, so every vectorisation mode behaves alike) and SAME_STEP on request (the
stable-baselines3 adapter, `equimus_learning.sb3`); `reset(seed=int)` seeds environment i with
seed + i, `reset(seed=[...])` each with its own (None keeps its generator), and environment i
with seed s draws the same references, noise and drops whatever the other environments are;
`reset(options={'reset_mask': mask})` resets only the masked environments; `infos` carries the
single environment's keys (q, q_ref, pressures, vented, tracking_error) with their `_key`
masks, and in SAME_STEP mode `final_obs` / `final_info` of the environments that finished.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium.vector import AutoresetMode
from mujoco import rollout

from equimus_control.estimation import EstimatorConfig
from equimus_control.policy import PolicyCore, kpa_to_action
from equimus_control.reference import min_jerk, triangle_poses
from equimus_description.leg import load_leg
from equimus_description.statics import StaticParams, holding_pressures
from equimus_description.valve import ValveMemory, hold
from equimus_hw.valve.config import DriverConfig
from equimus_sim.leg_model import LegModel
from equimus_sim.render import RENDER_FPS

from .env import (
    STEP_POSES,
    TrackConfig,
    check_options,
    draw_reference,
    episode_steps,
)

PERIOD = 1.0 / 120.0
LUT_STEP_KPA = 1e-3


@dataclass
class _Variant:
    """One leg the environments may run on: its model, static map, motor gains and valve."""

    lm: LegModel
    params: StaticParams
    gain: np.ndarray  # N per kPa, per actuator
    delay_steps: int  # dead time in physics steps
    a_fill: np.ndarray  # per-physics-step decay of the fill and vent lags, per valve
    a_vent: np.ndarray
    scratch: Any
    rest_q: np.ndarray | None = None  # at rest at 0 kPa, computed when first needed

    @classmethod
    def of(cls, leg: Any, lm: LegModel, params: StaticParams, dt: float) -> _Variant:
        v = leg.valve
        fill = np.broadcast_to(np.asarray(v.tau_fill, float), (2,))
        vent = np.broadcast_to(np.asarray(v.tau_vent, float), (2,))
        return cls(
            lm,
            params,
            np.asarray(lm.areas, float) * 1e3,
            int(round(v.dead_time / dt)),
            np.exp(-dt / fill),
            np.exp(-dt / vent),
            mujoco.MjData(lm.model),
        )


class VectorTrackEnv(gym.vector.VectorEnv):
    """N tracking environments as arrays (see the module docstring)."""

    metadata: dict[str, Any] = {
        'autoreset_mode': AutoresetMode.NEXT_STEP,
        'render_modes': ['rgb_array'],
        'render_fps': RENDER_FPS,
    }

    def __init__(
        self,
        num_envs: int = 64,
        nthread: int = 2,
        config: TrackConfig | None = None,
        render_mode: str | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        max_episode_steps: int | None = None,
        **kw: Any,
    ) -> None:
        if max_episode_steps is not None:  # gymnasium.make_vec passes the spec's TimeLimit
            if 'episode_s' in kw and episode_steps(kw['episode_s']) != max_episode_steps:
                raise ValueError(
                    f'episode_s={kw["episode_s"]} is {episode_steps(kw["episode_s"])} steps but '
                    f'max_episode_steps={max_episode_steps}: pass one of them, or both agreeing'
                )
            kw['episode_s'] = max_episode_steps * PERIOD
        self.cfg = replace(config or TrackConfig(), **kw)
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        if self.autoreset_mode == AutoresetMode.DISABLED:
            raise ValueError('autoreset_mode: NEXT_STEP or SAME_STEP')
        self.metadata = dict(self.metadata, autoreset_mode=self.autoreset_mode)
        if render_mode not in (None, 'rgb_array'):
            raise ValueError(
                f"render_mode {render_mode!r}: the vector env renders 'rgb_array' (a frame per "
                "environment); for a window use TrackEnv with render_mode='human'"
            )
        self.render_mode = render_mode
        if self.cfg.privileged:
            raise ValueError('VectorTrackEnv has no privileged observation; use TrackEnv')
        self.num_envs = n = int(num_envs)
        self._dt = self.cfg.physics_dt
        self._substeps = int(round(PERIOD / self._dt))
        leg = load_leg(overrides=self.cfg.leg_overrides or None).with_timestep(self._dt)
        self.params = StaticParams.from_leg(leg)
        # the controller's and the reference node's model of the leg (config/leg.yaml)
        self.control_params = StaticParams.from_leg(load_leg())
        self.lm = LegModel(leg)
        self.model = self.lm.model
        self.nthread = max(1, int(nthread))
        self.datas = [mujoco.MjData(self.model) for _ in range(self.nthread)]
        self._models = [self.model] * n  # rollout's fast path (skip_checks) takes one per env
        self._scratch = mujoco.MjData(self.model)
        self._variants = self._build_variants(leg)
        self.variant = np.zeros(n, dtype=int)  # each environment's leg (self._variants)
        self._runner = rollout.Rollout(nthread=self.nthread)
        self._state_sig = mujoco.mjtState.mjSTATE_FULLPHYSICS
        nstate = mujoco.mj_stateSize(self.model, self._state_sig)
        self._qpos0 = mujoco.mj_stateSize(self.model, mujoco.mjtState.mjSTATE_TIME)
        self._qvel0 = self._qpos0 + self.model.nq
        self.state = np.zeros((n, nstate))
        self._out = np.zeros((n, self._substeps, nstate))
        self._ctrl = np.zeros((n, self._substeps, self.model.nu))
        gain = np.asarray(self.lm.areas, float) * 1e3  # N per kPa
        ctrl_act = np.zeros(self.model.nu, dtype=int)
        for i, row in enumerate(np.asarray(self.lm.ctrl_idx).reshape(len(gain), -1)):
            ctrl_act[row] = i
        self._motor_gain, self._motor_act = gain[ctrl_act], ctrl_act
        self._env_gain = np.tile(self._motor_gain, (n, 1))  # per environment's leg
        self.valve = leg.valve
        drv = DriverConfig()
        cal = drv.calibration()
        self._max_kpa = float(drv.max_kpa)
        self._slew = float(drv.slew_rate_kpa_s) * PERIOD
        grid = np.arange(0.0, self._max_kpa + LUT_STEP_KPA, LUT_STEP_KPA)
        self._lut = np.array([cal.code_to_kpa(cal.kpa_to_code(float(p))) for p in grid])
        est = EstimatorConfig()
        self._sigma_z = math.sqrt(2.0) * self.cfg.orientation_noise
        self._R = max(est.sigma_meas**2, 1e-12)
        self._qa = est.sigma_acc**2
        self._max_hold = est.max_hold
        self._safe_lo = np.asarray(self.cfg.safety.safe_min, float)
        self._safe_hi = np.asarray(self.cfg.safety.safe_max, float)
        self.max_steps = episode_steps(self.cfg.episode_s)
        self._triangle = triangle_poses(self.control_params)
        n_obs = len(self.cfg.io.layout)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (n_obs,), np.float64)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, n)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, n)
        K = max(self.cfg.random_waypoints, len(STEP_POSES), len(self._triangle))
        self.poses = np.zeros((n, K, 2))
        self.n_poses = np.full(n, K)
        self.move = np.ones(n)
        self.hold = np.ones(n)
        self.loop = np.zeros(n, bool)
        self.t0 = np.zeros(n)  # s: the reference time each episode starts at
        self.k = np.zeros(n, dtype=int)
        self.p_valve = np.zeros((n, 2))  # kPa, valve pressures
        # per environment: the per-step commands the valve's dead time still holds, the
        # regulator's integral and slack (equimus_description.valve.ValveMemory)
        self._memory = ValveMemory.settled(self.valve, np.zeros((n, 2)), self._dt)
        self.out = np.zeros((n, 2))  # kPa, the driver's output (after slew)
        self.u_prev = np.zeros((n, 2))  # kPa, last command (as the policy controller keeps it)
        self.core = PolicyCore(self.cfg.io, self.control_params, n)  # the policy's view
        self._obs_buf = np.zeros((n, n_obs))
        # per-environment valves (randomised legs): commands of the last periods, latest first
        self._valve_hist = np.zeros((n, self._valve_depth, 2))
        v0 = self._variants[0]
        self._env_valve = (
            np.full(n, v0.delay_steps),
            np.tile(v0.a_fill, (n, 1)),
            np.tile(v0.a_vent, (n, 1)),
        )
        self.x = np.zeros((n, 2, 2))  # Kalman state [joint, (angle, rate)]
        self.P = np.zeros((n, 2, 3))  # covariance (p00, p01, p11) per joint
        self.held = np.zeros(n)  # s since the last good frame
        self.est_q = np.zeros((n, 2))
        self.est_qd = np.zeros((n, 2))
        self.rngs = [np.random.default_rng() for _ in range(n)]
        # each episode's measurement noise and drops, drawn at its reset from its env's generator
        self._noise_buf = np.zeros((n, self.max_steps + 1, 2))
        self._drop_buf = np.zeros((n, self.max_steps + 1), bool)
        self._autoreset = np.zeros(n, bool)
        self._renderer: Any = None

    # ----- randomised legs ----------------------------------------------------------------------
    def _build_variants(self, leg: Any) -> list[_Variant]:
        """The legs episodes draw from: the configured one, or `cfg.randomize.pool` legs drawn
        from its intervals (built once, from the randomisation's own seed: the pool is part of
        the environment, like its model; each episode draws one of them)."""
        rand = self.cfg.randomize
        if rand is None:
            self._valve_depth = 1
            return [_Variant.of(leg, self.lm, self.params, self._dt)]
        rng = np.random.default_rng(rand.seed)
        out = []
        for _ in range(rand.pool):
            overrides = dict(rand.sample(rng))
            vleg = load_leg(overrides=overrides).with_timestep(self._dt)
            out.append(_Variant.of(vleg, LegModel(vleg), StaticParams.from_leg(vleg), self._dt))
        self._valve_depth = 2 + max(v.delay_steps for v in out) // self._substeps
        return out

    # ----- reference ---------------------------------------------------------------------------
    def _reference(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = self.poses.shape[0]
        t = t + self.t0
        seg = self.move + self.hold
        k = np.floor(t / seg).astype(int)
        tau = t - k * seg
        idx = np.arange(n)
        K = self.n_poses
        done = ~self.loop & (k >= K)
        b_i = np.where(self.loop, k % K, np.minimum(k, K - 1))
        a_i = np.where(self.loop, (k - 1) % K, np.clip(k - 1, 0, K - 1))
        a, b = self.poses[idx, a_i], self.poses[idx, b_i]
        s, ds = min_jerk(np.clip(tau / self.move, 0.0, 1.0))
        first = (k == 0) | done
        q = np.where(first[:, None], b, a + s[:, None] * (b - a))
        moving = (~first) & (tau < self.move)
        qd = np.where(moving[:, None], (ds / self.move)[:, None] * (b - a), 0.0)
        return q, qd

    # ----- reset -------------------------------------------------------------------------------
    def _reset_envs(self, ids: np.ndarray) -> None:
        cfg = self.cfg
        for i in ids:
            rng = self.rngs[i]
            ref = draw_reference(cfg, rng, self._triangle)
            K = len(ref.poses)
            self.poses[i, :K] = ref.poses
            self.poses[i, K:] = ref.poses[-1]
            self.n_poses[i], self.loop[i] = K, ref.loop
            self.move[i], self.hold[i], self.t0[i] = ref.move, ref.hold, ref.t0
            v = int(rng.integers(len(self._variants))) if cfg.randomize is not None else 0
            self.variant[i] = v
            var = self._variants[v]
            self._models[i] = var.lm.model
            self._env_gain[i] = var.gain[self._motor_act]
            self._env_valve[0][i] = var.delay_steps
            self._env_valve[1][i], self._env_valve[2][i] = var.a_fill, var.a_vent
            if ref.rest:  # at rest at 0 kPa, as the sim graph starts
                if var.rest_q is None:
                    var.rest_q = var.lm.static_equilibrium(np.zeros(2))
                q0, p0 = var.rest_q, np.zeros(2)
            else:
                q0 = ref.start
                p0 = np.clip(holding_pressures(q0, var.params), 0.0, cfg.p_max)
            var.lm.reset(var.scratch, q0)
            mujoco.mj_getState(var.lm.model, var.scratch, self.state[i], self._state_sig)
            self.p_valve[i] = p0
            settled = ValveMemory.settled(self.valve, p0, self._dt)
            for mine, new in zip(
                (self._memory.commands, self._memory.integral, self._memory.slack),
                (settled.commands, settled.integral, settled.slack),
                strict=True,
            ):
                mine[i] = new
            self._valve_hist[i] = p0
            self.out[i] = p0
            if self._sigma_z > 0:
                self._noise_buf[i] = rng.normal(0.0, self._sigma_z, self._noise_buf.shape[1:])
            if cfg.drop_probability > 0:
                self._drop_buf[i] = rng.random(self._drop_buf.shape[1]) < cfg.drop_probability
        self.k[ids] = 0
        self.u_prev[ids] = 0.0
        self.core.reset(ids)
        q_true = self.state[ids, self._qpos0 :][:, self.lm.qpos_idx]
        self.x[ids, :, 0] = q_true + self._noise_buf[ids, 0]
        self.x[ids, :, 1] = 0.0
        self.P[ids] = (self._R, 0.0, 10.0**2)  # the estimator's initial covariance
        self.held[ids] = 0.0
        self.est_q[ids] = self.x[ids, :, 0]
        self.est_qd[ids] = 0.0

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        n = self.num_envs
        options = dict(options or {})
        mask = options.pop('reset_mask', None)
        check_options(options, ('reset_mask',), type(self).__name__)
        if mask is None:
            mask = np.ones(n, bool)
        elif not (isinstance(mask, np.ndarray) and mask.dtype == np.bool_ and mask.shape == (n,)):
            raise ValueError(f"options['reset_mask'] must be a numpy bool array of shape ({n},)")
        elif not mask.any():
            raise ValueError("options['reset_mask'] must select at least one environment")
        seeds = [seed + i for i in range(n)] if isinstance(seed, int) else seed
        if seeds is not None:
            if len(seeds) != n:
                raise ValueError(f'{len(seeds)} seeds for {n} environments')
            for i in np.flatnonzero(mask):
                if seeds[i] is not None:
                    self.rngs[i] = np.random.default_rng(seeds[i])
        ids = np.flatnonzero(mask)
        self._reset_envs(ids)
        self._autoreset[mask] = False
        return self._obs(ids), {}

    def _obs(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The observations, recomputed for `rows` (a cycle of the policy's view: once per
        step, and again for the environments that were reset); the others are kept."""
        q_ref, qd_ref = self._reference(self.k * PERIOD)
        self.q_ref, self.qd_ref = q_ref, qd_ref
        r = np.arange(self.num_envs) if rows is None else rows
        ahead = None
        if self.core.ahead:  # the reference's preview
            t = self.k * PERIOD
            ahead = np.stack([self._reference(t + h)[0][r] for h in self.core.ahead], axis=1)
        self._obs_buf[r] = self.core.observe(
            self.est_q[r],
            self.est_qd[r],
            q_ref[r],
            qd_ref[r],
            PERIOD,
            self.cfg.p_max,
            rows=r,
            q_ahead=ahead,
        )
        return self._obs_buf.copy()

    # ----- step --------------------------------------------------------------------------------
    def _valves(self, applied: np.ndarray) -> np.ndarray:
        """Valve pressures (n, substeps, 2) over the period for the driver's outputs `applied`."""
        if self.cfg.randomize is None:
            memory = self._memory if self.valve.has_regulator else self._memory.commands
            p_steps, new = hold(self.valve, self.p_valve, applied, self._substeps, self._dt, memory)
            if isinstance(new, ValveMemory):
                self._memory = ValveMemory(  # writable copies: a reset writes one row
                    np.array(new.commands), np.array(new.integral), np.array(new.slack)
                )
            elif new is not None:
                self._memory = ValveMemory(new, self._memory.integral, self._memory.slack)
            return p_steps
        # each environment's own valve: dead time on the physics step grid, fill/vent lag
        self._valve_hist = np.roll(self._valve_hist, 1, axis=1)
        self._valve_hist[:, 0] = applied
        idx = np.arange(self.num_envs)
        delay, a_fill, a_vent = self._env_valve
        p = self.p_valve
        out = np.empty((self.num_envs, self._substeps, 2))
        for s in range(self._substeps):
            u = self._valve_hist[idx, -((s - delay) // self._substeps)]
            p = u + (p - u) * np.where(u > p, a_fill, a_vent)
            out[:, s] = p
        return out

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        cfg, n = self.cfg, self.num_envs
        starting = np.flatnonzero(self._autoreset)  # NEXT_STEP: finished last step, reset now
        cmd = self.core.command(np.asarray(actions, float).reshape(n, 2), cfg.p_max).copy()
        guard = np.any((self.est_q < self._safe_lo) | (self.est_q > self._safe_hi), axis=1)
        cmd[guard] = 0.0
        self.core.vent(guard)
        u_prev_scaled = kpa_to_action(self.u_prev, cfg.p_max)
        self.u_prev = cmd
        # valve driver: clamp (NaN vents), slew, DAC quantisation
        target = np.clip(np.nan_to_num(cmd, nan=0.0), 0.0, self._max_kpa)
        self.out = self.out + np.clip(target - self.out, -self._slew, self._slew)
        applied = self._lut[np.rint(self.out / LUT_STEP_KPA).astype(int)]
        # valves → motor forces
        p_steps = self._valves(applied)
        self.p_valve = p_steps[:, -1]
        np.multiply(p_steps[:, :, self._motor_act], self._env_gain[:, None, :], out=self._ctrl)
        self._runner.rollout(
            self._models,
            self.datas,
            self.state,
            self._ctrl,
            nstep=self._substeps,
            state=self._out,
            skip_checks=True,
        )
        self.state[:] = self._out[:, -1]
        self.state[:, 0] = 0.0  # time: not used
        self.k += 1
        qpos = self.state[:, self._qpos0 : self._qvel0]
        q_true = qpos[:, self.lm.qpos_idx]
        self._estimate(q_true)
        obs = self._obs()
        q_ref = self.q_ref
        err = q_true - q_ref
        du = kpa_to_action(cmd, cfg.p_max) - u_prev_scaled
        reward = -(
            cfg.w_track * np.sum(err**2, axis=1)
            + cfg.w_effort * np.mean((cmd / cfg.p_max) ** 2, axis=1)
            + cfg.w_rate * np.mean(du**2, axis=1)
        )
        bad = ~np.all(np.isfinite(self.state), axis=1)
        terminated = (
            np.any((q_true < self._safe_lo) | (q_true > self._safe_hi), axis=1)
            | bad
            | (self.held > self._max_hold)
        )
        reward = np.where(terminated, reward - cfg.fall_penalty, reward)
        reward = np.nan_to_num(reward, nan=-cfg.fall_penalty)
        truncated = ~terminated & (self.k >= self.max_steps)
        info = {
            'q': q_true.copy(),
            'q_ref': q_ref,
            'pressures': cmd.copy(),
            'vented': guard,
            'tracking_error': np.sqrt(np.sum(err**2, axis=1) / 2),
        }
        done = terminated | truncated
        infos: dict[str, Any] = {}
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            has_info = ~done
            if done.any():
                final_obs = np.full(n, None, dtype=object)
                for i in np.flatnonzero(done):
                    final_obs[i] = obs[i].copy()
                infos['final_obs'], infos['_final_obs'] = final_obs, done.copy()
                infos['final_info'] = _with_masks(info, done)
                infos['_final_info'] = done.copy()
                ids = np.flatnonzero(done)
                self._reset_envs(ids)
                obs = self._obs(ids)
        else:
            has_info = np.ones(n, bool)
            if starting.size:  # this step of theirs is a reset: the step above is discarded
                self._reset_envs(starting)
                obs = self._obs(starting)
                reward[starting] = 0.0
                terminated[starting] = truncated[starting] = False
                has_info[starting] = False
            self._autoreset = terminated | truncated
        if has_info.any():
            infos.update(_with_masks(info, has_info))
        return obs, reward, terminated, truncated, infos

    def render(self) -> tuple[np.ndarray, ...] | None:
        """One RGB frame per environment ('rgb_array'), else None."""
        if self.render_mode is None:
            return None
        from equimus_sim.render import FrameRenderer

        if self._renderer is None:
            self._renderer = FrameRenderer(self.model)
        frames = []
        for i in range(self.num_envs):
            mujoco.mj_setState(self.model, self._scratch, self.state[i], self._state_sig)
            mujoco.mj_forward(self.model, self._scratch)
            frames.append(self._renderer.render(self._scratch))
        return tuple(frames)

    def _estimate(self, q_true: np.ndarray) -> None:
        """The estimator's Kalman filter per joint on noisy angles; dropped frames are held."""
        idx = np.arange(self.num_envs)
        k = np.minimum(self.k, self.max_steps)
        dropped = self._drop_buf[idx, k]
        dt = (self.held + PERIOD)[:, None]  # since the last good frame
        z = q_true + self._noise_buf[idx, k]
        x, P = self.x, self.P
        a = x[:, :, 0] + dt * x[:, :, 1]
        p00 = P[:, :, 0] + 2 * dt * P[:, :, 1] + dt * dt * P[:, :, 2] + self._qa * dt**4 / 4
        p01 = P[:, :, 1] + dt * P[:, :, 2] + self._qa * dt**3 / 2
        p11 = P[:, :, 2] + self._qa * dt**2
        s = p00 + self._R
        k0, k1 = p00 / s, p01 / s
        r = z - a
        good = ~dropped
        g = good[:, None]
        x[:, :, 0] = np.where(g, a + k0 * r, x[:, :, 0])
        x[:, :, 1] = np.where(g, x[:, :, 1] + k1 * r, x[:, :, 1])
        P[:, :, 0] = np.where(g, p00 - k0 * p00, P[:, :, 0])
        P[:, :, 1] = np.where(g, p01 - k0 * p01, P[:, :, 1])
        P[:, :, 2] = np.where(g, p11 - k1 * p01, P[:, :, 2])
        self.held = np.where(good, 0.0, self.held + PERIOD)
        self.est_q = x[:, :, 0].copy()
        self.est_qd = np.where(g, x[:, :, 1], 0.0)

    def close(self, **kwargs: Any) -> None:
        self._runner.close()
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None


def _with_masks(info: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, Any]:
    """A vector info dict: each key's array and its `_key` mask (Gymnasium's layout)."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        out[key], out[f'_{key}'] = value, mask.copy()
    return out
