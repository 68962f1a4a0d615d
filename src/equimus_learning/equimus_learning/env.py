"""Gymnasium environment of the leg: the sim graph's model, valve lag, safety layer and estimator.

One `step` is one control period (120 Hz) and runs what the sim graph runs, as plain code, in
the order `equimus_control.closed_loop.run` runs it:

    action → ControlStep (guards, clip to [0, p_max]) → SimulatedDriver (the valve driver's
    safety filter: clamp, NaN vent, slew, watchdog; DAC quantisation) → LegSimulator (valve lag,
    MuJoCo) → VirtualMocap (noise, dropped frames) → JointStateEstimator → observation

The action and the observation are the policy controller's (`equimus_control.policy.PolicyCore`
with the `PolicyIO` of `TrackConfig.io`): by default the action maps [-1, 1]² to [0, p_max] kPa
and the observation is the estimate, the reference, the error and the last command (what the
controller node sees on the rig); a residual policy's action is added to its base PID's
pressures and it sees more features. Optionally privileged state follows (true angles, rates and
valve pressures). A policy trained here therefore runs unchanged as `controller:=policy`.
Rewards use the true joint angles. The controller's model of the leg (the base PID, the
reference's triangle) is config/leg.yaml's, as in the sim graph, whatever leg is simulated.

Gymnasium conventions: the registered ids carry the episode length as `max_episode_steps`
(TimeLimit), which is the episode length of an env from `gymnasium.make` (`episode_s` is that of
one constructed directly, and is refused through make); `reset(options=…)` takes only
`OPTIONS` and refuses anything else with a message; `render_mode` 'rgb_array' (offscreen,
`equimus_sim.render`) or 'human' (a window, where a display exists).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from equimus_control.controller import ControlOutput, Estimate, Reference
from equimus_control.estimation import Status
from equimus_control.policy import PolicyCore, PolicyIO, kpa_to_action
from equimus_control.reference import Waypoints, triangle_poses
from equimus_control.step import PERIOD, ControlStep
from equimus_control.supervisor import SafetyConfig
from equimus_description.leg import load_leg
from equimus_description.statics import StaticParams, holding_pressures
from equimus_description.valve import HARD_MAX_KPA
from equimus_sim.leg_model import LegModel
from equimus_sim.render import RENDER_FPS, EnvRenderer, available_render_modes
from equimus_sim.simulator import LegSimulator

from .rig import SimulatedRig

REFERENCES = ('random', 'triangle', 'steps', 'mix')
#: the references 'mix' draws from, per episode (with TrackConfig.mix's probabilities)
MIX = ('triangle', 'steps', 'random')
#: rad: the box random references are drawn from (the MPC's linearisation grid: reachable poses)
RANDOM_LO, RANDOM_HI = (1.1, 0.2), (1.8, 1.1)
#: the step set of config/control.yaml (reference node `step_poses`), rad
STEP_POSES = ((1.4, 0.8), (1.6, 0.5), (1.45, 0.55))
#: physics step of the environments and the control benchmark, s (the sim graph's,
#: config/sim.yaml, is 1/600 s)
PHYSICS_DT = 1.0 / 1200.0
#: what reset(options=…) accepts: {'reference': 'random' | 'triangle' | 'steps' | 'mix'}
OPTIONS = ('reference',)


@dataclass(frozen=True)
class TrackConfig:
    """The tracking task; weights are per control period."""

    reference: str = 'random'  # random | triangle | steps
    episode_s: float = 4.0
    p_max: float = HARD_MAX_KPA
    position_noise: float = 0.0003  # m, virtual mocap (as the control benchmark)
    orientation_noise: float = 0.002  # rad
    drop_probability: float = 0.0  # per frame (mocap model)
    privileged: bool = False
    w_track: float = 100.0  # 1/rad², on the squared true tracking error
    w_effort: float = 0.05  # on the mean squared command, scaled to [0, 1]
    w_rate: float = 0.05  # on the squared change of the scaled command
    fall_penalty: float = 10.0  # once, when the joint-limit guard or an invalid estimate vents
    random_waypoints: int = 4
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    # leg override file (e.g. config/leg_fit.yaml: the identified leg, valve and friction);
    # empty: the description's defaults
    leg_overrides: str = ''
    # how the policy observes and acts (equimus_control.policy.PolicyIO)
    io: PolicyIO = field(default_factory=PolicyIO)
    # probabilities of triangle, steps and random references when reference is 'mix'
    mix: tuple[float, float, float] = (0.4, 0.4, 0.2)
    # looping references (triangle, steps) start at a random waypoint, settled during its hold
    random_start: bool = False
    # probability that a looping reference starts from its beginning with the leg at rest at
    # 0 kPa, as the sim graph starts (its sim node's initial equilibrium of 0 kPa)
    rest_start: float = 0.0
    # legs drawn per episode (equimus_learning.randomize.Randomization; VectorTrackEnv only)
    randomize: Any = None
    # s, the physics step (a whole number of steps per control period)
    physics_dt: float = PHYSICS_DT

    def __post_init__(self) -> None:
        if self.reference not in REFERENCES:
            raise ValueError(f'reference {self.reference!r}: use one of {", ".join(REFERENCES)}')
        if not (0 < self.p_max <= HARD_MAX_KPA):
            raise ValueError(f'p_max {self.p_max} must be in (0, {HARD_MAX_KPA}] kPa')
        if not self.episode_s > 0:
            raise ValueError('episode_s must be > 0')
        steps = PERIOD / self.physics_dt
        if not (self.physics_dt > 0 and abs(steps - round(steps)) < 1e-9):
            raise ValueError(f'physics_dt {self.physics_dt}: a whole number of steps per period')
        if len(self.mix) != 3 or min(self.mix) < 0 or not math.isclose(sum(self.mix), 1.0):
            raise ValueError(f'mix {self.mix}: three probabilities (triangle, steps, random)')
        if not 0.0 <= self.rest_start <= 1.0:
            raise ValueError(f'rest_start {self.rest_start}: a probability in [0, 1]')


@dataclass(frozen=True)
class EpisodeReference:
    """An episode's reference: waypoints (rad) joined by `move` s minimum-jerk moves and held
    `hold` s (the reference node's trajectory), looping or not, from time t0 s on."""

    poses: np.ndarray
    move: float
    hold: float
    loop: bool
    t0: float = 0.0
    rest: bool = False  # the leg starts at rest at 0 kPa (else settled at `start`)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, '_wp', Waypoints(self.poses.tolist(), self.move, self.hold, self.loop)
        )

    def __call__(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """(q_ref, qd_ref) at episode time t."""
        return self._wp(t + self.t0)  # type: ignore[attr-defined]

    def samples(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """What calling it at each of `times` gives, bit for bit, in one pass (the preview's
        28 samples a frame took a tenth of a teaching episode one call at a time)."""
        return self._wp.samples(np.asarray(times, float) + self.t0)  # type: ignore[attr-defined]

    @property
    def start(self) -> np.ndarray:
        """The pose the leg starts settled at."""
        return np.asarray(self(0.0)[0], float)


def draw_reference(
    cfg: TrackConfig, rng: np.random.Generator, triangle: np.ndarray, kind: str | None = None
) -> EpisodeReference:
    """An episode's reference of `kind` (default cfg.reference), drawn from `rng`."""
    kind = kind or cfg.reference
    if kind == 'mix':
        kind = MIX[int(rng.choice(len(MIX), p=np.asarray(cfg.mix, float)))]
    if kind == 'triangle':
        poses, move, hold, loop = np.asarray(triangle, float), 0.5, 1.5, True
    elif kind == 'steps':
        poses, move, hold, loop = np.asarray(STEP_POSES, float), 0.3, 1.5, True
    else:
        poses = rng.uniform(RANDOM_LO, RANDOM_HI, (cfg.random_waypoints, 2))
        move, hold, loop = float(rng.uniform(0.3, 0.8)), float(rng.uniform(0.4, 1.2)), False
    t0 = 0.0
    if loop and cfg.rest_start > 0 and rng.uniform() < cfg.rest_start:
        return EpisodeReference(poses, move, hold, loop, 0.0, rest=True)
    if cfg.random_start and loop:
        v = int(rng.integers(len(poses)))
        t0 = v * (move + hold) + move + float(rng.uniform(0.0, hold))
    return EpisodeReference(poses, move, hold, loop, t0)


class _Action:
    """The controller inside the env's ControlStep: answers the pressures the agent chose."""

    def __init__(self) -> None:
        self.p = np.zeros(2)

    def reset(self) -> None:
        pass

    def step(self, state: Estimate, ref: Reference, dt: float, p_max: float) -> ControlOutput:
        return ControlOutput(self.p.copy(), (self.p <= 0.0) | (self.p >= p_max))


def episode_steps(episode_s: float) -> int:
    """Control periods in an episode of episode_s seconds."""
    return int(round(episode_s / PERIOD))


def check_options(options: dict[str, Any] | None, accepted: tuple[str, ...], who: str) -> None:
    """Refuse reset options an environment does not honour (rather than ignore them)."""
    unknown = sorted(set(options or {}) - set(accepted))
    if unknown:
        raise ValueError(
            f'{who}.reset(options=...): {", ".join(map(repr, unknown))} not supported; '
            f'it takes {", ".join(map(repr, accepted)) or "no options"}'
        )


def own_time_limit(env: gym.Env, steps: int, config_key: str = 'episode_s') -> int | None:
    """The episode length an env enforces itself: `steps` when constructed directly; none when
    made by `gymnasium.make`, whose TimeLimit (`max_episode_steps`) then ends episodes, and a
    refusal of `config_key` there (one name for the episode length in each path)."""
    spec = env.spec
    if spec is None:
        return steps
    if config_key in (spec.kwargs or {}):
        raise ValueError(
            f'{spec.id}: through gymnasium.make the episode length is the TimeLimit: pass '
            f'max_episode_steps={steps} instead of {config_key}={spec.kwargs[config_key]}'
        )
    return None


class LegEnv(gym.Env):
    """What the leg environments share: the render modes, a renderer of the simulated leg at
    the control period, and how a reset or a step ends (the window updated in 'human' mode,
    then the observation)."""

    metadata: dict[str, Any] = {'render_modes': available_render_modes(), 'render_fps': RENDER_FPS}
    sim: LegSimulator | None
    _renderer: EnvRenderer

    def _start_renderer(
        self, render_mode: str | None, model: mujoco.MjModel, distance: float = 1.2
    ) -> None:
        """No simulation until the first reset; `distance`: the camera's, m."""
        self.sim = None
        self.render_mode = render_mode
        self._renderer = EnvRenderer(render_mode, model, distance=distance)

    def render(self) -> np.ndarray | None:
        """The scene now: an RGB array ('rgb_array'), a window update ('human'), or None."""
        return self._renderer.render(self.sim.data if self.sim else None, PERIOD)

    def close(self) -> None:
        self._renderer.close()

    def _begin_episode(
        self,
        seed: int | None,
        options: dict[str, Any] | None,
        accepted: tuple[str, ...],
        episode_s: float,
    ) -> None:
        """The start of every reset: Gymnasium's seeding, `options` checked against `accepted`,
        and the episode's length (a TimeLimit wrapper's when there is one)."""
        super().reset(seed=seed)
        check_options(options, accepted, type(self).__name__)
        self.max_steps = own_time_limit(self, episode_steps(episode_s))

    def _obs(self) -> np.ndarray:
        raise NotImplementedError

    def _observed(self) -> np.ndarray:
        """The observation that ends a reset or a step, the window updated first ('human')."""
        if self.render_mode == 'human':
            self.render()
        return self._obs()


class TrackEnv(LegEnv):
    """Reference tracking (see the module docstring). `reset(seed=…)` fixes the reference,
    the mocap noise and the drops: identical seeds and actions give identical episodes."""

    def __init__(
        self,
        config: TrackConfig | None = None,
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        self.cfg = replace(config or TrackConfig(), **overrides)
        if self.cfg.randomize is not None:
            raise ValueError(
                'TrackEnv runs one leg (leg_overrides); randomised legs: VectorTrackEnv'
            )
        leg = load_leg(overrides=self.cfg.leg_overrides or None).with_timestep(self.cfg.physics_dt)
        self.leg = leg
        self.params = StaticParams.from_leg(leg)
        # the controller's and the reference node's model of the leg (config/leg.yaml)
        self.control_params = StaticParams.from_leg(load_leg())
        self.leg_model = LegModel(leg)
        self._rest_q: np.ndarray | None = None  # the leg at rest at 0 kPa (rest_start)
        self.valve = leg.valve
        n_obs = len(self.cfg.io.layout) + (6 if self.cfg.privileged else 0)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (n_obs,), np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.max_steps: int | None = episode_steps(self.cfg.episode_s)
        self._triangle = triangle_poses(self.control_params)
        self._start_renderer(render_mode, self.leg_model.model)

    # ----- episode ---------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        self._begin_episode(seed, options, OPTIONS, self.cfg.episode_s)
        reference = (options or {}).get('reference', self.cfg.reference)
        if reference not in REFERENCES:
            raise ValueError(f'reference {reference!r}: use one of {", ".join(REFERENCES)}')
        cfg = self.cfg
        self.ref = draw_reference(cfg, self.np_random, self._triangle, reference)
        if self.ref.rest:
            if self._rest_q is None:
                self._rest_q = self.leg_model.static_equilibrium(np.zeros(2))
            q0, p0 = self._rest_q, np.zeros(2)
        else:
            q0 = self.ref.start
            p0 = np.clip(holding_pressures(q0, self.params), 0.0, cfg.p_max)
        rig = SimulatedRig.build(
            self.leg_model, self.valve, q0, p0, cfg, int(self.np_random.integers(2**31))
        )
        self.sim, self.driver = rig.sim, rig.driver
        self.rig = rig
        self.action_ctrl = _Action()
        self.control = ControlStep(self.action_ctrl, replace(cfg.safety, p_max=cfg.p_max))
        self.t = 0.0
        self.k = 0
        self.u_prev = np.zeros(2)  # kPa, as the policy controller starts
        self.core = PolicyCore(cfg.io, self.control_params, 1)
        self._last_q = q0
        self._estimate()
        return self._observed(), {}

    def _estimate(self) -> None:
        assert self.sim is not None
        self.est = self.rig.estimate(self.t)
        self.q_ref, self.qd_ref = self.ref(self.t)

    def _obs(self) -> np.ndarray:
        assert self.sim is not None
        q, qd = self.est.position, self.est.velocity
        if self.est.status == Status.INVALID:  # no estimate: the last good one, no motion
            q, qd = self._last_q, np.zeros(2)
        self._last_q = q
        ahead = [self.ref(self.t + h)[0] for h in self.core.ahead]  # the reference's preview
        obs = self.core.observe(
            q, qd, self.q_ref, self.qd_ref, PERIOD, self.cfg.p_max, q_ahead=ahead or None
        )[0]
        if self.cfg.privileged:
            q_true, qd_true = self.sim.joint_state()
            p = kpa_to_action(self.sim.pressures, self.cfg.p_max)
            obs = np.concatenate([obs, q_true, qd_true, p])
        return obs.astype(np.float64)

    # ----- step ------------------------------------------------------------------------------
    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        assert self.sim is not None, 'call reset() first'
        cfg = self.cfg
        self.action_ctrl.p = self.core.command(np.asarray(action, float), cfg.p_max)[0]
        self.control.set_reference(self.q_ref, self.qd_ref, self.t)
        cmd = self.control.step(self.est.position, self.est.velocity, self.t, self.t)
        u_prev_scaled = kpa_to_action(self.u_prev, cfg.p_max)
        self.u_prev = np.zeros(2) if cmd.vented else cmd.pressures
        if cmd.vented:
            self.core.vent(np.ones(1, bool))
        self.sim.set_command(self.driver(cmd.pressures.tolist(), self.t))
        self.sim.advance(PERIOD)
        self.t = (self.k + 1) * PERIOD
        self.k += 1
        self._estimate()
        q_true, _ = self.sim.joint_state()
        q_ref_now = self.q_ref
        err = q_true - q_ref_now
        u_scaled = cmd.pressures / cfg.p_max
        du = kpa_to_action(cmd.pressures, cfg.p_max) - u_prev_scaled
        reward = -(
            cfg.w_track * float(err @ err)
            + cfg.w_effort * float(np.mean(u_scaled**2))
            + cfg.w_rate * float(np.mean(du**2))
        )
        outside = bool(
            np.any(q_true < np.asarray(cfg.safety.safe_min))
            or np.any(q_true > np.asarray(cfg.safety.safe_max))
        )
        terminated = outside or self.est.status == Status.INVALID or self.sim.resets > 0
        if terminated:
            reward -= cfg.fall_penalty
        truncated = not terminated and self.max_steps is not None and self.k >= self.max_steps
        info = {
            'q': q_true,
            'q_ref': q_ref_now,
            'pressures': cmd.pressures,
            'vented': cmd.vented,
            'tracking_error': math.sqrt(float(err @ err) / 2),
        }
        return self._observed(), reward, terminated, truncated, info
