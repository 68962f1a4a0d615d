"""estimator node: /mocap/{base,thigh,calf}/pose → /joint_states (+ /diagnostics).

Frames are synchronised by header stamp; an incomplete frame older than `sync_window` behind the
newest stamp counts as lost tracking. Invalid state is published as NaN position/velocity.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
from collections.abc import Callable

from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from sensor_msgs.msg import JointState

from equimus_description.config import ConfigError, param, validate_fields
from equimus_description.interface import (
    BODIES,
    DIAGNOSTICS,
    FRAME_MOCAP,
    JOINT_STATES,
    JOINTS,
    mocap_pose,
)
from equimus_description.leg import load_leg
from equimus_description.motive import NAN_POSE, Pose
from equimus_ros.cdr import JointStateWriter
from equimus_ros.clocks import time_reader
from equimus_ros.diagnostics import Diagnostics, Level
from equimus_ros.executors import timer_callback
from equimus_ros.main import run_node
from equimus_ros.params import bind
from equimus_ros.qos import publisher, subscription

from .estimation import (
    EstimatorConfig,
    HingeSpec,
    JointStateEstimator,
    Status,
    hinges_from_description,
)

LEVEL = {Status.VALID: Level.OK, Status.HELD: Level.WARN, Status.INVALID: Level.ERROR}
_EST, _HINGE = EstimatorConfig(), HingeSpec()  # the plain estimator's defaults


@dataclasses.dataclass(frozen=True)
class EstimatorParams:
    """The estimator node's parameters. The filter's tuning and the hold/sync times apply while
    running; the hinge geometry and the nominal period are calibration, fixed at start (a new
    offset would make the published angle jump under a running controller)."""

    period: float = param(_EST.period, 'nominal mocap period (s)', range=(1e-4, 1.0))
    max_hold: float = param(
        _EST.max_hold,
        's a held estimate is published before it becomes invalid (NaN)',
        range=(0.0, 10.0),
        runtime=True,
    )
    sigma_meas: float = param(
        _EST.sigma_meas, 'angle measurement noise (rad)', range=(1e-9, 1.0), runtime=True
    )
    sigma_acc: float = param(
        _EST.sigma_acc, 'white-acceleration process noise (rad/s²)', range=(1e-6, 1e6), runtime=True
    )
    sync_window: float = param(
        0.05, 's an incomplete frame waits for its other bodies', range=(0.0, 1.0), runtime=True
    )
    hip_axis_parent: tuple[float, ...] = param(
        _HINGE.axis_parent, 'hip axis in the base body frame'
    )
    hip_axis_child: tuple[float, ...] = param(_HINGE.axis_child, 'hip axis in the thigh body frame')
    hip_offset: float = param(_HINGE.offset, 'hip zero offset (rad)', range=(-10.0, 10.0))
    knee_axis_parent: tuple[float, ...] = param(
        _HINGE.axis_parent, 'knee axis in the thigh body frame'
    )
    knee_axis_child: tuple[float, ...] = param(
        _HINGE.axis_child, 'knee axis in the calf body frame'
    )
    knee_offset: float = param(_HINGE.offset, 'knee zero offset (rad)', range=(-10.0, 10.0))
    leg_description: str = param(
        '',
        "another limb's YAML: its bodies are tracked and its hinges measured as in the "
        "simulation's virtual mocap (body frames world-aligned at the build pose; the hip/knee "
        "calibration above is then unused); '' = the rig's leg with that calibration",
    )

    def __post_init__(self) -> None:
        validate_fields(self)
        for name in ('hip_axis_parent', 'hip_axis_child', 'knee_axis_parent', 'knee_axis_child'):
            axis = getattr(self, name)
            if len(axis) != 3 or not math.hypot(*axis) > 1e-9:
                raise ConfigError(f'{name}={list(axis)}: must be a non-zero 3-vector')

    def bodies_and_joints(self) -> tuple[list[str], list[str], tuple]:
        """(mocap bodies in pose order, joint names, EstimatorConfig.joints)."""
        if not self.leg_description:
            return list(BODIES), list(JOINTS), ()
        leg = load_leg(self.leg_description)
        bodies, joints = hinges_from_description(leg)
        return bodies, list(leg.joints), joints

    def estimator(self, joints: tuple = ()) -> EstimatorConfig:
        """The plain estimator's configuration."""
        return EstimatorConfig(
            joints=joints,
            hip=HingeSpec(tuple(self.hip_axis_parent), tuple(self.hip_axis_child), self.hip_offset),
            knee=HingeSpec(
                tuple(self.knee_axis_parent), tuple(self.knee_axis_child), self.knee_offset
            ),
            period=self.period,
            max_hold=self.max_hold,
            sigma_meas=self.sigma_meas,
            sigma_acc=self.sigma_acc,
        )


