"""Re-activating the valve driver (auto_arm:=true) restarts the output from vented and the
controller afresh: over real rclpy/DDS, the driver (simulated board, its own process) and the PID
controller (in this process, to read its integral) as in the split graph, states and a far
reference from the test. While the driver is inactive the PID winds up to its clamp; on
activate the first applied pressures are 0 kPa and rise by the slew limit, and the integral is 0
when /valve/armed has reached the controller (issue 24).

The composed sim graph and the fused control loop, where the two share a process and are wired by
direct calls, are run whole as well (slow)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState
from paramclient import set_parameters
from rclpy.executors import SingleThreadedExecutor
from rosproc import start_node, stop
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray

from equimus_bringup.graph import describe_graph
from equimus_bringup.supervisor import Supervisor
from equimus_control.controller_node import ControllerNode
from equimus_description.interface import (
    DIAGNOSTICS,
    JOINT_STATES,
    REFERENCE,
    VALVE_APPLIED,
    VALVE_ARMED,
    VALVE_COMMAND,
    VALVE_PRESSURE,
)
from equimus_hw.natnet.ports import free_udp_port_pair
from equimus_hw.valve.config import DriverConfig
from equimus_ros.qos import publisher, subscription

STATE = [1.30, 0.90]  # rad: where the test's leg stays
# rad: the reference; held off it, the PID's hip integral climbs to its clamp (0.499 of 0.5 N·m
# after 5 s, offline) with the MAA command at 50 kPa.
TARGET = [1.40, 0.85]
SLEW = DriverConfig().slew_rate_kpa_s
RATE = 120.0


class Rig:
    """The driver's process; the controller node and the test node spun by an executor thread
    in this one (rclpy's LifecycleNode stays in the ROS graph after destroy_node, so the driver
    does not run here)."""

    def __init__(self) -> None:
        self.proc = start_node(
            'equimus_hw',
            'valve_driver',
            '-p',
            'board:=sim',
            '-p',
            'auto_arm:=true',
            '-p',
            'command_timeout_s:=2.0',
        )
        # the test's pauses never trip the stale guard
        rclpy.init(args=['--ros-args', '-p', 'controller:stale_timeout:=5.0'])
        self.controller = ControllerNode()
        self.node = rclpy.create_node('rearm_probe')
        self.applied: list[tuple[float, float, list[float]]] = []  # (arrival, stamp s, kPa)
        self.armed: list[bool] = []
        self._lock = threading.Lock()
        subscription(self.node, JointState, VALVE_APPLIED, self._on_applied)
        subscription(self.node, Bool, VALVE_ARMED, lambda m: self.armed.append(m.data))
        self.state_pub = publisher(self.node, JointState, JOINT_STATES)
        self.ref_pub = publisher(self.node, JointState, REFERENCE)
        self.ex = SingleThreadedExecutor()
        for n in (self.controller, self.node):
            self.ex.add_node(n)
        self.feeding = threading.Event()
        self._stop = False
        self._threads = [
            threading.Thread(target=self._spin, daemon=True),
            threading.Thread(target=self._feed, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _spin(self) -> None:
        while not self._stop and rclpy.ok():
            self.ex.spin_once(timeout_sec=0.02)

    def _on_applied(self, msg: JointState) -> None:
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        with self._lock:
            self.applied.append((time.monotonic(), stamp, list(msg.effort)))

    def _feed(self) -> None:
        """States at 120 Hz (stamped now) while `feeding` is set; the reference now and then."""
        i = 0
        while not self._stop:
            if self.feeding.is_set():
                now = self.node.get_clock().now().to_msg()
                state = JointState(name=['hip', 'knee'], position=STATE, velocity=[0.0, 0.0])
                state.header.stamp = now
                self.state_pub.publish(state)
                if i % 12 == 0:
                    ref = JointState(name=['hip', 'knee'], position=TARGET, velocity=[0.0, 0.0])
                    ref.header.stamp = now
                    self.ref_pub.publish(ref)
                i += 1
            time.sleep(1.0 / RATE)

    def applied_since(self, t: float) -> list[tuple[float, float, list[float]]]:
        with self._lock:
            return [a for a in self.applied if a[0] >= t]

    def change(self, transition: int) -> None:
        client = self.node.create_client(ChangeState, '/valve_driver/change_state')
        assert client.wait_for_service(timeout_sec=30.0), 'no /valve_driver/change_state'
        request = ChangeState.Request()
        request.transition.id = transition
        future = client.call_async(request)
        until(future.done, 10.0, f'change_state {transition}')
        assert future.result().success
        self.node.destroy_client(client)

    def integral(self) -> np.ndarray:
        with self.controller._lock:
            return np.array(self.controller.step.controller.integral)

    def close(self) -> str:
        self._stop = True
        for t in self._threads:
            t.join(2.0)
        self.ex.shutdown()
        for n in (self.node, self.controller):
            n.destroy_node()
        rclpy.try_shutdown()
        return stop(self.proc)


def until(predicate, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            pytest.fail(f'timed out after {timeout} s waiting for {what}')
        time.sleep(0.005)


def check_ramp(
    applied: list[tuple[float, float, list[float]]], quantum: float, t0: float | None = None
) -> None:
    """No faster than the slew limit from vented: each pressure at most slew x (its stamp - t0)
    + one DAC code. t0: the activation on the driver's clock, or (None) the first message after
    it, which must then be vented (the simulated board's slew counts from that first command)."""
    assert applied, 'nothing applied after the driver was activated'
    if t0 is None:
        t0 = applied[0][1]
        first = applied[0][2]
        assert max(first) <= quantum, f'the first applied pressures after activate: {first}'
    for _, s, p in applied:
        bound = SLEW * max(0.0, s - t0) + quantum
        assert max(p) <= bound, (p, s - t0, bound, applied[:8])


def test_reactivated_driver_ramps_from_vented_and_the_pid_restarts():
    rig = Rig()
    out = ''
    try:
        rig.change(Transition.TRANSITION_CONFIGURE)
        rig.change(Transition.TRANSITION_ACTIVATE)
        cal = DriverConfig().calibration()
        quantum = cal.volts_per_code * cal.kpa_per_volt  # one DAC code
        rig.feeding.set()
        until(lambda: rig.controller.arm_resets >= 1, 10.0, 'the driver armed at start')
        until(lambda: any(max(p) > 20.0 for _, _, p in rig.applied), 10.0, 'control under way')

        rig.change(Transition.TRANSITION_DEACTIVATE)
        until(lambda: rig.armed and rig.armed[-1] is False, 5.0, '/valve/armed false')
        until(lambda: rig.controller.valves_armed is False, 5.0, 'the controller hearing it')
        i_max = rig.controller.step.controller.g.i_max[0]
        # Inactive, the error held: the hip's integral winds up to its clamp, its command at
        # 50 kPa (the wound-up command).
        until(lambda: abs(rig.integral()[0]) > 0.95 * i_max, 10.0, 'the PID wound up')
        wound = rig.integral()

        # Activate with no state in flight: the integral is exactly 0 once the arm has reached
        # the controller (a cycle after it would integrate again).
        rig.feeding.clear()
        time.sleep(0.05)
        resets, stale = rig.controller.arm_resets, rig.controller.step.supervisor.trips['stale']
        t_activate = time.monotonic()
        rig.change(Transition.TRANSITION_ACTIVATE)
        until(lambda: rig.controller.arm_resets == resets + 1, 5.0, 'the reset at the arm')
        assert np.all(rig.integral() == 0.0), (wound, rig.integral())
        assert rig.controller.step.supervisor.trips['stale'] == stale  # not the stale guard
        assert rig.armed[-1] is True and rig.controller.valves_armed is True

        rig.feeding.set()
        until(lambda: len(rig.applied_since(t_activate)) >= 12, 10.0, 'applied pressures')
        after = rig.applied_since(t_activate)
        check_ramp(after, quantum)
        assert max(max(p) for _, _, p in after) > 10.0, after  # it does rise
        # The fresh PID integrates again from 0, not from the wound-up clamp.
        assert abs(rig.integral()[0]) < 0.5 * abs(wound[0]), (wound, rig.integral())
    finally:
        out = rig.close()
    assert rig.proc.returncode == 0 and 'Traceback' not in out, out


def test_check_ramp_catches_a_jump():
    jump = [(0.0, 0.0, [0.0, 0.0]), (0.0, 1 / 120, [49.96, 10.0])]
    with pytest.raises(AssertionError):
        check_ramp(jump, 0.03)
    with pytest.raises(AssertionError, match='first applied'):
        check_ramp([(0.0, 0.0, [49.96, 0.0])], 0.03)
    with pytest.raises(AssertionError):  # 20 kPa 10 ms after the arm
        check_ramp([(0.0, 5.01, [20.0, 0.0])], 0.03, t0=5.0)
    ramp = [(0.0, k / 120, [min(50.0, k * 1000 / 120), 0.0]) for k in range(10)]
    check_ramp(ramp, 0.03)
    check_ramp(ramp, 0.03, t0=0.0)


SIM = 'composed sim graph'


class GraphProbe:
    """/valve/applied, /valve/armed and the controller's /diagnostics of a running graph."""

    def __init__(self, node) -> None:
        self.node = node
        self.applied: list[tuple[float, float, list[float]]] = []
        self.armed: list[bool] = []
        self.controller: dict[str, str] = {}
        self.commands: list[list[float]] = [[0.0]]
        self.pressures: list[list[float]] = []  # what the valves measure (the sim's, the rig's)
        subscription(node, JointState, VALVE_APPLIED, self._on_applied)
        subscription(
            node, Float64MultiArray, VALVE_COMMAND, lambda m: self.commands.append(list(m.data))
        )
        subscription(node, Bool, VALVE_ARMED, lambda m: self.armed.append(m.data))
        subscription(node, DiagnosticArray, DIAGNOSTICS, self._on_diag)
        subscription(
            node, JointState, VALVE_PRESSURE, lambda m: self.pressures.append(list(m.effort))
        )

    def _on_applied(self, msg: JointState) -> None:
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        self.applied.append((time.monotonic(), stamp, list(msg.effort)))

    def _on_diag(self, msg: DiagnosticArray) -> None:
        for st in msg.status:
            if st.name == 'controller':
                self.controller = {kv.key: kv.value for kv in st.values}

    def spin_until(self, sup, cond, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while not cond():
            assert sup.poll() is None, sup.failed
            if time.monotonic() > end:
                pytest.fail(
                    f'timed out after {timeout} s waiting for {what}; seen: '
                    f'{len(self.commands) - 1} /valve/command, last {self.commands[-3:]}; '
                    f'{len(self.applied)} /valve/applied, last {self.applied[-3:]}; '
                    f'/valve/armed {self.armed[-3:]}; controller {self.controller}'
                )
            rclpy.spin_once(self.node, timeout_sec=0.01)

    def change(self, sup, transition: int) -> None:
        client = self.node.create_client(ChangeState, '/valve_driver/change_state')
        self.spin_until(sup, client.service_is_ready, 20.0, '/valve_driver/change_state')
        request = ChangeState.Request()
        request.transition.id = transition
        future = client.call_async(request)
        self.spin_until(sup, future.done, 20.0, f'change_state {transition}')
        assert future.result().success
        self.node.destroy_client(client)


@pytest.mark.slow
@pytest.mark.parametrize('graph', [SIM, 'fused control loop'])
def test_reactivation_in_the_composed_and_fused_graphs(ros_node, tmp_path, graph):
    """The same re-activation where the driver and the controller share a process: the composed
    sim graph (the in-process hand-off carries /valve/armed) and the fused loop on the emulated
    rig (a direct call): the output restarts from vented at the slew rate, the controller resets
    once per arm (its /diagnostics)."""
    if graph == SIM:
        # Paced at real time: every /valve/applied (120 Hz) reaches this probe.
        specs = describe_graph('sim', {'real_time_factor': '1'})
    else:
        port = free_udp_port_pair()
        overrides = {
            'emulator': 'true',
            'auto_arm': 'true',
            'fused_loop': 'true',
            'serial_port': str(tmp_path / 'dac'),
            'natnet_command_port': str(port),
            'natnet_data_port': str(port + 1),
        }
        specs = describe_graph('hardware', overrides)
    sup = Supervisor(specs, echo=False)
    probe = GraphProbe(ros_node)
    quantum = DriverConfig().calibration().volts_per_code * DriverConfig().kpa_per_volt
    sup.start()
    try:
        probe.spin_until(
            sup,
            lambda: (
                probe.controller.get('valves_armed') == 'true'
                and any(max(p) > 1.0 for _, _, p in probe.applied)
            ),
            90.0,
            'the graph controlling, armed',
        )
        # the reference's own future reaches the controller in this graph too
        probe.spin_until(
            sup,
            lambda: probe.controller.get('reference_preview') == 'on',
            30.0,
            'the controller taking its reference from /reference/preview',
        )
        resets = int(probe.controller['arm_resets'])
        # A large error, as the graph's own reference cannot be moved from outside: a stiff
        # proportional gain puts the command at the 50 kPa bound wherever the leg is; frames
        # may be sparse while the driver is inactive (lockstep), so no stale-state vent either.
        assert all(
            r.successful
            for r in set_parameters(ros_node, 'controller', kp=[300.0, 150.0], stale_timeout=5.0)
        )
        probe.change(sup, Transition.TRANSITION_DEACTIVATE)
        probe.spin_until(
            sup,
            lambda: probe.controller.get('valves_armed') == 'false' and probe.armed[-1:] == [False],
            10.0,
            '/valve/armed false, and the controller hearing it',
        )
        # Inactive for a while (1.5 s), the controller commanding the 50 kPa bound.
        end = time.monotonic() + 1.5
        probe.spin_until(
            sup,
            lambda: time.monotonic() > end and max(probe.commands[-1]) >= 49.0,
            30.0,
            'a while inactive with a 50 kPa command',
        )
        if graph == SIM:
            # The valves vented at the deactivation and stay so, whatever the controller says:
            # the sim once took an older answer of the driver for the setpoint after the vent.
            probe.spin_until(sup, lambda: probe.pressures, 10.0, f'{VALVE_PRESSURE.name}')
            assert max(probe.pressures[-1]) < 1.0, probe.pressures[-3:]
        t_activate = time.monotonic()
        # The serial board's slew runs on the wall clock, which stamps its messages: it counts
        # from the arm; the simulated board's on sim time, from the first command after it.
        armed_at = ros_node.get_clock().now().nanoseconds * 1e-9 if graph != SIM else None
        probe.change(sup, Transition.TRANSITION_ACTIVATE)
        probe.spin_until(
            sup,
            lambda: (
                any(max(a[2]) > 1.0 for a in probe.applied if a[0] >= t_activate)
                and probe.controller.get('arm_resets') == str(resets + 1)
                and probe.controller.get('valves_armed') == 'true'
                and probe.armed[-1:] == [True]
            ),
            30.0,
            'control resumed and the reset after activate',
        )
    finally:
        codes = sup.stop()
    assert all(c == 0 for c in codes.values()), codes
    before = [a for a in probe.applied if a[0] < t_activate]
    # By stamp as well as by arrival: a message stamped no later than one taken before the
    # activation was published before it (a starved probe can take one late).
    last = max((a[1] for a in before), default=float('-inf'))
    after = [a for a in probe.applied if a[0] >= t_activate and a[1] > last]
    before = before[-3:]
    try:
        check_ramp(after, quantum, armed_at)
    except AssertionError as e:
        # (received, stamp, kPa): a message taken after the activation but stamped before it
        # would be one published before the deactivation (seen once at load 10, not yet settled)
        raise AssertionError(
            f'{e}\nlast before activate: {before}\nfirst after: {after[:3]}'
        ) from None
