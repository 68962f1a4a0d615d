"""estimator node: /mocap/{base,thigh,calf}/pose → /joint_states (+ /diagnostics).

Frames are synchronised by header stamp; an incomplete frame older than `sync_window` behind the
newest stamp counts as lost tracking. Invalid state is published as NaN position/velocity.
"""
from __future__ import annotations

import math
import sys
from typing import Callable, Optional

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import JointState

from equimus_ros.main import run_node
from equimus_ros.params import declare
from equimus_ros.qos import DIAG_QOS

from .estimation import EstimatorConfig, HingeSpec, JointStateEstimator, Status

BODIES = ('base', 'thigh', 'calf')
LEVEL = {Status.VALID: DiagnosticStatus.OK, Status.HELD: DiagnosticStatus.WARN,
         Status.INVALID: DiagnosticStatus.ERROR}


class EstimatorNode(Node):
    """`subscribe=False` and `downstream` are for the fused control loop: poses come by call
    (`on_pose`) and each joint state goes to `downstream` before it is published."""

    def __init__(self, subscribe: bool = True,
                 downstream: Optional[Callable[[JointState], None]] = None):
        super().__init__('estimator')
        self.downstream = downstream
        p = {}
        for name, default, desc in [
                ('period', 1 / 120, 'nominal mocap period (s)'),
                ('max_hold', 0.1, 's a held estimate is published before it becomes invalid'),
                ('sigma_meas', 0.002, 'angle measurement noise (rad)'),
                ('sigma_acc', 10.0, 'white-acceleration process noise (rad/s²)'),
                ('sync_window', 0.05, 's an incomplete frame waits for its other bodies'),
                ('hip_axis_parent', [-1.0, 0.0, 0.0], 'hip axis in the base body frame'),
                ('hip_axis_child', [-1.0, 0.0, 0.0], 'hip axis in the thigh body frame'),
                ('hip_offset', math.pi / 2, 'hip zero offset (rad)'),
                ('knee_axis_parent', [-1.0, 0.0, 0.0], 'knee axis in the thigh body frame'),
                ('knee_axis_child', [-1.0, 0.0, 0.0], 'knee axis in the calf body frame'),
                ('knee_offset', math.pi / 2, 'knee zero offset (rad)')]:
            p[name] = declare(self, name, default, desc)
        cfg = EstimatorConfig(
            hip=HingeSpec(tuple(p['hip_axis_parent']), tuple(p['hip_axis_child']), p['hip_offset']),
            knee=HingeSpec(tuple(p['knee_axis_parent']), tuple(p['knee_axis_child']),
                           p['knee_offset']),
            period=p['period'], max_hold=p['max_hold'], sigma_meas=p['sigma_meas'],
            sigma_acc=p['sigma_acc'])
        self.sync_window = p['sync_window']
        self.est = JointStateEstimator(cfg)
        self.pending = {}            # stamp ns → {body: (pos, quat)}
        self.last_status = None
        self.last_done_ns = -1
        self.frames = 0
        self.counts = {s: 0 for s in Status}
        self.pub = self.create_publisher(JointState, '/joint_states', qos_profile_sensor_data)
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', DIAG_QOS)
        for b in BODIES if subscribe else ():
            self.create_subscription(PoseStamped, f'/mocap/{b}/pose',
                                     lambda m, b=b: self.on_pose(b, m), qos_profile_sensor_data)
        self.create_timer(1.0, self._diag)

    def on_pose(self, body: str, msg: PoseStamped) -> None:
        ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        if ns <= self.last_done_ns:
            return
        p, o = msg.pose.position, msg.pose.orientation
        self.pending.setdefault(ns, {})[body] = ((p.x, p.y, p.z), (o.x, o.y, o.z, o.w))
        for stamp in sorted(self.pending):
            frame = self.pending[stamp]
            complete = len(frame) == len(BODIES)
            if not complete and (ns - stamp) * 1e-9 < self.sync_window:
                break
            del self.pending[stamp]
            nan = ((math.nan,) * 3, (math.nan,) * 4)
            self._process(stamp, msg.header.stamp if stamp == ns else None,
                          [frame.get(b, nan) for b in BODIES])

    def _process(self, ns, stamp_msg, poses):
        self.last_done_ns = ns
        try:
            e = self.est.update(ns * 1e-9, poses)
        except ValueError as exc:
            self.get_logger().warning(f'mocap frame skipped: {exc}')
            return
        self.frames += 1
        self.counts[e.status] += 1
        out = JointState()
        out.header.stamp.sec, out.header.stamp.nanosec = divmod(ns, 1_000_000_000)
        out.header.frame_id = 'mocap'
        out.name = ['hip', 'knee']
        out.position = [float(v) for v in e.position]
        out.velocity = [float(v) for v in e.velocity]
        if self.downstream is not None:
            self.downstream(out)
        self.pub.publish(out)
        if e.status != self.last_status:
            self.last_status = e.status
            self._diag()

    def _diag(self):
        st = self.last_status if self.last_status is not None else Status.INVALID
        s = DiagnosticStatus(level=LEVEL[st], name='estimator: joint state', hardware_id='mocap')
        s.message = {Status.VALID: 'valid', Status.HELD: 'held (tracking lost or frames dropped)',
                     Status.INVALID: 'invalid: no usable mocap (check that base, thigh and calf '
                                     'are tracked)'}[st]
        s.values = [KeyValue(key='frames', value=str(self.frames)),
                    KeyValue(key='dropped_frames', value=str(self.est.dropped_frames)),
                    KeyValue(key='lost_frames', value=str(self.est.lost_frames)),
                    KeyValue(key='held_frames', value=str(self.counts[Status.HELD])),
                    KeyValue(key='invalid_frames', value=str(self.counts[Status.INVALID]))]
        arr = DiagnosticArray(status=[s])
        arr.header.stamp = self.get_clock().now().to_msg()
        self.pub_diag.publish(arr)


def main(args=None) -> int:
    return run_node(EstimatorNode, args, config_hint='Fix config/control.yaml or the --ros-args overrides.')


if __name__ == '__main__':
    sys.exit(main())
