"""Ball kicking (`equimus/Kick-v0`): the authors' second learning task, on the sim graph's chain.

The scene is the leg model built from the description (`equimus_sim.mjcf_builder.build_mjcf`)
with three things added for this task only: a floor, a foot (a capsule along the calf, from the
knee to a2 beyond it; no mass: the calf keeps the description's inertia) and a ball with a free
joint resting on the floor below the hip. Contacts are enabled for these geoms only (the leg has
no other geom). The valves, the safety layer, the mocap and the estimator are the same as in
`TrackEnv`: the action is the command of one control period, [-1, 1]² → [0, p_max] kPa.

Observation: the estimated θ, θ̇ and the last command (as in the tracking task), then the ball's
position relative to the hip and its velocity in the leg's plane (world y, z) and the target
direction (+1: world +y, −1: world −y). The ball is seen as the rig would see it: one more
motion-capture rigid body in the same virtual mocap frames as the leg (noise, drops), its
position taken relative to the base body's and turned back from the Motive frame, its velocity
the difference of the last two tracked positions; a dropped frame holds both.

Reward per period (`reward`):
- 'shaped' (default): approach (−w_approach · foot–ball distance until the first contact), a
  one-off contact bonus, the ball's velocity along the target direction, and effort;
- 'authors': the EquiMus authors' kicking reward as published (2·proximity + 2·contact +
  5·velocity along the target + 1·ball speed − 0.001·Σu², u in kPa), with proximity taken as
  exp(−d / 0.1 m) of the foot–ball distance d (the publication names the term, not its form)
  and contact 1 in every period the foot touches the ball. For comparison: the weights were set
  for their action (±50 kPa straight into MuJoCo, true state), not for this chain.
The episode ends after `episode_s` (`max_episode_steps` through gymnasium.make) or when the
leg leaves the guard's range. `reset(options={'target': ±1})` fixes the direction for one episode.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from equimus_control.estimation import Status
from equimus_control.policy import action_to_kpa, kpa_to_action
from equimus_control.step import PERIOD
from equimus_control.supervisor import SafetyConfig
from equimus_description.leg import load_leg
from equimus_description.statics import StaticParams, holding_pressures
from equimus_description.valve import HARD_MAX_KPA
from equimus_sim.leg_model import LegModel
from equimus_sim.mjcf_builder import build_mjcf
from equimus_sim.mocap import R_MW

from .env import PHYSICS_DT, LegEnv, episode_steps
from .rig import SimulatedRig

OBS_SIZE = 11
BALL = 'ball'
FOOT = 'foot'
REWARDS = ('shaped', 'authors')
#: what reset(options=…) accepts: {'target': +1.0 | -1.0} for one episode
OPTIONS = ('target',)
#: a kick succeeds when the ball ends the episode this far along the target direction, m
SUCCESS_DISTANCE = 0.15


@dataclass(frozen=True)
class KickConfig:
    episode_s: float = 2.0
    p_max: float = HARD_MAX_KPA
    ball_radius: float = 0.06  # m (its top 2.5 cm above the straight leg's foot)
    ball_mass: float = 0.05  # kg
    foot_radius: float = 0.015  # m
    ball_offset_y: float = 0.0  # m, world y of the ball relative to the hip
    target: float = 0.0  # +1 / −1 world y; 0: drawn at reset
    start_pose: tuple[float, float] = (1.39, 0.85)  # rad, the triangle's first vertex
    position_noise: float = 0.0003
    orientation_noise: float = 0.002
    drop_probability: float = 0.0
    w_approach: float = 1.0  # per m of foot–ball distance, until the first contact
    w_contact: float = 5.0  # once
    w_velocity: float = 2.0  # per m/s of ball velocity along the target
    w_effort: float = 0.05
    reward: str = 'shaped'  # shaped | authors (module docstring)
    safety: SafetyConfig = SafetyConfig()

    def __post_init__(self) -> None:
        if self.reward not in REWARDS:
            raise ValueError(f'reward {self.reward!r}: use one of {", ".join(REWARDS)}')
        if self.target not in (0.0, 1.0, -1.0):
            raise ValueError(f'target {self.target}: +1, -1, or 0 (drawn at reset)')


def kick_model(leg: Any, cfg: KickConfig) -> mujoco.MjModel:
    """The description's leg model plus floor, foot and ball (see the module docstring)."""
    root = ET.fromstring(build_mjcf(leg))
    for flag in root.iter('flag'):
        flag.attrib.pop('contact', None)
    world = root.find('worldbody')
    calf = next(b for b in root.iter('body') if b.get('name') == 'calf')
    thigh = next(b for b in root.iter('body') if b.get('name') == 'thigh')
    base = next(b for b in root.iter('body') if b.get('name') == 'base')
    assert world is not None
    a2 = float(leg.geometry.a2) if leg.geometry is not None else 0.25
    ET.SubElement(
        calf,
        'geom',
        name=FOOT,
        type='capsule',
        fromto=f'0 0 0 0 {-a2} 0',
        size=f'{cfg.foot_radius}',
        mass='0',
        rgba='0.3 0.3 0.8 1',
    )
    hip = np.array([float(v) for v in base.get('pos', '0 0 0').split()]) + np.array(
        [float(v) for v in thigh.get('pos', '0 0 0').split()]
    )
    ET.SubElement(world, 'geom', name='floor', type='plane', size='2 2 0.05', pos='0 0 0')
    ball = ET.SubElement(
        world,
        'body',
        name=BALL,
        pos=f'{hip[0]} {hip[1] + cfg.ball_offset_y} {cfg.ball_radius}',
    )
    ET.SubElement(ball, 'freejoint', name='ball_free')
    ET.SubElement(
        ball,
        'geom',
        name='ball_geom',
        type='sphere',
        size=f'{cfg.ball_radius}',
        mass=f'{cfg.ball_mass}',
        rgba='0.9 0.5 0.1 1',
    )
    return mujoco.MjModel.from_xml_string(ET.tostring(root, encoding='unicode'))


