"""Fixtures for the valve tests: the DAC board on a real pty, either the Python emulator (a thread
of the test process) or the firmware itself built for this computer (its own process, behind
FirmwareBoard), the valve_driver node in a separate process, and an rclpy harness node."""

import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest
from rosspin import BackgroundSpin

from equimus_hw.valve.board_emulator import BoardEmulator
from equimus_hw.valve.host_firmware import FirmwareBoard

BOARD_KINDS = ('emulator', 'firmware')


def wait_for(predicate, timeout, period=0.01):
    """Poll predicate until it is truthy or timeout s pass; returns its last value."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(period)
        value = predicate()
    return value


def from_frame(board, first):
    """`first` and the frames after it, by position: frames the board read in one chunk share
    a time, so "at or after its time" can also hold frames sent before it (seen under load)."""
    since = board.frames_since(first.t)
    return since[next(i for i, f in enumerate(since) if f is first) :]


def vent_written_before(board, since, timeout=2.0):
    """The vent a driver service wrote before replying at `since`: the first all-zero frame
    read from then on. Frames before it may only be the rest of the chunk the board read first
    (written before the reply too): a non-zero frame read later came after the reply."""
    zero = lambda f: not any(f.codes)  # noqa: E731
    vent = wait_for(lambda: next((f for f in board.frames_since(since) if zero(f)), None), timeout)
    assert vent is not None, board.frames_since(since)[-5:]
    frames = board.frames_since(since)
    earlier = frames[: next(i for i, f in enumerate(frames) if f is vent)]
    assert all(f.t == frames[0].t for f in earlier), f'non-zero after the reply: {earlier}'
    return vent


class RunQueueWait:
    """From creation to `seconds()`: how long the processes a timed event passes through in
    turn (the driver, then the board) waited for a CPU, from the kernel's schedstat: per process
    the most any of its threads waited on a run queue, summed. On an idle machine it is a few
    ms; with both cores busy it explains an event that came late because nothing could run."""

    def __init__(self, *pids: int | None) -> None:
        # Here, not at the top: the lower-bounds check runs test_emulator.py without the soak.
        from equimus_soak.analysis import read_run_delay

        self.read = read_run_delay
        self.start = {p: read_run_delay(p) for p in pids if p is not None}

    def seconds(self) -> float:
        read_run_delay = self.read
        total = 0.0
        for pid, a in self.start.items():
            b = read_run_delay(pid)
            if a is None or b is None:
                continue
            total += max(
                ((w - a.get(tid, (0, 0))[0]) * 1e-9 for tid, (w, _) in b.items()), default=0.0
            )
        return total


def board_pid(board) -> int:
    """The process the board's loop runs in: the firmware's own, or this one (the emulator)."""
    pid = getattr(board, 'pid', None)
    return os.getpid() if pid is None else pid


class Driver:
    """valve_driver in its own process (python -m, the same module as the console script)."""

    def __init__(self, port, log_dir: pathlib.Path, **params):
        args = [
            sys.executable,
            '-m',
            'equimus_hw.valve.driver_node',
            '--ros-args',
            '-p',
            f'port:={port}',
        ]
        params.setdefault('autostart', True)  # no launch here: the node brings itself up
        params.setdefault('require_calibration', False)  # the emulated boards are nominal
        for k, v in params.items():
            args += ['-p', f'{k}:={str(v).lower() if isinstance(v, bool) else v}']
        self.out_path = log_dir / f'valve_driver_{time.monotonic_ns()}.log'
        # The driver's output file lives until stop() closes it, so no with-block.
        self._out = open(self.out_path, 'w')  # noqa: SIM115
        self.proc = subprocess.Popen(args, stdout=self._out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        if not self._out.closed:
            self._out.flush()
        return self.out_path.read_text()

    def stop(self, sig=signal.SIGINT, timeout=10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()
        return self.proc.returncode


class Harness:
    """Publishes /valve/command, records /valve/applied, /valve/pressure, /diagnostics, and
    calls the driver's Trigger services. Spins in a background thread."""

    def __init__(self):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import (
            QoSHistoryPolicy,
            QoSProfile,
            QoSReliabilityPolicy,
            qos_profile_sensor_data,
        )
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray
        from std_srvs.srv import Trigger

        self.rclpy = rclpy
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node('valve_test_harness', context=self.ctx)
        command_qos = QoSProfile(
            reliability=QoSReliabilityPolicy.RELIABLE, history=QoSHistoryPolicy.KEEP_LAST, depth=10
        )
        self.Float64MultiArray = Float64MultiArray
        self.command_qos = command_qos
        self.pub = self.node.create_publisher(Float64MultiArray, '/valve/command', command_qos)
        self.applied, self.pressure, self.diag = [], [], []
        self.node.create_subscription(
            JointState,
            '/valve/applied',
            lambda m: self.applied.append((time.monotonic(), list(m.effort))),
            qos_profile_sensor_data,
        )
        self.node.create_subscription(
            JointState,
            '/valve/pressure',
            lambda m: self.pressure.append((time.monotonic(), list(m.effort))),
            qos_profile_sensor_data,
        )
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diag, 50)
        self.clients = {
            name: self.node.create_client(Trigger, f'/valve_driver/{name}')
            for name in ('arm', 'disarm', 'estop', 'hand_over')
        }
        self.Trigger = Trigger
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.spin = BackgroundSpin(self.executor, self.ctx)
        self._stream = None
        self._stream_stop = threading.Event()

    def _on_diag(self, msg):
        for st in msg.status:
            if st.name.startswith('valve_driver'):
                level = st.level[0] if isinstance(st.level, bytes) else int(st.level)
                self.diag.append(
                    (time.monotonic(), level, st.message, {kv.key: kv.value for kv in st.values})
                )

    def new_publisher(self):
        """Publish from a new publisher (a new GID: to the driver, another controller) from now
        on; returns the old one, still on the graph until destroyed."""
        old = self.pub
        self.pub = self.node.create_publisher(
            self.Float64MultiArray, '/valve/command', self.command_qos
        )
        return old

    def publish(self, values):
        self.pub.publish(self.Float64MultiArray(data=[float(v) for v in values]))

    def stream(self, values, rate_hz=100.0):
        """Publish `values` (a list, or a callable returning one) continuously until stop."""
        self.stop_stream()
        self._stream_stop = threading.Event()
        stop = self._stream_stop

        def run():
            while not stop.wait(1.0 / rate_hz):
                self.publish(values() if callable(values) else values)

        self._stream = threading.Thread(target=run, daemon=True)
        self._stream.start()

    def stop_stream(self):
        if self._stream is not None:
            self._stream_stop.set()
            self._stream.join()
            self._stream = None

    def call(self, name, timeout=5.0, tries=3):
        """Call a Trigger service; asked again when no answer came within `timeout`: a reply
        sent before the server had discovered this client's reply reader is lost (DDS), which
        a loaded machine's slow discovery made happen (arm, disarm, estop and hand_over leave
        the same state when asked twice)."""
        client = self.clients[name]
        assert client.wait_for_service(timeout_sec=timeout), f'/valve_driver/{name} not found'
        for _ in range(tries):
            future = client.call_async(self.Trigger.Request())
            if wait_for(future.done, timeout):
                return future.result()
            client.remove_pending_request(future)
        raise AssertionError(
            f'/valve_driver/{name} did not answer in {tries} tries ({self.spin.report()})'
        )

    def set_param(self, name, value, timeout=5.0):
        """Set one driver parameter over its SetParameters service (spun by this harness)."""
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        client = self.node.create_client(SetParameters, '/valve_driver/set_parameters')
        try:
            assert client.wait_for_service(timeout_sec=timeout), 'no /valve_driver/set_parameters'
            req = SetParameters.Request(
                parameters=[Parameter(name, value=value).to_parameter_msg()]
            )
            future = client.call_async(req)
            assert wait_for(future.done, timeout), '/valve_driver/set_parameters did not answer'
            (result,) = future.result().results
            assert result.successful, result.reason
        finally:
            self.node.destroy_client(client)

    def latest_diag(self):
        return self.diag[-1] if self.diag else None

    def wait_connected(self, since, timeout=20.0):
        """True once a driver started at `since` reports a connected link (an earlier driver's
        diagnostics, from a previous board of a parametrised fixture, do not count)."""
        return wait_for(
            lambda: any(t >= since and d.get('link') == 'connected' for t, _, _, d in self.diag),
            timeout,
        )

    def close(self):
        self.stop_stream()
        self.spin.stop()
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        self.rclpy.try_shutdown(context=self.ctx)


