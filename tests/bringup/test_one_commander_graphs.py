"""One commander in the three graphs, the controller stopped with SIGSTOP while an intruder node
publishes [45, 45] kPa on /valve/command at 50 Hz (the attack of issue 28): the intruder's
pressures never reach /valve/applied or the board, the valves vent and stay vented, and an ERROR
names the intruder; the controller, continued, commands again.

- split sim graph (`composed:=false sim_mode:=realtime`): the controller is its own process; it
  stays on the ROS graph while stopped, so the driver never obeys the intruder and its watchdog
  vents (before, the intruder drove the valves from +0.5 s);
- composed sim graph (sim_graph) and fused hardware loop (control_loop against the emulated rig,
  whose board is in this process): the controller shares the driver's process, so SIGSTOP stops
  the driver too (in the fused loop the board's own watchdog vents); the driver never hears a
  publisher outside its process and names it once it runs again.

Real processes, rclpy/DDS, MuJoCo; in the fused case a real pty and real UDP NatNet. Assertions
are on what reached the valves, with margins for a loaded machine, not on tight timings.
"""

import os
import signal
import threading
import time

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from rosspin import BackgroundSpin
from std_msgs.msg import Float64MultiArray

from equimus_bringup.graph import describe_graph
from equimus_bringup.supervisor import Supervisor
from equimus_description.interface import DIAGNOSTICS, VALVE_APPLIED, VALVE_COMMAND
from equimus_hw.natnet.ports import free_udp_port_pair
from equimus_ros.qos import qos_for

rclpy = pytest.importorskip('rclpy')

INTRUDER = [45.0, 45.0]
STALL_S = 3.0  # the controller stays stopped this long (the old hole opened after 0.5 s)


class Intruder:
    """A node in this process that records /valve/applied and, once started, publishes
    [45, 45] kPa on /valve/command at 50 Hz from a thread of its own."""

    def __init__(self) -> None:
        from rclpy.executors import SingleThreadedExecutor
        from sensor_msgs.msg import JointState

        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node('intruder', context=self.ctx)
        self.applied: list[tuple[float, list[float]]] = []
        self.node.create_subscription(
            JointState,
            VALVE_APPLIED.name,
            lambda m: self.applied.append((time.monotonic(), list(m.effort))),
            qos_for(VALVE_APPLIED),
        )
        self.driver: list[tuple[float, dict[str, str]]] = []  # the driver's /diagnostics values
        self.node.create_subscription(
            DiagnosticArray, DIAGNOSTICS.name, self._on_diag, qos_for(DIAGNOSTICS)
        )
        self.pub = None
        self.sent = 0
        self._stop = threading.Event()
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.ex.add_node(self.node)
        self.spin = BackgroundSpin(self.ex, self.ctx)
        self._thread: threading.Thread | None = None

    def _on_diag(self, msg) -> None:
        for st in msg.status:
            if st.name.startswith('valve_driver'):
                self.driver.append((time.monotonic(), {kv.key: kv.value for kv in st.values}))

    def start(self) -> None:
        self.pub = self.node.create_publisher(
            Float64MultiArray, VALVE_COMMAND.name, qos_for(VALVE_COMMAND)
        )

        def run() -> None:
            while not self._stop.wait(0.02):
                self.pub.publish(Float64MultiArray(data=INTRUDER))
                self.sent += 1

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.pub is not None:
            self.node.destroy_publisher(self.pub)
            self.pub = None

    def close(self) -> None:
        self.stop()
        self.spin.stop()
        self.ex.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)

    def matched(self) -> bool:
        """Every subscriber the graph shows on /valve/command is matched to the publisher."""
        n = self.node.count_subscribers(VALVE_COMMAND.name)
        return self.pub is not None and n > 0 and self.pub.get_subscription_count() >= n

    def pressurised(self, since: float, n: int = 20) -> bool:
        rows = [d for t, d in self.applied if t > since]
        return len(rows) >= n and any(max(d) > 1.0 for d in rows)

    def intruder_reached(self) -> list:
        """Rows with the intruder's pressure on both valves (44.98 kPa after the DAC)."""
        return [(t, d) for t, d in self.applied if all(abs(v - 45.0) < 0.5 for v in d)]


