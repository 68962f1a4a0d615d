"""controller node: one valve command per /joint_states message (the mocap frame clocks the loop).

controller = pid | mpc | sampling | open_loop. Safety (equimus_control.supervisor): joint-limit guard,
invalid state (NaN from the estimator) and a stale-state timer on the steady clock all publish
0 kPa. Saturation, guard trips and per-cycle compute time go to /diagnostics.
"""
from __future__ import annotations

import collections
import sys
import time
from typing import Callable, Optional

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension

from equimus_ros.main import run_node
from equimus_ros.params import declare
from equimus_ros.qos import COMMAND_QOS, DIAG_QOS

from . import CONTROLLERS
from .pid import PIDController, PIDGains, StaticFeedforward
from .reference import reference_at
from equimus_description.statics import StaticParams
from .supervisor import VENT, SafetyConfig, Supervisor


REF_PREVIEW_MAX = 0.1   # s; beyond this a late reference is held, not extrapolated


class ControllerNode(Node):
    """`subscribe_state=False` and `downstream` are for the fused control loop: states come by
    call (`on_state`) and each command goes to `downstream` before it is published."""

    def __init__(self, subscribe_state: bool = True,
                 downstream: Optional[Callable[[Float64MultiArray], None]] = None):
        super().__init__('controller')
        self.downstream = downstream
        d = lambda n, v, t: declare(self, n, v, t)  # noqa: E731
        kind = d('controller', 'pid', 'pid | mpc | sampling | open_loop')
        sign = d('pressure_sign', 1.0, '+1 pressure lengthens the actuator (rig and sim), −1 pulls')
        pset = d('leg_parameter_set', '', 'parameter set of config/leg.yaml ('' = as is)')
        p_max = d('p_max', 50.0, 'kPa, upper command bound')
        safety = SafetyConfig(safe_min=tuple(d('safe_min', [0.6, -0.1], 'rad, [hip, knee]')),
                              safe_max=tuple(d('safe_max', [2.5, 2.0], 'rad, [hip, knee]')),
                              stale_timeout=d('stale_timeout', 0.25, 's without a valid state'),
                              p_max=p_max)
        gains = PIDGains(kp=tuple(d('kp', [3.0, 1.5], 'N·m/rad')),
                         ki=tuple(d('ki', [4.0, 2.0], 'N·m/(rad·s)')),
                         kd=tuple(d('kd', [0.15, 0.06], 'N·m·s/rad, on measurement')),
                         i_max=tuple(d('i_max', [0.5, 0.3], 'N·m, integral clamp')),
                         k_aw=d('k_aw', 5.0, '1/s, anti-windup back-calculation'))
        mpc_kw = {'horizon': d('horizon', 15, 'MPC steps'), 'block': d('block', 3, 'periods/step'),
                  'q_theta': tuple(d('q_theta', [4000.0, 4000.0], 'angle weight')),
                  'q_vel': d('q_vel', 0.5, 'velocity weight'), 'r_u': d('r_u', 1e-4, 'per kPa²'),
                  'r_du': d('r_du', 1e-4, 'per kPa² change'),
                  'du_max': d('du_max', 25.0, 'kPa per period rate limit'),
                  'grid_step': d('grid_step', 0.1, 'rad, linearisation grid'),
                  'grid_lo': tuple(d('grid_lo', [1.0, 0.05], 'rad')),
                  'grid_hi': tuple(d('grid_hi', [2.0, 1.25], 'rad')), 'p_max': p_max}
        ps_kw = {'samples': d('sampling_samples', 12, 'rollouts per cycle'),
                 'horizon': d('sampling_horizon', 0.25, 's'),
                 'knots': d('sampling_knots', 4, 'plan values per valve over the horizon'),
                 'sigma': d('sampling_sigma', 6.0, 'kPa, knot perturbation'),
                 'threads': d('sampling_threads', 2, 'rollout threads'),
                 'du_max': mpc_kw['du_max'], 'p_max': p_max}
        from equimus_description.leg import load_leg
        leg = load_leg(parameter_set=pset or None)
        self.params = StaticParams.from_leg(leg, pressure_sign=sign)
        if kind == 'pid':
            self.ctrl = PIDController(self.params, gains, p_max)
        elif kind == 'open_loop':
            self.ctrl = StaticFeedforward(self.params, p_max)
        elif kind == 'mpc':
            from equimus_sim.leg_model import LegModel
            from .mpc import LinearMPC, MPCConfig
            t0 = time.perf_counter()
            lm = LegModel(leg.with_timestep(1 / 1200))
            self.ctrl = LinearMPC(lm, self.params, MPCConfig(valve_tau=leg.valve_time_constant,
                                                             **mpc_kw))
            self.get_logger().info(f'MPC linearisation grid ready in {time.perf_counter() - t0:.1f} s')
        elif kind == 'sampling':
            from equimus_sim.leg_model import LegModel
            from .sampling import PredictiveSampling, SamplingConfig
            lm = LegModel(leg.with_timestep(1 / 120))
            self.ctrl = PredictiveSampling(lm, self.params, SamplingConfig(
                valve_tau=leg.valve_time_constant, **ps_kw))
        else:
            raise ValueError(f"parameter controller={kind!r}: use one of {', '.join(CONTROLLERS)}")
        self.kind = kind
        self.sup = Supervisor(safety)
        self.q_ref = None
        self.qd_ref = np.zeros(2)
        self.ref_stamp = None
        self.last_stamp = None
        self.compute = collections.deque(maxlen=1000)  # recent cycles only: bounded memory
        self.cycles = 0
        self.saturated = np.zeros(2, int)
        self.last_reason = None
        self.pub = self.create_publisher(Float64MultiArray, '/valve/command', COMMAND_QOS)
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', DIAG_QOS)
        if subscribe_state:
            self.create_subscription(JointState, '/joint_states', self.on_state,
                                     qos_profile_sensor_data)
        self.create_subscription(JointState, '/reference/joint', self._on_ref, COMMAND_QOS)
        self.steady = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(0.05, self._stale_check, clock=self.steady)
        self.create_timer(1.0, self._diag, clock=self.steady)

    def _now(self):
        return self.steady.now().nanoseconds * 1e-9

    def _publish(self, u):
        m = Float64MultiArray()
        m.layout.dim = [MultiArrayDimension(label='maa,baa', size=2, stride=2)]
        m.data = [float(u[0]), float(u[1])]
        if self.downstream is not None:
            self.downstream(m)
        self.pub.publish(m)

    def _on_ref(self, msg: JointState):
        if len(msg.position) >= 2 and np.all(np.isfinite(msg.position[:2])):
            self.q_ref = np.array(msg.position[:2], float)
            v = msg.velocity[:2] if len(msg.velocity) >= 2 else [0.0, 0.0]
            self.qd_ref = np.nan_to_num(np.array(v, float))
            self.ref_stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9

    def on_state(self, msg: JointState) -> None:
        t0 = time.perf_counter()
        q = np.array(msg.position[:2], float) if len(msg.position) >= 2 else np.full(2, np.nan)
        qd = np.array(msg.velocity[:2], float) if len(msg.velocity) >= 2 else np.zeros(2)
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        dt = 1 / 120 if self.last_stamp is None or stamp <= self.last_stamp else \
            min(stamp - self.last_stamp, 0.1)
        self.last_stamp = stamp
        if not self.sup.check_state(q, self._now()) or not np.all(np.isfinite(qd)):
            self.ctrl.reset()
            self._publish(VENT)
            self._reason_changed()
            return
        if self.q_ref is None:
            self.q_ref = q.copy()     # no reference yet: hold where the leg is
        out = self.ctrl.step(q, qd, self._reference_at(stamp), self.qd_ref, dt)
        u, sat = (out[0], out[1]) if isinstance(out, tuple) else (out.pressures, out.saturated)
        u = self.sup.clip(u)
        self._publish(u)
        self.cycles += 1
        self.saturated += np.asarray(sat, bool)
        self.compute.append(time.perf_counter() - t0)
        self._reason_changed()

    def _reference_at(self, stamp: float) -> np.ndarray:
        if self.ref_stamp is None:
            return self.q_ref
        return reference_at(self.q_ref, self.qd_ref, self.ref_stamp, stamp, REF_PREVIEW_MAX)

    def _stale_check(self):
        if self.sup.check_stale(self._now()):
            self.ctrl.reset()
            self._publish(VENT)
            self._reason_changed()

    def _reason_changed(self):
        if self.sup.reason != self.last_reason:
            self.last_reason = self.sup.reason
            if self.sup.venting:
                self.get_logger().warning(f'venting: {self.sup.reason}')
            self._diag()

    def _diag(self):
        s = DiagnosticStatus(name='controller', hardware_id=self.kind)
        s.level = DiagnosticStatus.ERROR if self.sup.venting else (
            DiagnosticStatus.WARN if self.saturated.any() else DiagnosticStatus.OK)
        s.message = f'venting: {self.sup.reason}' if self.sup.venting else 'controlling'
        c = np.array(self.compute) * 1e3
        vals = {'controller': self.kind, 'cycles': self.cycles,
                'saturated_cycles_maa': int(self.saturated[0]),
                'saturated_cycles_baa': int(self.saturated[1]),
                'trips_joint_limit': self.sup.trips['joint_limit'],
                'trips_invalid': self.sup.trips['invalid'], 'trips_stale': self.sup.trips['stale'],
                'compute_p50_ms': f'{np.percentile(c, 50):.3f}' if c.size else 'nan',
                'compute_p99_ms': f'{np.percentile(c, 99):.3f}' if c.size else 'nan'}
        s.values = [KeyValue(key=k, value=str(v)) for k, v in vals.items()]
        arr = DiagnosticArray(status=[s])
        arr.header.stamp = self.get_clock().now().to_msg()
        self.pub_diag.publish(arr)


def main(args=None) -> int:
    return run_node(ControllerNode, args, config_hint='Fix config/control.yaml or the --ros-args overrides.')


if __name__ == '__main__':
    sys.exit(main())
