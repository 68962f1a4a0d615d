"""Managed drivers over real rclpy and DDS: the lifecycle_msgs services of valve_driver and
natnet_bridge, and the supervisor taking them to active and ending the graph when one exits."""

from __future__ import annotations

import math
import os
import re
import signal
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
import rclpy
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetAvailableTransitions, GetState
from rclpy.executors import SingleThreadedExecutor
from rosproc import start_node, stop
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger

from equimus_description.interface import VALVE_APPLIED, VALVE_COMMAND
from equimus_ros.arrays import float_array
from equimus_ros.qos import publisher, subscription

#: the primary state a successful transition ends in
GOAL_STATE = {
    Transition.TRANSITION_CONFIGURE: State.PRIMARY_STATE_INACTIVE,
    Transition.TRANSITION_ACTIVATE: State.PRIMARY_STATE_ACTIVE,
    Transition.TRANSITION_DEACTIVATE: State.PRIMARY_STATE_INACTIVE,
    Transition.TRANSITION_CLEANUP: State.PRIMARY_STATE_UNCONFIGURED,
    Transition.TRANSITION_UNCONFIGURED_SHUTDOWN: State.PRIMARY_STATE_FINALIZED,
    Transition.TRANSITION_INACTIVE_SHUTDOWN: State.PRIMARY_STATE_FINALIZED,
    Transition.TRANSITION_ACTIVE_SHUTDOWN: State.PRIMARY_STATE_FINALIZED,
}
PRIMARY_STATES = {
    State.PRIMARY_STATE_UNCONFIGURED,
    State.PRIMARY_STATE_INACTIVE,
    State.PRIMARY_STATE_ACTIVE,
    State.PRIMARY_STATE_FINALIZED,
}


class Manager:
    """A lifecycle manager in the test process: get_state/change_state of any node."""

    def __init__(self, name: str):
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node(name, context=self.ctx)
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.ex.add_node(self.node)
        self.applied: list[list[float]] = []
        self._lock = threading.Lock()
        self._spinning = True
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while self._spinning and self.ctx.ok():
            try:
                self.ex.spin_once(timeout_sec=0.05)
            except Exception:  # noqa: BLE001 - context shut down while spinning
                return

    def _call(
        self,
        srv,
        name: str,
        request,
        timeout: float = 20.0,
        ask_again_s: float = 0.0,
        unanswered=None,
    ):
        """Call a service and wait for its answer. A query (`ask_again_s` > 0) is asked again
        after that long unanswered: a reply sent before the server has discovered this
        client's reply reader is lost (DDS), which a loaded machine's slow discovery made
        happen (2 of 2 get_state calls in the loaded run of 15:16 UTC, 20 s each). Transitions
        are asked once: a second request would find the state already changed; a lost answer
        is then `unanswered()` (a configure's, once in CI with the CPUs oversubscribed)."""
        client = self.node.create_client(srv, name)
        assert client.wait_for_service(timeout_sec=timeout), f'{name} never appeared'
        future = client.call_async(request)
        end = time.monotonic() + timeout
        again = time.monotonic() + ask_again_s if ask_again_s > 0 else math.inf
        while not future.done():
            now = time.monotonic()
            if now >= end and unanswered is not None:
                client.remove_pending_request(future)
                self.node.destroy_client(client)
                return unanswered()
            assert now < end, f'{name} did not answer'
            if now >= again:
                client.remove_pending_request(future)
                future = client.call_async(request)
                again = now + ask_again_s
            time.sleep(0.01)
        self.node.destroy_client(client)
        return future.result()

    def state(self, node: str) -> int:
        request = GetState.Request()
        return self._call(GetState, f'/{node}/get_state', request, ask_again_s=5.0).current_state.id

    def change(self, node: str, transition: int) -> bool:
        """The transition's success; when its answer is lost, whether the node is now in the
        transition's goal state (asked with get_state, which is asked again until answered)."""
        request = ChangeState.Request()
        request.transition.id = transition

        def by_state() -> SimpleNamespace:
            end = time.monotonic() + 20.0
            state = self.state(node)
            while state not in PRIMARY_STATES and time.monotonic() < end:  # still transitioning
                time.sleep(0.1)
                state = self.state(node)
            return SimpleNamespace(success=state == GOAL_STATE[transition])

        return self._call(
            ChangeState, f'/{node}/change_state', request, timeout=10.0, unanswered=by_state
        ).success

    def available(self, node: str) -> set[str]:
        """Labels of the transitions the node's state machine offers now."""
        res = self._call(
            GetAvailableTransitions,
            f'/{node}/get_available_transitions',
            GetAvailableTransitions.Request(),
            ask_again_s=5.0,
        )
        return {t.transition.label for t in res.available_transitions}

    def watch_applied(self) -> None:
        def on(msg):
            with self._lock:
                self.applied.append(list(msg.effort))

        subscription(self.node, JointState, VALVE_APPLIED, on)

    def last_applied(self) -> list[float] | None:
        with self._lock:
            return self.applied[-1] if self.applied else None

    def close(self) -> None:
        self._spinning = False
        self._thread.join(2.0)
        self.ex.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)


