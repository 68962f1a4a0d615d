"""The tracking task as a batched vector environment, for throughput (tens of thousands of steps/s).

`TrackEnv` runs the sim graph's objects one environment at a time (≈ 4,000 steps/s here, mostly
Python). `VectorTrackEnv` runs the same chain for N environments as array operations:

- command: action → [0, p_max] kPa; the joint-limit guard of `ControlStep` vents (0 kPa) an
  environment whose estimate is outside the safe range;
- valve driver: clamp to [0, max_kpa] (NaN → 0), slew limit per period, and the DAC quantisation
  as a table of the driver's own calibration (`DriverConfig.calibration()`, kPa → code → kPa, on
  a 1e-3 kPa grid);
- valves: the description's valve model (`equimus_description.valve.hold`: dead time, fill and
  vent dynamics, the lag's closed form per physics step) for the command held over the period,
  all N environments at once, turned into per-step motor forces F = S·P;
- physics: one `mujoco.rollout` call of all N environments × 10 physics steps (1/1200 s),
  multithreaded (`nthread`);
- estimation: the hinge angles plus Gaussian noise of the virtual mocap's orientation noise
  (σ = √2·σ_orientation: two noisy bodies per hinge), dropped frames held as the estimator holds
  them, and the estimator's constant-velocity Kalman filter per joint, vectorised.

Differences from `TrackEnv`, which is the reference: the estimator sees angles with equivalent
noise, not noisy poses; each rollout starts MuJoCo's solver from a zero warm start; the rearm
margin of the guard is not modelled (an environment that leaves the safe range terminates).
Autoreset is SAME_STEP: a finished environment is reset within `step`, and its last observation
is in `infos['final_obs']`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium.vector import AutoresetMode
from mujoco import rollout

from equimus_control.estimation import EstimatorConfig
from equimus_control.policy import OBS_SIZE, action_to_kpa, kpa_to_action, observation
from equimus_control.reference import triangle_poses
from equimus_description.leg import load_leg
from equimus_description.statics import StaticParams, holding_pressures
from equimus_description.valve import hold
from equimus_hw.valve.config import DriverConfig
from equimus_sim.leg_model import LegModel

from .env import PHYSICS_DT, RANDOM_HI, RANDOM_LO, STEP_POSES, TrackConfig

PERIOD = 1.0 / 120.0
SUBSTEPS = int(round(PERIOD / PHYSICS_DT))
LUT_STEP_KPA = 1e-3


def _min_jerk(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.clip(s, 0.0, 1.0)
    return 10 * s**3 - 15 * s**4 + 6 * s**5, 30 * s**2 - 60 * s**3 + 30 * s**4


class VectorTrackEnv(gym.vector.VectorEnv):
    """N tracking environments as arrays (see the module docstring)."""

    metadata: dict[str, Any] = {'autoreset_mode': AutoresetMode.SAME_STEP}

    def __init__(
        self, num_envs: int = 64, nthread: int = 2, config: TrackConfig | None = None, **kw: Any
    ) -> None:
        self.cfg = replace(config or TrackConfig(), **kw)
        if self.cfg.privileged:
            raise ValueError('VectorTrackEnv has no privileged observation; use TrackEnv')
        self.num_envs = n = int(num_envs)
        leg = load_leg(overrides=self.cfg.leg_overrides or None).with_timestep(PHYSICS_DT)
        self.params = StaticParams.from_leg(leg)
        self.lm = LegModel(leg)
        self.model = self.lm.model
        self.nthread = max(1, int(nthread))
        self.datas = [mujoco.MjData(self.model) for _ in range(self.nthread)]
        self._models = [self.model] * n  # rollout's fast path (skip_checks) takes one per env
        self._scratch = mujoco.MjData(self.model)
        self._runner = rollout.Rollout(nthread=self.nthread)
        self._state_sig = mujoco.mjtState.mjSTATE_FULLPHYSICS
        nstate = mujoco.mj_stateSize(self.model, self._state_sig)
        self._qpos0 = mujoco.mj_stateSize(self.model, mujoco.mjtState.mjSTATE_TIME)
        self._qvel0 = self._qpos0 + self.model.nq
        self.state = np.zeros((n, nstate))
        self._out = np.zeros((n, SUBSTEPS, nstate))
        self._ctrl = np.zeros((n, SUBSTEPS, self.model.nu))
        gain = np.asarray(self.lm.areas, float) * 1e3  # N per kPa
        ctrl_act = np.zeros(self.model.nu, dtype=int)
        for i, row in enumerate(np.asarray(self.lm.ctrl_idx).reshape(len(gain), -1)):
            ctrl_act[row] = i
        self._motor_gain, self._motor_act = gain[ctrl_act], ctrl_act
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
        self.max_steps = int(round(self.cfg.episode_s / PERIOD))
        self._triangle = triangle_poses(self.params)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS_SIZE,), np.float64)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, n)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, n)
        K = self.cfg.random_waypoints if self.cfg.reference == 'random' else 3
        self.poses = np.zeros((n, K, 2))
        self.move = np.zeros(n)
        self.hold = np.zeros(n)
        self.loop = self.cfg.reference != 'random'
        self.k = np.zeros(n, dtype=int)
        self.p_valve = np.zeros((n, 2))  # kPa, valve pressures
        # per-step commands the valve's dead time still holds, per environment
        self._history = np.zeros((n, self.valve.history_steps(PHYSICS_DT), 2))
        self.out = np.zeros((n, 2))  # kPa, the driver's output (after slew)
        self.u_prev = np.zeros((n, 2))  # kPa, last command (as the policy controller keeps it)
        self.x = np.zeros((n, 2, 2))  # Kalman state [joint, (angle, rate)]
        self.P = np.zeros((n, 2, 3))  # covariance (p00, p01, p11) per joint
        self.held = np.zeros(n)  # s since the last good frame
        self.est_q = np.zeros((n, 2))
        self.est_qd = np.zeros((n, 2))
        self.rng = np.random.default_rng()

    # ----- reference ---------------------------------------------------------------------------
    def _reference(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n, K = self.poses.shape[:2]
        seg = self.move + self.hold
        k = np.floor(t / seg).astype(int)
        tau = t - k * seg
        idx = np.arange(n)
        if self.loop:
            b_i, a_i = k % K, (k - 1) % K
            done = np.zeros(n, bool)
        else:
            done = k >= K
            b_i, a_i = np.minimum(k, K - 1), np.clip(k - 1, 0, K - 1)
        a, b = self.poses[idx, a_i], self.poses[idx, b_i]
        s, ds = _min_jerk(tau / self.move)
        first = (k == 0) | done
        q = np.where(first[:, None], b, a + s[:, None] * (b - a))
        moving = (~first) & (tau < self.move)
        qd = np.where(moving[:, None], (ds / self.move)[:, None] * (b - a), 0.0)
        return q, qd

    # ----- reset -------------------------------------------------------------------------------
    def _reset_envs(self, ids: np.ndarray) -> None:
        cfg, rng = self.cfg, self.rng
        for i in ids:
            if cfg.reference == 'random':
                self.poses[i] = rng.uniform(RANDOM_LO, RANDOM_HI, self.poses.shape[1:])
                self.move[i], self.hold[i] = rng.uniform(0.3, 0.8), rng.uniform(0.4, 1.2)
            elif cfg.reference == 'triangle':
                self.poses[i], self.move[i], self.hold[i] = self._triangle, 0.5, 1.5
            else:
                self.poses[i], self.move[i], self.hold[i] = STEP_POSES, 0.3, 1.5
            q0 = self.poses[i, 0]
            p0 = np.clip(holding_pressures(q0, self.params), 0.0, cfg.p_max)
            self.lm.reset(self._scratch, q0)
            mujoco.mj_getState(self.model, self._scratch, self.state[i], self._state_sig)
            self.p_valve[i] = p0
            self._history[i] = p0  # settled
            self.out[i] = p0
        self.k[ids] = 0
        self.u_prev[ids] = 0.0
        q_true = self.state[ids, self._qpos0 :][:, self.lm.qpos_idx]
        self.x[ids, :, 0] = q_true + self._noise(len(ids))
        self.x[ids, :, 1] = 0.0
        self.P[ids] = (self._R, 0.0, 10.0**2)  # the estimator's initial covariance
        self.held[ids] = 0.0
        self.est_q[ids] = self.x[ids, :, 0]
        self.est_qd[ids] = 0.0

    def _noise(self, m: int) -> np.ndarray:
        if self._sigma_z <= 0:
            return np.zeros((m, 2))
        return self.rng.normal(0.0, self._sigma_z, (m, 2))

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:
            self.rng = np.random.default_rng(seed if isinstance(seed, int) else list(seed))
        self._reset_envs(np.arange(self.num_envs))
        return self._obs(), {}

    def _obs(self) -> np.ndarray:
        q_ref, qd_ref = self._reference(self.k * PERIOD)
        self.q_ref, self.qd_ref = q_ref, qd_ref
        return observation(
            self.est_q, self.est_qd, q_ref, qd_ref, kpa_to_action(self.u_prev, self.cfg.p_max)
        )

    # ----- step --------------------------------------------------------------------------------
    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        cfg, n = self.cfg, self.num_envs
        cmd = action_to_kpa(np.asarray(actions, float).reshape(n, 2), cfg.p_max)
        guard = np.any((self.est_q < self._safe_lo) | (self.est_q > self._safe_hi), axis=1)
        cmd[guard] = 0.0
        u_prev_scaled = kpa_to_action(self.u_prev, cfg.p_max)
        self.u_prev = cmd
        # valve driver: clamp (NaN vents), slew, DAC quantisation
        target = np.clip(np.nan_to_num(cmd, nan=0.0), 0.0, self._max_kpa)
        self.out = self.out + np.clip(target - self.out, -self._slew, self._slew)
        applied = self._lut[np.rint(self.out / LUT_STEP_KPA).astype(int)]
        # valves (the description's model per physics step) → motor forces
        p_steps, history = hold(
            self.valve, self.p_valve, applied, SUBSTEPS, PHYSICS_DT, self._history
        )
        if history is not None:
            self._history = history
        self.p_valve = p_steps[:, -1]
        np.multiply(p_steps[:, :, self._motor_act], self._motor_gain, out=self._ctrl)
        self._runner.rollout(
            self._models,
            self.datas,
            self.state,
            self._ctrl,
            nstep=SUBSTEPS,
            state=self._out,
            skip_checks=True,
        )
        self.state[:] = self._out[:, -1]
        self.state[:, 0] = 0.0  # time: not used
        self.k += 1
        qpos = self.state[:, self._qpos0 : self._qvel0]
        q_true = qpos[:, self.lm.qpos_idx]
        self._estimate(q_true)
        q_ref, _ = self._reference(self.k * PERIOD)
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
        obs = self._obs()
        infos: dict[str, Any] = {}
        done = np.flatnonzero(terminated | truncated)
        if done.size:
            infos['final_obs'] = obs.copy()
            infos['_final_obs'] = terminated | truncated
            self._reset_envs(done)
            obs = self._obs()
        return obs, reward, terminated, truncated, infos

    def _estimate(self, q_true: np.ndarray) -> None:
        """The estimator's Kalman filter per joint on noisy angles; dropped frames are held."""
        n = self.num_envs
        dropped = (
            self.rng.random(n) < self.cfg.drop_probability
            if self.cfg.drop_probability > 0
            else np.zeros(n, bool)
        )
        dt = (self.held + PERIOD)[:, None]  # since the last good frame
        z = q_true + self._noise(n)
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