class EstimatorNode(Node):
    """`subscribe=False` and `downstream` are for the fused control loop: frames come by call
    (`on_frame`) and each joint state goes to `downstream` (stamp ns, positions, velocities)
    before its message is built and published. `frame_time`: the composed sim graph's frame
    time, read in place of the node clock."""

    def __init__(
        self,
        subscribe: bool = True,
        downstream: Callable[[int, list[float], list[float]], None] | None = None,
        frame_time: Callable[[], int] | None = None,
    ):
        super().__init__('estimator')
        self.downstream = downstream
        # ns on the node clock, or the composing graph's frame time (equimus_ros.clocks)
        self._clock_ns = time_reader(self.get_clock(), frame_time)
        self.params = bind(self, EstimatorParams(), apply=self._apply)
        cfg = self.params.config
        self.sync_window = cfg.sync_window
        self.bodies, self.joint_names, self._joints = cfg.bodies_and_joints()
        self.est = JointStateEstimator(cfg.estimator(self._joints))
        self._spare: JointStateEstimator | None = None  # `rehearse`'s copy of est
        self.pending: dict[int, dict[str, Pose]] = {}  # stamp ns → {body: (pos, quat)}
        self.last_status: Status | None = None
        self.last_done_ns = -1
        self.last_frame_at: float | None = None  # node clock (s) when the last frame was processed
        self.frames = 0
        self.counts = {s: 0 for s in Status}
        self.pub = publisher(self, JointState, JOINT_STATES)
        self.out = JointStateWriter(self.pub, self.joint_names, FRAME_MOCAP)
        self.diagnostics = Diagnostics(self, DIAGNOSTICS, 'estimator: joint state', 'mocap')
        for b in self.bodies if subscribe else ():
            subscription(self, PoseStamped, mocap_pose(b), lambda m, b=b: self.on_pose(b, m))
        self.create_timer(1.0, timer_callback(self._diag))

    def _apply(self, cfg: EstimatorParams) -> None:
        """Runtime parameters: the estimator reads its config on every frame."""
        self.sync_window = cfg.sync_window
        self.est.cfg = cfg.estimator(self._joints)

    def on_pose(self, body: str, msg: PoseStamped) -> None:
        """One body's pose from its topic (the split graph)."""
        p, o = msg.pose.position, msg.pose.orientation
        ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        self.on_frame(ns, [(body, ((p.x, p.y, p.z), (o.x, o.y, o.z, o.w)))])

    def on_frame(self, ns: int, poses: list[tuple[str, Pose]]) -> None:
        """Poses of one stamp (ns): a whole frame in the fused loop, one body from a topic.
        Bodies the estimator does not use (the bridge may stream more) are left out."""
        if ns <= self.last_done_ns:
            return
        if not self.pending:  # the usual case in the fused loop: a whole frame, nothing waiting
            frame = {name: pose for name, pose in poses if name in self.bodies}
            if len(frame) == len(self.bodies):
                self._process(ns, [frame[b] for b in self.bodies])
                return
        self.pending.setdefault(ns, {}).update(p for p in poses if p[0] in self.bodies)
        for stamp in sorted(self.pending):
            frame = self.pending[stamp]
            complete = len(frame) == len(self.bodies)
            if not complete and (ns - stamp) * 1e-9 < self.sync_window:
                break
            del self.pending[stamp]
            self._process(stamp, [frame.get(b, NAN_POSE) for b in self.bodies])

    def rehearse(
        self, poses: list[tuple[str, Pose]]
    ) -> tuple[float, list[float], list[float]] | None:
        """The fused loop's rehearsal (control_loop): the estimate for a whole frame's poses on
        a spare copy of the estimator, at the last frame's stamp, so its code is in the caches
        when the next frame comes; nothing of this node changes, nothing is published.
        (stamp s, positions, velocities), or None for a frame it would not estimate."""
        stamp = self.est.last_stamp
        frame = {name: pose for name, pose in poses if name in self.bodies}
        if stamp is None or len(frame) != len(self.bodies):
            return None
        spare = self._spare
        if spare is None:
            spare = self._spare = copy.deepcopy(self.est)
        spare.cfg = self.est.cfg
        try:
            e = spare.update(stamp, [frame[b] for b in self.bodies])
        except ValueError:  # the same stamp again: no frame came since the last rehearsal
            return None
        return stamp, e.position.tolist(), e.velocity.tolist()

    def _process(self, ns: int, poses: list[Pose]) -> None:
        self.last_done_ns = ns
        try:
            e = self.est.update(ns * 1e-9, poses)
        except ValueError as exc:
            self.get_logger().warning(f'mocap frame skipped: {exc}')
            return
        position, velocity = e.position.tolist(), e.velocity.tolist()
        if self.downstream is not None:  # before the message is built and the books kept
            self.downstream(ns, position, velocity)
        self.frames += 1
        self.last_frame_at = self._clock_ns() * 1e-9
        self.counts[e.status] += 1
        self.out.write(ns, position, velocity)
        if e.status != self.last_status:
            self.last_status = e.status
            self._diag()

    def _diag(self):
        """The last frame's status, or stale: with no frame for longer than max_hold the joint
        state is not being published at all (a bridge that stopped, or whose poses do not reach
        this node), whatever the last frame said."""
        st = self.last_status if self.last_status is not None else Status.INVALID
        message = {
            Status.VALID: 'valid',
            Status.HELD: 'held (tracking lost or frames dropped)',
            Status.INVALID: 'invalid: no usable mocap (check that base, thigh and calf '
            'are tracked)',
        }[st]
        level = LEVEL[st]
        age = math.nan
        if self.last_frame_at is not None:
            age = self._clock_ns() * 1e-9 - self.last_frame_at
            if age > self.params.config.max_hold:
                level = Level.ERROR
                message = (
                    f'stale: no mocap frame for {age:.1f} s (last: {message}); check that '
                    'natnet_bridge is streaming and its /mocap poses reach this node'
                )
        self.diagnostics.publish(
            level,
            message,
            {
                'frames': self.frames,
                'last_frame_age_s': f'{age:.3f}',
                'dropped_frames': self.est.dropped_frames,
                'lost_frames': self.est.lost_frames,
                'held_frames': self.counts[Status.HELD],
                'invalid_frames': self.counts[Status.INVALID],
            },
        )


def main(args=None) -> int:
    return run_node(
        EstimatorNode, args, config_hint='Fix config/control.yaml or the --ros-args overrides.'
    )


if __name__ == '__main__':
    sys.exit(main())