def _check_arm_refusal(m: Manager, node: str, steps: list[str]) -> None:
    """~/arm refused with the transitions to take, in order; the first is valid right now."""
    refused = m._call(Trigger, f'/{node}/arm', Trigger.Request())
    assert not refused.success, refused.message
    named = re.findall(rf'`ros2 lifecycle set /{node} (\w+)`', refused.message)
    assert named == steps, refused.message
    assert steps[0] in m.available(node), (refused.message, m.available(node))


def _until(predicate, timeout: float, what: str):
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, what
        time.sleep(0.02)


def test_valve_driver_transitions_open_arm_vent_and_close():
    """unconfigured -> configure (board open, vented) -> activate (auto_arm: follows commands)
    -> deactivate (vents, ignores commands) -> cleanup -> shutdown, over the real services."""
    proc = start_node(
        'equimus_hw',
        'valve_driver',
        '-p',
        'board:=sim',
        '-p',
        'auto_arm:=true',
        '-p',
        'command_timeout_s:=5.0',
    )
    m = Manager('lifecycle_manager_valve')
    m.watch_applied()
    cmd = publisher(m.node, Float64MultiArray, VALVE_COMMAND)
    name = 'valve_driver'
    try:
        assert m.state(name) == State.PRIMARY_STATE_UNCONFIGURED
        cmd.publish(float_array([20.0, 20.0], ''))
        time.sleep(0.5)
        assert m.last_applied() is None  # no board open: nothing is applied
        _check_arm_refusal(m, name, ['configure', 'activate'])

        assert m.change(name, Transition.TRANSITION_CONFIGURE)
        assert m.state(name) == State.PRIMARY_STATE_INACTIVE
        time.sleep(0.3)
        cmd.publish(float_array([20.0, 20.0], ''))
        time.sleep(0.5)
        assert m.last_applied() in (None, [0.0, 0.0])  # inactive: commands are ignored
        _check_arm_refusal(m, name, ['activate'])  # configure is not valid from inactive

        assert m.change(name, Transition.TRANSITION_ACTIVATE)
        assert m.state(name) == State.PRIMARY_STATE_ACTIVE

        def pressurised():
            cmd.publish(float_array([20.0, 20.0], ''))
            last = m.last_applied()
            return last is not None and min(last) > 15.0

        _until(pressurised, 10.0, f'active driver never followed commands: {m.last_applied()}')

        assert m.change(name, Transition.TRANSITION_DEACTIVATE)
        assert m.state(name) == State.PRIMARY_STATE_INACTIVE
        _until(lambda: m.last_applied() == [0.0, 0.0], 2.0, 'deactivate did not vent')
        for _ in range(10):
            cmd.publish(float_array([20.0, 20.0], ''))
            time.sleep(0.02)
        time.sleep(0.3)
        assert m.last_applied() == [0.0, 0.0]  # still vented: inactive ignores commands

        assert m.change(name, Transition.TRANSITION_CLEANUP)
        assert m.state(name) == State.PRIMARY_STATE_UNCONFIGURED
        assert not m.change(name, Transition.TRANSITION_ACTIVATE)  # must configure first
        assert m.change(name, Transition.TRANSITION_UNCONFIGURED_SHUTDOWN)
        assert m.state(name) == State.PRIMARY_STATE_FINALIZED
        finalized = m._call(Trigger, '/valve_driver/arm', Trigger.Request())
        assert not finalized.success and 'restart' in finalized.message, finalized.message
        assert 'lifecycle set' not in finalized.message  # no transition leaves finalized
    finally:
        m.close()
        out = stop(proc)
    assert proc.returncode == 0 and 'Traceback' not in out, out
    assert 'deactivated: disarmed, all channels vented to 0 kPa' in out, out


