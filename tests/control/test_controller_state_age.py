"""The controller reports how old its states were when their commands went out
(`state_age_p50_ms`, `state_age_p99_ms` on /diagnostics): the loop's delay as the controller has
it, which `equimus adapt` retunes and teaches with. Over real rclpy/DDS from a probe node whose
states are stamped a known time before they are published."""

from __future__ import annotations

import time

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rosspin import BackgroundSpin
from sensor_msgs.msg import JointState

from equimus_control.controller_node import ControllerNode
from equimus_description.interface import DIAGNOSTICS, JOINT_STATES, JOINTS
from equimus_ros.qos import publisher

#: s the probe's states are old when it publishes them (a mocap and estimator behind)
OLD_S = 0.040


def _report(reports: list[DiagnosticArray], after: float) -> dict[str, str] | None:
    for msg in reversed(reports):
        t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        for status in msg.status:
            if status.name == 'controller' and t > after:
                return {kv.key: kv.value for kv in status.values}
    return None


def test_the_controller_reports_how_old_its_states_were():
    rclpy.init(args=['--ros-args', '-p', 'controller:stale_timeout:=5.0'])
    try:
        controller = ControllerNode()
        probe = rclpy.create_node('state_age_probe')
        reports: list[DiagnosticArray] = []
        probe.create_subscription(DiagnosticArray, DIAGNOSTICS.name, reports.append, 100)
        states = publisher(probe, JointState, JOINT_STATES)
        ex = SingleThreadedExecutor()
        for n in (controller, probe):
            ex.add_node(n)
        spin = BackgroundSpin(ex, controller.context)
        # 2.5 s at 120 Hz, and on until the controller took 150 states: a loaded machine gives
        # its spin thread fewer (92 in 2.5 s beside a busy loop and the suite's three workers).
        start = time.monotonic()
        while time.monotonic() < start + 2.5 or (
            controller.cycles <= 150 and time.monotonic() < start + 20.0
        ):
            msg = JointState(name=list(JOINTS), position=[1.30, 0.90], velocity=[0.0, 0.0])
            sec, nanosec = divmod(int((time.time() - OLD_S) * 1e9), 1_000_000_000)
            msg.header.stamp.sec, msg.header.stamp.nanosec = sec, nanosec
            states.publish(msg)
            time.sleep(1 / 120)
        since = time.time()
        deadline = time.monotonic() + 10.0
        while (values := _report(reports, since)) is None:
            assert time.monotonic() < deadline, f'no controller report; {spin.report()}'
            time.sleep(0.05)
        assert controller.cycles > 100, controller.cycles
        p50, p99 = float(values['state_age_p50_ms']), float(values['state_age_p99_ms'])
        # the stamp's age plus the hand-over (DDS between two nodes of this process) and the step
        assert 1e3 * OLD_S <= p50 < 1e3 * OLD_S + 25.0, values
        assert p50 <= p99, values
        spin.stop()
        ex.shutdown()
    finally:
        rclpy.try_shutdown()
