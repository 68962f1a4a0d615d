"""reference node: publishes /reference/joint (JointState position/velocity) at `rate` Hz in the
node clock (sim time with use_sim_time), from the trajectory chosen by parameters."""
from __future__ import annotations

import sys

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node
from sensor_msgs.msg import JointState

from equimus_ros.main import run_node
from equimus_ros.params import declare
from equimus_ros.qos import COMMAND_QOS, DIAG_QOS

from .reference import make_reference
from equimus_description.statics import StaticParams


class ReferenceNode(Node):
    def __init__(self):
        super().__init__('reference')
        d = lambda n, v, t: declare(self, n, v, t)  # noqa: E731
        kind = d('trajectory', 'triangle', 'triangle | step | sine | hold')
        rate = d('rate', 120.0, 'Hz, publication rate in the node clock')
        move, hold = d('move', 0.5, 's per move'), d('hold', 1.5, 's per hold')
        tri = d('triangle_kpa', [6.15, 2.73, 3.76, 7.26, 19.80, 8.52], 'kPa pairs, flat')
        sign = d('pressure_sign', 1.0, 'pressure convention of the model for the triangle')
        steps = d('step_poses', [1.4, 0.8, 1.6, 0.5, 1.45, 0.55], 'rad pairs, flat')
        center = d('sine_center', [1.5, 0.6], 'rad')
        amp = d('sine_amplitude', [0.1, 0.15], 'rad')
        freq = d('sine_frequency', 0.25, 'Hz')
        hold_pose = d('hold_pose', [1.3909, 0.8533], 'rad, pose for trajectory hold')
        if rate <= 0:
            raise ValueError(f'parameter rate must be > 0 Hz, got {rate}')
        if kind == 'triangle':
            from equimus_description.leg import load_leg
            from .reference import triangle_poses
            params = StaticParams.from_leg(load_leg(), pressure_sign=sign)
            poses = triangle_poses(params, np.reshape(tri, (-1, 2)))
            self.traj = make_reference('triangle', poses=poses, move=move, hold=hold)
            self.get_logger().info(f'triangle poses (rad): {np.round(poses, 4).tolist()}')
        elif kind in ('step', 'steps'):
            self.traj = make_reference('steps', poses=np.reshape(steps, (-1, 2)), move=move,
                                       hold=hold)
        elif kind == 'hold':
            self.traj = make_reference('steps', poses=[hold_pose], move=0.0, hold=1.0)
        elif kind == 'sine':
            self.traj = make_reference(kind, center=center, amplitude=amp, frequency=freq)
        else:
            raise ValueError(f"parameter trajectory={kind!r}: use triangle, step, sine or hold")
        self.kind = kind
        self.t0 = None
        self.count = 0
        self.pub = self.create_publisher(JointState, '/reference/joint', COMMAND_QOS)
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', DIAG_QOS)
        self.create_timer(1.0 / rate, self._tick)
        self.create_timer(1.0, self._diag)

    def _tick(self):
        now = self.get_clock().now()
        if self.t0 is None:
            self.t0 = now
        t = (now - self.t0).nanoseconds * 1e-9
        q, qd = self.traj(t)
        m = JointState()
        m.header.stamp = now.to_msg()
        m.name = ['hip', 'knee']
        m.position = [float(v) for v in q]
        m.velocity = [float(v) for v in qd]
        self.pub.publish(m)
        self.count += 1

    def _diag(self):
        s = DiagnosticStatus(level=DiagnosticStatus.OK, name='reference', message=self.kind,
                             values=[KeyValue(key='published', value=str(self.count))])
        arr = DiagnosticArray(status=[s])
        arr.header.stamp = self.get_clock().now().to_msg()
        self.pub_diag.publish(arr)


def main(args=None) -> int:
    return run_node(ReferenceNode, args, config_hint='Fix config/control.yaml or the --ros-args overrides.')


if __name__ == '__main__':
    sys.exit(main())