def test_a_driver_stopped_before_configure_says_it_never_opened_the_board():
    """Stopped while unconfigured (a launch that ends during start-up), the driver has no board
    to vent and says so, not "vented on shutdown (acknowledged)"."""
    proc = start_node('equimus_hw', 'valve_driver', '-p', 'board:=sim')
    m = Manager('lifecycle_manager_unconfigured')
    try:
        assert m.state('valve_driver') == State.PRIMARY_STATE_UNCONFIGURED
    finally:
        m.close()
        out = stop(proc)
    assert proc.returncode == 0, out
    assert 'valve_driver: stopped before configure (the board was never opened)' in out, out
    assert 'vented on shutdown' not in out, out


def test_natnet_bridge_configure_opens_the_sockets_and_fails_on_a_foreign_address():
    """configure binds the NatNet sockets: an address of no local interface fails the transition
    (the node stays unconfigured and says why); a local one succeeds, activate streams."""
    from equimus_hw.natnet.ports import free_udp_ports

    port = free_udp_ports(1)[0]
    bad = start_node(
        'equimus_hw',
        'natnet_bridge',
        '-p',
        'local_address:=192.0.2.1',  # TEST-NET-1: never a local interface
        '-p',
        f'data_port:={port}',
        '-p',
        'multicast:=false',
    )
    m = Manager('lifecycle_manager_bridge')
    try:
        assert m.state('natnet_bridge') == State.PRIMARY_STATE_UNCONFIGURED
        assert not m.change('natnet_bridge', Transition.TRANSITION_CONFIGURE)
        assert m.state('natnet_bridge') == State.PRIMARY_STATE_UNCONFIGURED
    finally:
        out = stop(bad)
    assert 'cannot open NatNet sockets' in out, out
    # Another name: the first process's service may stay listed for its DDS lease.
    good = start_node(
        'equimus_hw',
        'natnet_bridge',
        '-r',
        '__node:=bridge_b',
        '-p',
        'local_address:=127.0.0.1',
        '-p',
        'server_address:=127.0.0.1',
        '-p',
        f'data_port:={port}',
        '-p',
        'multicast:=false',
    )
    try:
        for transition, state in (
            (Transition.TRANSITION_CONFIGURE, State.PRIMARY_STATE_INACTIVE),
            (Transition.TRANSITION_ACTIVATE, State.PRIMARY_STATE_ACTIVE),
            (Transition.TRANSITION_DEACTIVATE, State.PRIMARY_STATE_INACTIVE),
            (Transition.TRANSITION_CLEANUP, State.PRIMARY_STATE_UNCONFIGURED),
        ):
            assert m.change('bridge_b', transition), transition
            assert m.state('bridge_b') == state
    finally:
        m.close()
        out = stop(good)
    assert good.returncode == 0 and 'Traceback' not in out, out
    assert 'active: streaming' in out and 'NatNet sockets closed' in out, out


@pytest.fixture
def hardware_drivers(tmp_path):
    """rig_emulator, natnet_bridge and valve_driver of the hardware graph under the supervisor."""
    from equimus_bringup.graph import describe_graph
    from equimus_bringup.supervisor import Supervisor
    from equimus_hw.natnet.ports import free_udp_port_pair

    port = free_udp_port_pair()
    specs = describe_graph(
        'hardware',
        dict(
            emulator='true',
            serial_port=str(tmp_path / 'dac'),
            natnet_command_port=str(port),
            natnet_data_port=str(port + 1),
        ),
    )
    keep = ('rig_emulator', 'natnet_bridge', 'valve_driver')
    sup = Supervisor([s for s in specs if s.name in keep], echo=False)
    yield sup
    sup.stop()


