"""reference node: publishes /reference/joint (JointState position/velocity) at `rate` Hz in the
node clock (sim time with use_sim_time), from the trajectory chosen by parameters."""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from collections.abc import Callable

import numpy as np
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from equimus_description.config import ConfigError, param, validate_fields
from equimus_description.interface import (
    DIAGNOSTICS,
    JOINTS,
    REFERENCE,
    REFERENCE_PREVIEW,
    preview_columns,
)
from equimus_description.valve import HARD_MAX_KPA
from equimus_ros.arrays import table_array
from equimus_ros.cdr import ArrayWriter, JointStateWriter
from equimus_ros.clocks import time_reader
from equimus_ros.diagnostics import Diagnostics, Level
from equimus_ros.executors import timer_callback
from equimus_ros.main import run_node
from equimus_ros.params import bind
from equimus_ros.qos import publisher

from .kernels import use_compiled
from .reference import (
    MIN_SEGMENT_S,
    PREVIEW_S,
    PREVIEW_SPACING_S,
    TRIANGLE_KPA,
    Sinusoid,
    Waypoints,
    float_sampler,
    make_reference,
    preview_count,
    preview_rows,
)

TRAJECTORIES = ('triangle', 'step', 'sine', 'hold')
_WAY, _SINE = Waypoints(poses=()), Sinusoid()  # the plain trajectories' defaults


@dataclasses.dataclass(frozen=True)
class ReferenceParams:
    """The reference node's parameters. The sine's amplitude and frequency apply while running
    (the phase stays continuous; a new amplitude moves the reference by at most the change, a
    step the controller and its safety limits handle like any reference step); the rest shapes
    the trajectory and is fixed at start."""

    trajectory: str = param('triangle', 'triangle | step | sine | hold')
    rate: float = param(120.0, 'Hz, publication rate in the node clock', range=(1.0, 1000.0))
    preview: float = param(
        PREVIEW_S,
        "s of the reference's own future sent on /reference/preview at preview_rate, points "
        'PREVIEW_SPACING_S apart (0 = none): controllers that look ahead (ltv_mpc, the PID '
        'with a lead) use it instead of extrapolating',
        range=(0.0, 2.0),
    )
    preview_rate: float = param(
        10.0, 'Hz, /reference/preview in the node clock', range=(1.0, 1000.0)
    )
    move: float = param(_WAY.move, 's minimum-jerk move between waypoints', range=(0.0, 60.0))
    hold: float = param(_WAY.hold, 's hold at each waypoint', range=(0.0, 600.0))
    triangle_kpa: tuple[float, ...] = param(
        tuple(p for pair in TRIANGLE_KPA for p in pair),
        "kPa pairs (maa, baa), flat: the triangle's vertices are the rest poses under these",
        range=(0.0, HARD_MAX_KPA),
    )
    pressure_sign: float = param(
        1.0,
        '+1: pressure lengthens the actuator (the rig and the '
        "simulated leg), -1: it pulls; for the triangle's poses",
        range=(-1.0, 1.0),
    )
    leg_parameter_set: str = param(
        '',
        'parameter set of the leg description used for the '
        "triangle's poses ('' = the description as is)",
    )
    step_poses: tuple[float, ...] = param(
        (1.4, 0.8, 1.6, 0.5, 1.45, 0.55), 'rad pairs (hip, knee), flat, for trajectory step'
    )
    sine_center: tuple[float, ...] = param(tuple(_SINE.center), 'rad (hip, knee)')
    sine_amplitude: tuple[float, ...] = param(
        tuple(_SINE.amplitude), 'rad (hip, knee)', range=(0.0, 0.5), runtime=True
    )
    sine_frequency: float = param(_SINE.frequency, 'Hz', range=(0.0, 5.0), runtime=True)
    hold_pose: tuple[float, ...] = param((1.3909, 0.8533), 'rad (hip, knee), for trajectory hold')
    leg_description: str = param(
        '',
        "another limb's YAML: the reference names its joints and step_poses, sine_center, "
        "sine_amplitude and hold_pose hold one value per joint (no triangle); '' = the rig's leg",
    )

    @property
    def joint_names(self) -> list[str]:
        return list(_joint_names(self.leg_description))

    def __post_init__(self) -> None:
        validate_fields(self)
        if self.trajectory not in TRAJECTORIES:
            raise ConfigError(f'trajectory={self.trajectory!r}: use {", ".join(TRAJECTORIES)}')
        if abs(self.pressure_sign) != 1.0:
            raise ConfigError(f'pressure_sign={self.pressure_sign}: must be +1 or -1')
        if self.trajectory in ('triangle', 'step') and not self.move + self.hold >= MIN_SEGMENT_S:
            raise ConfigError(
                f'move={self.move:g}, hold={self.hold:g}: a waypoint segment (move + hold) needs '
                f'at least {MIN_SEGMENT_S:g} s'
            )
        joints = self.joint_names
        n, what = len(joints), ', '.join(joints)
        if n != 2 and self.trajectory == 'triangle':
            raise ConfigError(
                f'trajectory=triangle needs the 2-joint leg; {self.leg_description} has '
                f'{n} joints ({what}): use step, sine or hold'
            )
        # The rig's leg: every field is checked. Another limb: the fields its trajectory uses.
        used = {'step': ('step_poses',), 'sine': ('sine_center', 'sine_amplitude')}.get(
            self.trajectory, ('hold_pose',)
        )
        for name in ('triangle_kpa', 'step_poses'):
            value = getattr(self, name)
            k = 2 if name == 'triangle_kpa' else n
            if (not value or len(value) % k) and (n == 2 or name in used):
                raise ConfigError(f'{name}={list(value)}: needs groups of {k} ({what}), flat')
        for name in ('sine_center', 'sine_amplitude', 'hold_pose'):
            if len(getattr(self, name)) != n and (n == 2 or name in used):
                raise ConfigError(f'{name}={list(getattr(self, name))}: needs {n} values ({what})')

    def trajectory_fn(self) -> Callable[[float], tuple]:
        """The plain trajectory these parameters describe (t in s → q, qd)."""
        if self.trajectory == 'triangle':
            from equimus_description.leg import load_leg
            from equimus_description.statics import StaticParams

            from .reference import triangle_poses

            leg = load_leg(parameter_set=self.leg_parameter_set or None)
            params = StaticParams.from_leg(leg, pressure_sign=self.pressure_sign)
            poses = triangle_poses(params, np.reshape(self.triangle_kpa, (-1, 2)))
            return make_reference('triangle', poses=poses, move=self.move, hold=self.hold)
        if self.trajectory == 'step':
            return make_reference(
                'steps',
                poses=np.reshape(self.step_poses, (-1, len(self.joint_names))),
                move=self.move,
                hold=self.hold,
            )
        if self.trajectory == 'hold':
            return make_reference('steps', poses=[self.hold_pose], move=0.0, hold=1.0)
        return make_reference(
            'sine',
            center=self.sine_center,
            amplitude=self.sine_amplitude,
            frequency=self.sine_frequency,
            phase=tuple(i * math.pi / 2 for i in range(len(self.joint_names))),
        )


