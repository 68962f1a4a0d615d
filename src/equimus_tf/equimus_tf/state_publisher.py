"""state_publisher node: robot_description, /tf and /tf_static (a robot_state_publisher for the
leg, plus the motion-capture rigid bodies as frames of their own).

- /robot_description (latched): the URDF built from the leg description (equimus_description.urdf).
- /tf_static (latched): world → base (the URDF's fixed joint) and world → mocap (parameters).
- /tf: base → thigh → calf at each /joint_states (the estimator's), stamped with its stamp;
  mocap → mocap_<body> at each /mocap/<body>/pose, stamped with the capture time.
- Until the first valid joint state: base → thigh → calf at the rest pose (urdf.rest_positions,
  inside the joint limits; the URDF's zero pose is not), stamped now, every REST_PERIOD_S, so a
  viewer shows a valid leg from its first message. Not under use_sim_time: there the simulator's
  first frame, at sim time 0, is the first state.

/tf and /tf_static need tf2_msgs, which has no PyPI wheel: scripts/setup.sh builds it
(third_party/tf2_msgs); a ROS 2 install has it. Without it the node publishes robot_description
only and says so.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Sequence
from typing import Any

from geometry_msgs.msg import PoseStamped, TransformStamped
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from equimus_description.config import ConfigError, param, validate_fields
from equimus_description.interface import (
    BODIES,
    JOINT_STATES,
    ROBOT_DESCRIPTION,
    TF,
    TF_STATIC,
    mocap_frame,
    mocap_pose,
)
from equimus_description.leg import load_leg
from equimus_description.motive import Pose
from equimus_description.urdf import build_urdf, rest_positions
from equimus_ros.cdr import TransformsWriter
from equimus_ros.executors import timer_callback
from equimus_ros.main import run_node
from equimus_ros.params import bind
from equimus_ros.qos import publisher, subscription

from . import frames

try:
    from tf2_msgs.msg import TFMessage
except ImportError:  # PyPI ROS without the locally built tf2_msgs
    TFMessage = None

#: s (steady clock) between the rest pose's /tf messages before the first joint state: a viewer
#: that starts later still gets one within this time.
REST_PERIOD_S = 0.2


@dataclasses.dataclass(frozen=True)
class StatePublisherParams:
    """Fixed at start: the frames describe the rig, which does not move while running."""

    mocap_frame_xyz: tuple[float, ...] = param(
        (0.0, 0.0, 0.0), 'm, origin of the motion-capture frame in the world frame'
    )
    mocap_frame_rpy: tuple[float, ...] = param(
        (0.0, 0.0, 0.0),
        'rad, roll-pitch-yaw of the motion-capture frame in the world frame (both Z-up, '
        "REP-103: the bridge converts Motive's up axis, so no rotation by default)",
        range=(-2 * math.pi, 2 * math.pi),
    )
    leg_parameter_set: str = param('', "parameter set of the leg description ('' = as is)")
    leg_description: str = param(
        '', "another limb's YAML for the URDF and the mocap bodies ('' = the rig's leg)"
    )
    publish_frequency: float = param(
        50.0,
        'Hz, most /tf messages per second from each source (joint states; mocap frames), '
        'by message stamp; 0 = one per message',
        range=(0.0, 1000.0),
    )

    def __post_init__(self) -> None:
        validate_fields(self)
        for name in ('mocap_frame_xyz', 'mocap_frame_rpy'):
            value = getattr(self, name)
            if len(value) != 3 or not all(math.isfinite(v) for v in value):
                raise ConfigError(f'{name}={list(value)}: must be three finite numbers')


def to_msg(t: frames.Transform, stamp: Any) -> TransformStamped:
    msg = TransformStamped()
    msg.header.stamp = stamp
    msg.header.frame_id = t.parent
    msg.child_frame_id = t.child
    tr, rot = msg.transform.translation, msg.transform.rotation
    tr.x, tr.y, tr.z = t.xyz
    rot.x, rot.y, rot.z, rot.w = t.quat
    return msg


class StatePublisher(Node):
    def __init__(self):
        super().__init__('state_publisher')
        cfg = bind(self, StatePublisherParams()).config
        leg = load_leg(cfg.leg_description or None, parameter_set=cfg.leg_parameter_set or None)
        self.urdf = build_urdf(leg)
        bodies = list(leg.bodies) if cfg.leg_description else list(BODIES)
        self.frames = frames.LegFrames(self.urdf)
        self.description_pub = publisher(self, String, ROBOT_DESCRIPTION)
        description = String(data=self.urdf)
        self.description_pub.publish(description)
        # What was published once at start (a composing process records it: sim_graph).
        self.latched: list[tuple[Any, Any]] = [(self.description_pub, description)]
        if TFMessage is None:
            self.get_logger().warning(
                'tf2_msgs is not importable: /tf and /tf_static are off '
                '(run scripts/setup.sh, which builds it, or install ros-<distro>-tf2-msgs)'
            )
            return
        stamp = self.get_clock().now().to_msg()
        static = [
            *self.frames.static(),
            frames.mocap_frame(cfg.mocap_frame_xyz, cfg.mocap_frame_rpy),
        ]
        self.static_pub = publisher(self, TFMessage, TF_STATIC)
        static_msg = TFMessage(transforms=[to_msg(t, stamp) for t in static])
        self.static_pub.publish(static_msg)
        self.latched.append((self.static_pub, static_msg))
        self.tf_pub = publisher(self, TFMessage, TF)
        self.joint_gate = frames.RateGate(cfg.publish_frequency)
        self.mocap_gate = frames.RateGate(cfg.publish_frequency)
        self.mocap_batch = frames.StampBatch(bodies)
        self._mocap_children = {body: mocap_frame(body) for body in bodies}
        self._tf_writers: dict[tuple[tuple[str, str], ...], TransformsWriter] = {}
        self._rest = rest_positions(leg)
        self._rest_timer = None
        # Until the first valid joint state. A flag, not only the timer's destruction: the events
        # executor may still run a tick it queued before the joint state destroyed the timer.
        self._resting = not self.get_parameter('use_sim_time').value
        if self._resting:
            self._publish_rest()
            self._rest_timer = self.create_timer(
                REST_PERIOD_S,
                timer_callback(self._publish_rest),
                clock=Clock(clock_type=ClockType.STEADY_TIME),
            )
        subscription(self, JointState, JOINT_STATES, self.on_joint_state)
        for body in bodies:
            subscription(self, PoseStamped, mocap_pose(body), lambda m, b=body: self.on_pose(b, m))

    # At 120 Hz per source: /tf is packed from the numbers (equimus_ros.cdr.TransformsWriter),
    # one writer per frame pair set, and published as bytes (messages only if its check failed).
    def _publish_tf(self, pairs: tuple[tuple[str, str], ...], transforms: list) -> None:
        writer = self._tf_writers.get(pairs)
        if writer is None:
            writer = self._tf_writers[pairs] = TransformsWriter(pairs)
        self.tf_pub.publish(writer.encode(transforms) if writer.ok else writer.message(transforms))

    def _publish_rest(self) -> None:
        """The leg at its rest pose, stamped now (until the first valid joint state)."""
        if not self._resting:
            return
        moving = self.frames.moving(list(self._rest), list(self._rest.values()))
        assert moving is not None  # every joint of the URDF has a rest position
        t_ns = self.get_clock().now().nanoseconds
        self._publish_tf(
            tuple((t.parent, t.child) for t in moving), [(t_ns, t.xyz, t.quat) for t in moving]
        )

    def on_joint_state(self, msg: JointState) -> None:
        self.on_joints(_ns(msg.header.stamp), msg.name, msg.position)

    def on_joints(self, t_ns: int, names: Sequence[str], positions: Sequence[float]) -> None:
        """A joint state: from /joint_states, or by direct call in the composed sim graph."""
        # The gate first: it drops most states, and an invalid one must not take its slot.
        if not self.joint_gate.passes(t_ns):
            return
        moving = self.frames.moving(names, positions)
        if moving is None:
            return
        self._resting = False  # a real state from now on
        if self._rest_timer is not None:
            self.destroy_timer(self._rest_timer)
            self._rest_timer = None
        self.joint_gate.ready(t_ns)
        self._publish_tf(
            tuple((t.parent, t.child) for t in moving), [(t_ns, t.xyz, t.quat) for t in moving]
        )

    def on_pose(self, body: str, msg: PoseStamped) -> None:
        """One /tf message per motion-capture frame (its bodies share the capture stamp)."""
        p, o = msg.pose.position, msg.pose.orientation
        self.on_body_pose(
            body, msg.header.frame_id, _ns(msg.header.stamp), (p.x, p.y, p.z), (o.x, o.y, o.z, o.w)
        )

    def on_body_pose(self, body: str, frame_id: str, t_ns: int, xyz: tuple, quat: tuple) -> None:
        """A body's pose in `frame_id` (quaternion x, y, z, w) at `t_ns`: from its topic, or by
        direct call in the composed sim graph."""
        item = None
        if frames.pose_is_finite(xyz, quat):
            item = ((frame_id, mocap_frame(body)), (t_ns, xyz, quat))
        group = self.mocap_batch.add(body, t_ns, item)
        if group and self.mocap_gate.ready(group[0][1][0]):
            self._publish_tf(tuple(pair for pair, _ in group), [tf for _, tf in group])

    def on_mocap_frame(self, frame_id: str, t_ns: int, poses: Sequence[tuple[str, Pose]]) -> None:
        """A whole motion-capture frame, (body, (xyz, quat x, y, z, w)) each: the composed sim
        graph's direct call. The gate comes first, so a frame it drops (most of them: /tf at
        publish_frequency from 120 Hz) costs a comparison, not the bodies' bookkeeping."""
        gate = self.mocap_gate
        if not gate.passes(t_ns):
            return
        children = self._mocap_children  # a body not configured here is named as it comes
        group = [
            ((frame_id, children.get(body) or mocap_frame(body)), (t_ns, xyz, quat))
            for body, (xyz, quat) in poses
            if frames.pose_is_finite(xyz, quat)
        ]
        if group and gate.ready(t_ns):
            self._publish_tf(tuple(pair for pair, _ in group), [tf for _, tf in group])


def _ns(stamp: Any) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def main(args=None) -> int:
    return run_node(
        StatePublisher, args, config_hint='Fix the --ros-args overrides of state_publisher.'
    )


if __name__ == '__main__':
    sys.exit(main())