@pytest.fixture(scope='module')
def harness():
    h = Harness()
    yield h
    h.close()


@pytest.fixture(scope='module')
def tmp_module(tmp_path_factory):
    return tmp_path_factory.mktemp('valve')


def make_emulator(tmp: pathlib.Path, **kwargs) -> BoardEmulator:
    link = tmp / f'dac_{time.monotonic_ns()}'
    return BoardEmulator(link=str(link), **kwargs).start()


#: ms: the board watchdog of `make_board(long_watchdog=True)`, for checks whose subject is not
#: this machine's scheduling: with both cores busy a test process went 283 ms without a SET in
#: each of nine tries of a valve's commissioning test, and the rig's 200 ms watchdog vented each.
LONG_WATCHDOG_MS = 2000


def make_board(kind: str, request, tmp: pathlib.Path, long_watchdog: bool = False, **kwargs):
    """A started board of the given kind on a fresh link in tmp (same keyword arguments).
    long_watchdog: its watchdog is LONG_WATCHDOG_MS, not the rig's 200 ms."""
    if kind == 'emulator':
        return make_emulator(
            tmp, **({'watchdog_ms': LONG_WATCHDOG_MS} if long_watchdog else {}), **kwargs
        )
    # tests/conftest.py
    binary = request.getfixturevalue('firmware_build')(LONG_WATCHDOG_MS if long_watchdog else None)
    link = tmp / f'dac_{time.monotonic_ns()}'
    return FirmwareBoard(binary, link=str(link), **kwargs).start()


@pytest.fixture(params=BOARD_KINDS)
def new_board(request, tmp_path):
    """make(**kwargs) -> a started board of the parametrised kind; closed after the test."""
    made = []

    def make(tmp=None, **kwargs):
        board = make_board(request.param, request, tmp or tmp_path, **kwargs)
        made.append(board)
        return board

    yield make
    for board in made:
        board.close()


def nonzero(frame):
    return any(frame.codes)