def test_supervisor_activates_the_drivers_and_a_killed_bridge_ends_the_graph(hardware_drivers):
    """The supervisor brings both managed nodes to active over their services; a SIGKILL of the
    bridge ends the graph: the valve driver is deactivated (vents) first, then all stop."""
    sup = hardware_drivers
    sup.start()
    m = Manager('lifecycle_observer')
    try:
        for name in ('valve_driver', 'natnet_bridge'):
            assert m.state(name) == State.PRIMARY_STATE_ACTIVE, name
    finally:
        m.close()
    assert sup.poll() is None, sup.failed
    os.kill(sup.procs['natnet_bridge'].pid, signal.SIGKILL)
    t0 = time.monotonic()
    rc = sup.run_until(timeout=30.0)
    elapsed = time.monotonic() - t0
    assert rc == 1 and sup.failed.startswith('natnet_bridge exited with code -9'), sup.failed
    assert elapsed < 15.0, elapsed
    assert all(p.poll() is not None for p in sup.procs.values())
    assert sup.procs['valve_driver'].returncode == 0
    driver_log = ''.join(sup.output['valve_driver'])
    vent = driver_log.find('deactivated: disarmed, all channels vented to 0 kPa')
    assert vent >= 0, driver_log
    assert vent < driver_log.find('vented on shutdown'), driver_log  # deactivated before the stop


def test_a_recorded_bag_holds_stamped_pressures_and_z_up_poses(tmp_path):
    """The hardware side (rig emulator, bridge, driver) recorded: /valve/applied and
    /valve/pressure are stamped JointStates of the actuators; the poses are in `mocap`, Z up
    (the emulated Motive streams Y up, as Motive does by default)."""
    from equimus_bringup.graph import describe_graph
    from equimus_bringup.supervisor import Supervisor
    from equimus_description.interface import ACTUATORS, FRAME_MOCAP, VALVE_PRESSURE, mocap_topic
    from equimus_hw.natnet.ports import free_udp_port_pair
    from equimus_record import bag

    port = free_udp_port_pair()
    specs = describe_graph(
        'hardware',
        dict(
            emulator='true',
            record='true',
            bag=str(tmp_path / 'bag'),
            serial_port=str(tmp_path / 'dac'),
            natnet_command_port=str(port),
            natnet_data_port=str(port + 1),
        ),
    )
    keep = ('rig_emulator', 'natnet_bridge', 'valve_driver', 'recorder')
    sup = Supervisor([s for s in specs if s.name in keep], echo=False)
    connected = []

    def recorded_enough() -> bool:
        """4 s after the driver's link to the emulated board is up: the read-backs come with the
        board's answers, so a slow start (a loaded host) must not eat the recording."""
        if not connected and 'DAC board connected' in ''.join(sup.output.get('valve_driver', [])):
            connected.append(time.monotonic())
        return bool(connected) and time.monotonic() - connected[0] > 4.0

    try:
        sup.start()
        assert sup.run_until(recorded_enough, timeout=30.0) == 0, sup.failed
    finally:
        sup.stop()
    logs = {name: sup.output.get(name, [])[-8:] for name in ('valve_driver', 'recorder')}
    assert connected, logs
    assert bag.is_complete(tmp_path / 'bag')
    counts = bag.topic_counts(tmp_path / 'bag')
    for topic in (VALVE_APPLIED.name, VALVE_PRESSURE.name):
        assert counts.get(topic, ('',))[0] == 'sensor_msgs/msg/JointState', (topic, counts, logs)
        msgs = list(bag.read_messages(tmp_path / 'bag', [topic]))
        assert len(msgs) > 20, (topic, len(msgs), logs)
        stamps = [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for _, _, m in msgs]
        assert all(b >= a for a, b in zip(stamps, stamps[1:], strict=False)), topic
        # Stamped when made, on the wall clock: each message reached the recorder after its
        # stamp and typically within milliseconds. A single one may wait longer: under the
        # suite's load the recorder once took a message 0.54 s after its stamp (CI of
        # d19382c), while a stamp from another clock (sim time, 0, a board's) is off by far
        # more than the 5 s allowed.
        delays = [log_ns - stamp for (_, log_ns, _), stamp in zip(msgs, stamps, strict=True)]
        assert all(0 <= d < 5e9 for d in delays), (topic, min(delays), max(delays))
        assert float(np.median(delays)) < 0.1e9, (topic, float(np.median(delays)))
        for _, _, m in msgs:
            assert list(m.name) == list(ACTUATORS) and len(m.effort) == len(ACTUATORS)
            assert len(m.position) == 0 and len(m.velocity) == 0
            assert all(0.0 <= p <= 50.0 for p in bag.pressures(m))
    poses = [m for _, _, m in bag.read_messages(tmp_path / 'bag', [mocap_topic('base')])]
    assert len(poses) > 100
    base = poses[-1].pose.position
    assert poses[-1].header.frame_id == FRAME_MOCAP
    # the rig's base hangs 0.7 m above the floor: z up in `mocap` (it was Motive's y)
    assert base.z == pytest.approx(0.7, abs=0.01) and abs(base.y) < 0.01, base