def authors_reward(
    dist: float, contact: bool, vel: np.ndarray, target: float, cmd_kpa: np.ndarray
) -> float:
    """The EquiMus authors' kicking reward, per period (module docstring)."""
    proximity = float(np.exp(-dist / 0.1))
    return (
        2.0 * proximity
        + 2.0 * float(contact)
        + 5.0 * target * float(vel[0])
        + 1.0 * float(np.linalg.norm(vel))
        - 0.001 * float(np.sum(np.asarray(cmd_kpa) ** 2))
    )


class KickEnv(LegEnv):
    """See the module docstring."""

    def __init__(
        self, config: KickConfig | None = None, render_mode: str | None = None, **overrides: Any
    ) -> None:
        self.cfg = replace(config or KickConfig(), **overrides)
        leg = load_leg().with_timestep(PHYSICS_DT)
        self.params = StaticParams.from_leg(leg)
        self.leg_model = LegModel(leg, model=kick_model(leg, self.cfg))
        self.valve = leg.valve
        m = self.leg_model.model
        self._ball = m.body(BALL).id
        self._ball_dof = m.jnt_dofadr[m.joint('ball_free').id]
        self._foot = m.geom(FOOT).id
        self._ball_geom = m.geom('ball_geom').id
        self._hip_body = m.body('thigh').id
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS_SIZE,), np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.max_steps: int | None = episode_steps(self.cfg.episode_s)
        self._start_renderer(render_mode, m, distance=1.4)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        self._begin_episode(seed, options, OPTIONS, self.cfg.episode_s)
        cfg = self.cfg
        target = float((options or {}).get('target', cfg.target))
        if target not in (0.0, 1.0, -1.0):
            raise ValueError(f"options['target'] {target}: +1 or -1")
        self.target = target or float(self.np_random.choice([-1.0, 1.0]))
        q0 = np.asarray(cfg.start_pose, float)
        p0 = np.clip(holding_pressures(q0, self.params), 0.0, cfg.p_max)
        rig = SimulatedRig.build(
            self.leg_model,
            self.valve,
            q0,
            p0,
            cfg,
            int(self.np_random.integers(2**31)),
            extra_bodies=(BALL,),
        )
        self.sim, self.driver = rig.sim, rig.driver
        self.rig = rig
        self.t, self.k = 0.0, 0
        self.u_prev = np.zeros(2)
        self.touched = False
        self._last_q = q0
        d = self.sim.data
        # the hip seen from the base body (fixed: the base does not move), world frame
        self._hip_from_base = d.xpos[self._hip_body] - d.xpos[self.leg_model.model.body('base').id]
        self._ball_pos: np.ndarray | None = None
        self._ball_vel = np.zeros(2)
        self._ball_t = 0.0
        self._estimate()
        return self._observed(), {}

    def _estimate(self) -> None:
        assert self.sim is not None
        self.est = self.rig.estimate(self.t)
        frame = self.rig.frame
        if frame is None:
            return
        ball, base = frame.bodies[BALL], frame.bodies['base']
        if not (ball.tracked and base.tracked):
            return
        rel_w = R_MW.T @ (np.asarray(ball.position) - np.asarray(base.position))
        pos = (rel_w - self._hip_from_base)[1:]
        if self._ball_pos is not None and self.t > self._ball_t:
            self._ball_vel = (pos - self._ball_pos) / (self.t - self._ball_t)
        self._ball_pos, self._ball_t = pos, self.t

    def ball_state(self) -> tuple[np.ndarray, np.ndarray]:
        """The ball's true position relative to the hip and velocity, world (y, z)."""
        assert self.sim is not None
        d = self.sim.data
        pos = d.xpos[self._ball] - d.xpos[self._hip_body]
        vel = d.qvel[self._ball_dof : self._ball_dof + 3]
        return pos[1:].copy(), np.array(vel[1:])

    def _obs(self) -> np.ndarray:
        q, qd = self.est.position, self.est.velocity
        if self.est.status == Status.INVALID:
            q, qd = self._last_q, np.zeros(2)
        self._last_q = q
        pos = self._ball_pos if self._ball_pos is not None else self.ball_state()[0]
        vel = self._ball_vel
        u = kpa_to_action(self.u_prev, self.cfg.p_max)
        return np.concatenate([q, qd, u, pos, vel, [self.target]]).astype(np.float64)

    def _foot_ball_distance(self) -> tuple[float, bool]:
        assert self.sim is not None
        m, d = self.sim.model, self.sim.data
        fromto = np.zeros(6)
        dist = mujoco.mj_geomDistance(m, d, self._foot, self._ball_geom, 1.0, fromto)
        return float(dist), dist <= 1e-4

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        assert self.sim is not None, 'call reset() first'
        cfg = self.cfg
        cmd = action_to_kpa(np.asarray(action, float).reshape(2), cfg.p_max)
        q_est = self.est.position
        guard = self.est.status == Status.INVALID or bool(
            np.any(q_est < np.asarray(cfg.safety.safe_min))
            or np.any(q_est > np.asarray(cfg.safety.safe_max))
        )
        if guard:  # the ControlStep's guard vents
            cmd = np.zeros(2)
        self.u_prev = cmd
        self.sim.set_command(self.driver(cmd.tolist(), self.t))
        self.sim.advance(PERIOD)
        self.k += 1
        self.t = self.k * PERIOD
        self._estimate()
        dist, contact = self._foot_ball_distance()
        pos, vel = self.ball_state()
        if cfg.reward == 'authors':
            reward = authors_reward(dist, contact, vel, self.target, cmd)
            self.touched |= contact
        else:
            reward = cfg.w_velocity * self.target * float(vel[0])
            reward -= cfg.w_effort * float(np.mean((cmd / cfg.p_max) ** 2))
            if not self.touched:
                reward -= cfg.w_approach * dist
                if contact:
                    self.touched = True
                    reward += cfg.w_contact
        q_true, _ = self.sim.joint_state()
        terminated = bool(
            np.any(q_true < np.asarray(cfg.safety.safe_min))
            or np.any(q_true > np.asarray(cfg.safety.safe_max))
            or self.sim.resets > 0
        )
        truncated = not terminated and self.max_steps is not None and self.k >= self.max_steps
        info = {
            'touched': self.touched,
            'ball_velocity': vel,
            'ball_speed': float(np.linalg.norm(vel)),
            'ball_progress': float(self.target * pos[0]),  # m along the target, from the hip
            'foot_ball_distance': dist,
        }
        return self._observed(), float(reward), terminated, truncated, info