@functools.lru_cache(maxsize=8)
def _joint_names(leg_description: str) -> tuple[str, ...]:
    if not leg_description:
        return JOINTS
    from equimus_description.leg import load_leg

    return tuple(load_leg(leg_description).joints)


class ReferenceNode(Node):
    """`paced=False` is for the composed sim graph: no rate timer; the graph calls `tick()` on
    the frames where the timer would fire, so the reference is in step with the simulation;
    `frame_time` is that graph's frame time, read in place of the node clock."""

    def __init__(self, paced: bool = True, frame_time: Callable[[], int] | None = None):
        super().__init__('reference')
        # ns on the node clock, or the composing graph's frame time (equimus_ros.clocks)
        self._clock_ns = time_reader(self.get_clock(), frame_time)
        self.params = bind(self, ReferenceParams(), apply=self._apply)
        cfg = self.params.config
        self.add_on_set_parameters_callback(self._only_for_the_sine)
        self.traj = cfg.trajectory_fn()
        self._sample = float_sampler(self.traj)
        if isinstance(self.traj, Waypoints):
            self.get_logger().info(
                f'{cfg.trajectory} poses (rad): {np.round(self.traj.poses, 4).tolist()}'
            )
        self.kind = cfg.trajectory
        self.t0_ns: int | None = None  # node-clock ns of the first tick: the trajectory's 0
        self.count = 0
        self.pub = publisher(self, JointState, REFERENCE)
        self.out = JointStateWriter(self.pub, cfg.joint_names)
        # Called with each sample (stamp ns, angles, velocities) and each preview's rows before
        # they go out: the composed sim graph's controller.
        self.listeners: list[Callable[[int, list[float], list[float]], None]] = []
        self.preview_listeners: list[Callable[[np.ndarray], None]] = []
        self.preview_pub = publisher(self, Float64MultiArray, REFERENCE_PREVIEW)
        self._preview_columns = preview_columns(tuple(cfg.joint_names))
        self._preview_out: ArrayWriter | None = None  # for previews of _preview_rows rows
        self._preview_rows = 0
        # every how many ticks a preview goes out (the composed graph calls tick() at `rate`)
        self._preview_every = max(1, round(cfg.rate / cfg.preview_rate))
        self._kernels = use_compiled()  # the preview's form (kernels.py)
        self.diagnostics = Diagnostics(self, DIAGNOSTICS, 'reference')
        if paced:
            self.create_timer(1.0 / cfg.rate, timer_callback(self.tick))
        self.create_timer(1.0, timer_callback(self._diag))

    def _elapsed(self) -> float:
        t0 = self.t0_ns
        return 0.0 if t0 is None else (self._clock_ns() - t0) * 1e-9

    def _only_for_the_sine(self, params: list[Parameter]) -> SetParametersResult:
        """The runtime parameters are the sine's: on another trajectory they would change
        nothing, so setting them is refused."""
        kind = self.params.config.trajectory
        if kind != 'sine':
            for p in params:
                if p.name in self.params.runtime_names():
                    return SetParametersResult(
                        successful=False,
                        reason=f'{p.name} has no effect: the trajectory is {kind!r}; '
                        'start the node with trajectory:=sine to change the sine at run time',
                    )
        return SetParametersResult(successful=True)

    def _apply(self, cfg: ReferenceParams) -> None:
        """A new sine amplitude or frequency, from now on, with a continuous phase."""
        old = self.traj
        assert isinstance(old, Sinusoid)  # _only_for_the_sine refuses them on other trajectories
        t = self._elapsed()
        dw = 2 * math.pi * (old.frequency - cfg.sine_frequency)
        self.traj = Sinusoid(
            center=old.center,
            amplitude=tuple(cfg.sine_amplitude),
            frequency=cfg.sine_frequency,
            phase=tuple(p + dw * t for p in old.phase),
        )
        self._sample = float_sampler(self.traj)

    def tick(self, now: int | None = None) -> None:
        """One sample at `now` ns on the node clock (read here if not given; the composed
        graph gives its frame's time)."""
        if now is None:
            now = self._clock_ns()
        if self.t0_ns is None:
            self.t0_ns = now
        t = (now - self.t0_ns) * 1e-9  # ints: rclpy's Time arithmetic costs more than a sample
        position, velocity = self._sample(t)
        for listener in self.listeners:
            listener(now, position, velocity)
        self.out.write(now, position, velocity)
        if self.params.config.preview > 0.0 and self.count % self._preview_every == 0:
            self._publish_preview(t, now * 1e-9)
        self.count += 1

    def _publish_preview(self, t: float, stamp: float) -> None:
        """The trajectory's next `preview` s from `t`; row times on the node clock from `stamp`
        (the time the reference message of this tick carries)."""
        horizon = self.params.config.preview
        flat = preview_rows(self.traj, t, stamp, horizon, PREVIEW_SPACING_S, self._kernels)
        rows = np.array(flat).reshape(preview_count(horizon, PREVIEW_SPACING_S), -1)
        for listener in self.preview_listeners:
            listener(rows)
        if self._preview_out is None or self._preview_rows != len(rows):  # a new horizon
            table = table_array(rows.tolist(), 'point', self._preview_columns)
            self._preview_out, self._preview_rows = ArrayWriter(self.preview_pub, table), len(rows)
        self._preview_out.write(flat)

    def _diag(self):
        self.diagnostics.publish(Level.OK, self.kind, {'published': self.count})


def main(args=None) -> int:
    return run_node(
        ReferenceNode, args, config_hint='Fix config/control.yaml or the --ros-args overrides.'
    )


if __name__ == '__main__':
    sys.exit(main())