def test_the_graph_marks_the_managed_and_the_required_processes(tmp_path):
    """Managed: the drivers in their own processes (the launch files and the supervisor bring
    them up); required (their exit ends the graph): the drivers or the process holding them,
    and the emulated rig."""
    from equimus_bringup.graph import describe_graph

    common = dict(emulator='true', serial_port=str(tmp_path / 'dac'))
    split = describe_graph('hardware', common)
    assert {s.name for s in split if s.managed} == {'natnet_bridge', 'valve_driver'}
    assert {s.name for s in split if s.required} == {
        'natnet_bridge',
        'valve_driver',
        'rig_emulator',
    }
    fused = describe_graph('hardware', dict(common, fused_loop='true'))
    assert not any(s.managed for s in fused)  # control_loop brings them up in-process
    assert {s.name for s in fused if s.required} == {'control_loop', 'rig_emulator'}
    sim = describe_graph('sim', {'composed': 'false'})
    assert {s.name for s in sim if s.managed} == {'valve_driver'}


def test_a_recorded_sim_bag_stamps_pressures_with_the_frame_time(tmp_path):
    """The split sim graph recorded: /valve/pressure (the sim node's raw CDR writer) is stamped
    with its frame's sim time, like /sim/joint_states; the poses are Z up."""
    from equimus_bringup.graph import describe_graph
    from equimus_bringup.supervisor import Supervisor
    from equimus_description.interface import (
        ACTUATORS,
        SIM_JOINT_STATES,
        VALVE_PRESSURE,
        mocap_topic,
    )
    from equimus_record import bag

    specs = describe_graph(
        'sim', {'composed': 'false', 'record': 'true', 'bag': str(tmp_path / 'bag')}
    )
    keep = ('sim', 'valve_driver', 'estimator', 'controller', 'reference', 'recorder')
    sup = Supervisor([s for s in specs if s.name in keep], echo=False)
    try:
        sup.start()
        assert sup.run_until(timeout=8.0) == 0, sup.failed
    finally:
        sup.stop()
    path = tmp_path / 'bag'

    def stamp(m):
        return m.header.stamp.sec * 10**9 + m.header.stamp.nanosec

    truth = {stamp(m) for _, _, m in bag.read_messages(path, [SIM_JOINT_STATES.name])}
    pressures = [m for _, _, m in bag.read_messages(path, [VALVE_PRESSURE.name])]
    assert len(pressures) > 50 and len(truth) > 50
    assert all(list(m.name) == list(ACTUATORS) for m in pressures)
    matched = sum(stamp(m) in truth for m in pressures)
    assert matched > 0.9 * len(pressures), (matched, len(pressures))  # best effort: a few lost
    applied = [m for _, _, m in bag.read_messages(path, [VALVE_APPLIED.name])]
    # stamped on the driver's sim clock: 0 only before its first /clock
    assert applied and sum(stamp(m) > 0 for m in applied) > 0.9 * len(applied)
    base = [m.pose.position for _, _, m in bag.read_messages(path, [mocap_topic('base')])]
    assert base and all(abs(p.z - 0.7) < 1e-9 and abs(p.y) < 1e-9 for p in base)
