"""The sim node's configuration: defaults here, overrides in config/sim.yaml (no ROS).

Each field is a ROS parameter of the `sim` node (equimus_ros.params.bind). The model and the
virtual mocap are fixed for the life of a simulation (read-only); the control surface (pacing,
pause, step size, reset target) follows `ros2 param set` (runtime).
"""

from __future__ import annotations

import dataclasses
import math

from equimus_description.config import ConfigError, param, validate_fields

from .mocap import MocapConfig
from .simulator import VALVES

__all__ = ['MODES', 'RESET_POSES', 'VARIANTS', 'SimConfig']

MODES = ('realtime', 'lockstep')
RESET_POSES = ('initial', 'equilibrium', 'given')
VARIANTS = ('equimus', 'pure')


@dataclasses.dataclass(frozen=True)
class SimConfig:
    leg_description: str = param('', 'leg YAML path; empty = the equimus_description default')
    parameter_overrides: str = param(
        '', 'YAML of dotted-key parameter overrides (identification output); empty = none'
    )
    variant: str = param(
        'equimus', 'model variant: equimus (3-2-1 massive actuators) | pure (massless baseline)'
    )
    timestep: float = param(
        1.0 / 600.0,
        "physics timestep Δt (s); 0 = the leg description's. "
        '1/600 gives exactly 5 steps per 1/120 s frame',
        range=(0.0, 0.01),
    )
    valve_model: str = param(
        'mujoco',
        'valve lag: mujoco (MuJoCo actuator dynamics, one mj_step call per frame) | python '
        '(the same exact lag stepped in Python per physics step)',
    )
    mode: str = param('realtime', 'pacing: realtime | lockstep')
    real_time_factor: float = param(
        1.0,
        'sim seconds per wall second at most (1 = real time, 5 = 5x); 0 or negative = as fast '
        'as possible (lockstep: as fast as the graph answers)',
        range=(-1.0, 1000.0),
        runtime=True,
    )
    lockstep_timeout: float = param(
        0.5,
        'lockstep mode: wall seconds without a /valve/applied message before advancing anyway',
        range=(0.001, 3600.0),
    )
    mocap_rate: float = param(
        120.0,
        'virtual mocap frame rate (Hz) = loop tick rate; lockstep '
        'advances 1/mocap_rate s per applied pressure',
        range=(1.0, 2000.0),
    )
    mocap_position_noise: float = param(
        0.0, 'Gaussian position noise σ per axis (m)', range=(0.0, 1.0)
    )
    mocap_orientation_noise: float = param(
        0.0, 'Gaussian orientation noise σ per rotation-vector axis (rad)', range=(0.0, 1.0)
    )
    mocap_latency: float = param(
        0.0,
        'release delay of a mocap frame after capture (sim s); stamps stay at capture time',
        range=(0.0, 1.0),
    )
    mocap_drop_probability: float = param(
        0.0, 'probability that a frame loss event starts at a frame', range=(0.0, 0.999)
    )
    mocap_drop_burst_mean: float = param(
        1.0, 'mean length of a frame loss event (frames, geometric)', range=(1.0, 1000.0)
    )
    mocap_occlusion_probability: float = param(
        0.0, 'per body and frame probability of an untracked (all-NaN) pose', range=(0.0, 1.0)
    )
    mocap_base_position: tuple = param(
        [0.0, 0.7, 0.0], 'position of the base body in the Motive frame (m, Y up)'
    )
    seed: int = param(0, 'seed of the mocap noise/drop random generator')
    initial_pressures: tuple = param(
        [0.0, 0.0], 'valve pressures at start and after a reset (kPa, [maa, baa])'
    )
    initial_equilibrium: bool = param(
        True, 'start and reset at the static equilibrium of initial_pressures'
    )
    initial_q: tuple = param(
        [math.pi / 2, math.pi / 2], 'initial [θ1, θ2] (rad), used when initial_equilibrium is false'
    )
    realtime_priority: int = param(
        0,
        'realtime mode: SCHED_FIFO priority (1-99) for the loop thread; 0 = normal scheduling',
        range=(0, 99),
    )
    start_paused: bool = param(False, 'start paused: frame 0 is published, then ~/resume or ~/step')
    pause_at: float = param(
        0.0,
        'sim time (s) at which the simulation pauses by itself; 0 = never',
        range=(0.0, 1e9),
        runtime=True,
    )
    step_frames: int = param(
        1,
        'frames one ~/step call advances (then the simulation stays paused)',
        range=(1, 10_000_000),
        runtime=True,
    )
    reset_pose: str = param(
        'initial',
        '~/reset target: initial (start state) | equilibrium (static equilibrium of '
        'reset_pressures) | given (reset_q with reset_pressures)',
        runtime=True,
    )
    reset_q: tuple = param(
        [math.pi / 2, math.pi / 2], '~/reset with reset_pose given: [θ1, θ2] (rad)', runtime=True
    )
    reset_pressures: tuple = param(
        [0.0, 0.0],
        '~/reset with reset_pose equilibrium or given: valve pressures [maa, baa] (kPa)',
        runtime=True,
    )
    diagnostics_period: float = param(
        1.0, 'wall seconds between /diagnostics reports', range=(0.05, 60.0)
    )

    def __post_init__(self) -> None:
        validate_fields(self)
        if self.mode not in MODES:
            raise ConfigError(f'mode={self.mode!r}: use one of {", ".join(MODES)}')
        if self.valve_model not in VALVES:
            raise ConfigError(f'valve_model={self.valve_model!r}: use one of {", ".join(VALVES)}')
        if self.variant not in VARIANTS:
            raise ConfigError(f'variant={self.variant!r}: use one of {", ".join(VARIANTS)}')
        if self.reset_pose not in RESET_POSES:
            raise ConfigError(
                f'reset_pose={self.reset_pose!r}: use one of {", ".join(RESET_POSES)}'
            )
        # One value per valve / joint of the description: the simulator checks the counts
        # (the 2-joint leg's defaults are pairs).
        for name in ('initial_pressures', 'reset_q', 'reset_pressures', 'initial_q'):
            if not getattr(self, name):
                raise ConfigError(f'{name}: needs one value per valve or joint, got none')
        if len(self.mocap_base_position) != 3:
            raise ConfigError(
                f'mocap_base_position={self.mocap_base_position!r}: must be [x, y, z]'
            )

    def mocap(self) -> MocapConfig:
        return MocapConfig(
            rate=self.mocap_rate,
            position_noise=self.mocap_position_noise,
            orientation_noise=self.mocap_orientation_noise,
            latency=self.mocap_latency,
            drop_probability=self.mocap_drop_probability,
            drop_burst_mean=self.mocap_drop_burst_mean,
            occlusion_probability=self.mocap_occlusion_probability,
            base_position=list(self.mocap_base_position),
            seed=int(self.seed),
        )