def _wait(sup, cond, timeout, what):
    end = time.monotonic() + timeout
    while not cond():
        assert sup.poll() is None, sup.failed
        assert time.monotonic() < end, f'timed out after {timeout} s waiting for {what}'
        time.sleep(0.05)


def _output(sup, name):
    return ''.join(sup.output.get(name, []))


def _ok_stop(sup):
    codes = sup.stop()
    assert all(c == 0 for c in codes.values()), (codes, {k: v[-5:] for k, v in sup.output.items()})


@pytest.mark.slow
def test_split_graph_a_stopped_controller_never_hands_the_valves_to_an_intruder():
    sup = Supervisor(
        describe_graph('sim', {'composed': 'false', 'sim_mode': 'realtime'}), echo=False
    )
    intruder = Intruder()
    controller = None
    try:
        sup.start()
        t0 = time.monotonic()
        _wait(sup, lambda: intruder.pressurised(t0), 90.0, 'the loop to pressurise the valves')
        controller = sup.procs['controller'].pid
        os.kill(controller, signal.SIGSTOP)
        t_stop = time.monotonic()

        # The watchdog vents first (the driver says so on /diagnostics, at once on the change);
        # the intruder starts after that, when the controller has been silent for longer than
        # the watchdog period (the old rule then obeyed it at once).
        def tripped():
            return next(
                (t for t, v in intruder.driver if t > t_stop and v['watchdog_active'] == 'true'),
                None,
            )

        _wait(sup, tripped, 10.0, "the driver's watchdog vent")
        t_vent = tripped()
        intruder.start()
        # DDS discovery of the intruder (no safety figure) first: from then on the driver gets
        # its commands. The valves must stay vented for the whole stall. (Commands the controller
        # sent just before it stopped may still arrive late on a loaded machine: they are the
        # commander's, so the window starts 1 s after the vent.)
        _wait(sup, intruder.matched, 30.0, 'the driver to receive the intruder')
        time.sleep(STALL_S)
        assert not intruder.intruder_reached(), intruder.intruder_reached()[:3]
        after = [d for t, d in intruder.applied if t >= t_vent + 1.0]
        assert all(d == [0.0, 0.0] for d in after), after[-5:]
        stalled = [v for t, v in intruder.driver if t >= t_vent + 1.0]
        assert stalled and all(v['output_kpa'] == '0.000,0.000' for v in stalled), stalled[-3:]
        assert intruder.sent > 50 * STALL_S * 0.5, intruder.sent
        # Named in an ERROR at its first command (logged at once; the log pipe may lag).
        _wait(
            sup,
            lambda: 'not obeyed: /intruder' in _output(sup, 'valve_driver'),
            10.0,
            'the driver to name the intruder',
        )
        log = _output(sup, 'valve_driver')
        assert 'ERROR' in log and 'while /controller commands the valves' in log, log[-2000:]
        # Continued: the controller is still the commander and drives again, the intruder
        # still publishing and still ignored.
        os.kill(controller, signal.SIGCONT)
        controller = None
        t_cont = time.monotonic()
        _wait(sup, lambda: intruder.pressurised(t_cont, 5), 30.0, 'control to resume')
        time.sleep(0.5)
    finally:
        if controller is not None:
            os.kill(controller, signal.SIGCONT)
        intruder.stop()
        try:
            _ok_stop(sup)
        finally:
            intruder.close()
    assert not intruder.intruder_reached(), intruder.intruder_reached()[:5]


@pytest.mark.slow
def test_composed_graph_stopped_never_obeys_an_intruder():
    sup = Supervisor(describe_graph('sim', {}), echo=False)
    assert [s.name for s in sup.specs] == ['sim_graph']
    intruder = Intruder()
    graph = None
    try:
        sup.start()
        t0 = time.monotonic()
        _wait(sup, lambda: intruder.pressurised(t0), 90.0, 'the loop to pressurise the valves')
        graph = sup.procs['sim_graph'].pid
        os.kill(graph, signal.SIGSTOP)  # the controller, and with it the driver and the sim
        t_stop = time.monotonic()
        intruder.start()
        time.sleep(STALL_S)
        stalled = [d for t, d in intruder.applied if t > t_stop + 0.2]
        assert not stalled, f'a stopped graph published {stalled[:3]}'
        os.kill(graph, signal.SIGCONT)
        graph = None
        t_cont = time.monotonic()
        _wait(
            sup,
            lambda: (
                'not obeyed: 1 publisher(s) of /valve/command outside this process (/intruder)'
                in _output(sup, 'sim_graph')
            ),
            30.0,
            'the driver to name the intruder',
        )
        assert 'ERROR' in _output(sup, 'sim_graph')
        _wait(sup, lambda: intruder.pressurised(t_cont), 30.0, 'control to resume')
        time.sleep(1.0)  # the intruder goes on publishing while the loop runs
    finally:
        if graph is not None:
            os.kill(graph, signal.SIGCONT)
        intruder.stop()
        try:
            _ok_stop(sup)
        finally:
            intruder.close()
    assert intruder.sent > 50 * STALL_S * 0.5, intruder.sent
    assert not intruder.intruder_reached(), intruder.intruder_reached()[:5]


@pytest.mark.slow
def test_fused_loop_stopped_the_board_vents_and_never_sees_an_intruder(tmp_path):
    from equimus_bringup.rig_emulator import EmulatedRig
    from equimus_description.interface import BODIES
    from equimus_hw.natnet.emulator import NatNetEmulator
    from equimus_hw.valve.calibration import ValveCalibration

    port = free_udp_port_pair()
    link = str(tmp_path / 'dac')
    natnet = NatNetEmulator(
        command_port=port, data_port=port + 1, multicast=True, rate_hz=120.0, bodies=BODIES
    )
    rig = EmulatedRig(link, natnet)
    board = rig.board
    c45 = ValveCalibration().kpa_to_code(45.0)
    specs = describe_graph(
        'hardware',
        {
            'fused_loop': 'true',
            'auto_arm': 'true',
            'serial_port': link,
            'calibration': 'none',  # the emulated board's DAC chain is the nominal one
            'natnet_command_port': str(port),
            'natnet_data_port': str(port + 1),
        },
    )
    assert 'control_loop' in [s.name for s in specs]
    sup = Supervisor(specs, echo=False)
    intruder = Intruder()
    loop = None
    try:
        with rig:
            sup.start()
            _wait(sup, lambda: any(board.codes), 90.0, 'the loop to pressurise the valves')
            trips = board.watchdog_trips
            loop = sup.procs['control_loop'].pid
            os.kill(loop, signal.SIGSTOP)  # controller, driver and bridge: one process
            t_stop = time.monotonic()
            intruder.start()
            # The board's own watchdog (200 ms) vents; nothing reaches it while stopped.
            _wait(sup, lambda: not any(board.codes), 5.0, "the board's watchdog vent")
            assert board.watchdog_trips > trips
            time.sleep(STALL_S)
            assert not any(board.codes)
            assert not board.frames_since(t_stop + 0.1), board.frames_since(t_stop + 0.1)[:3]
            os.kill(loop, signal.SIGCONT)
            loop = None
            _wait(
                sup,
                lambda: (
                    'not obeyed: 1 publisher(s) of /valve/command outside this process '
                    '(/intruder)' in _output(sup, 'control_loop')
                ),
                30.0,
                'the driver to name the intruder',
            )
            t_cont = time.monotonic()
            _wait(
                sup,
                lambda: any(any(f.codes) for f in board.frames_since(t_cont)),
                30.0,
                'control to resume',
            )
            time.sleep(1.0)
            intruder.stop()
            _ok_stop(sup)
    finally:
        if loop is not None:
            os.kill(loop, signal.SIGCONT)
        intruder.stop()
        sup.stop()
        intruder.close()
    assert intruder.sent > 50 * STALL_S * 0.5, intruder.sent
    assert not any(f.codes == (c45, c45) for f in board.frames)
