"""The fused control loop's executor thread and the frames' quiet windows
(control_loop.LoopLatency.executor_turn), turn by turn: a callback may start only before a
window; in one it holds until the frame is written, or a few ms past the frame's time."""

import threading
import time

import pytest

from equimus_bringup import control_loop
from equimus_bringup.control_loop import QUIET_AFTER_S, LoopLatency
from equimus_ros.executors import SPIN_ONCE_TIMEOUT_S

MS = 1_000_000


class Client:
    """The NatNet client as the loop's executor thread reads it: its clock and the next frame."""

    def __init__(self) -> None:
        self.now = 0
        self.expected: int | None = None

    def clock_ns(self) -> int:
        return self.now

    def next_frame_ns(self) -> int | None:
        return self.expected


class Bridge:
    def __init__(self) -> None:
        self.client = Client()
        self.frame_arrival_ns = 0


class Executor:
    def __init__(self) -> None:
        self.turns: list[float] = []

    def spin_once(self, timeout_sec: float) -> None:
        self.turns.append(timeout_sec)


@pytest.fixture
def loop(ros_node):
    node = LoopLatency()
    node.bridge = Bridge()
    yield node
    node.destroy_node()


def test_callbacks_start_only_before_the_window(loop):
    ex, client = Executor(), loop.bridge.client
    client.expected, client.now = 100 * MS, 90 * MS
    loop.executor_turn(ex)  # 9 ms to the window's start (1 ms before the frame)
    assert ex.turns == [pytest.approx(0.009)]
    client.now = 99 * MS + 1  # inside: no callback; it holds, 3 ms at most (2 ms past the frame)
    t0 = time.monotonic()
    loop.executor_turn(ex)
    held = time.monotonic() - t0
    assert ex.turns == [pytest.approx(0.009)]
    assert 0.0025 < held < 0.0025 + 0.5 and loop.held_s == pytest.approx(held, abs=0.002)


def test_the_frame_s_write_ends_the_hold(loop, monkeypatch):
    """Held with a window that would last 10 s: the write (from another thread, as the receive
    thread's) lets the executor go at once."""
    monkeypatch.setattr(control_loop, 'QUIET_AFTER_S', 10.0)
    ex, client = Executor(), loop.bridge.client
    client.expected, client.now = 100 * MS, 100 * MS

    def write():
        loop.written += 1
        loop.frame_written.set()

    threading.Timer(0.05, write).start()
    t0 = time.monotonic()
    loop.executor_turn(ex)
    assert ex.turns == [] and 0.04 < time.monotonic() - t0 < 5.0


def test_a_frame_in_the_chain_holds_and_a_late_frame_does_not(loop):
    ex, bridge = Executor(), loop.bridge
    client = bridge.client
    client.expected, client.now = 108 * MS, 101 * MS
    bridge.frame_arrival_ns = 100 * MS  # handed to the chain 1 ms ago, not written yet
    t0 = time.monotonic()
    loop.executor_turn(ex)  # holds (the write never comes here): until 2 ms past the arrival
    assert ex.turns == [] and time.monotonic() - t0 >= 0.0009
    bridge.frame_arrival_ns = 0
    client.expected, client.now = 100 * MS, 100 * MS + int(QUIET_AFTER_S * 1e9) + 1
    loop.executor_turn(ex)  # the expected frame is late or lost: no window
    assert ex.turns == [SPIN_ONCE_TIMEOUT_S]
    client.expected = None  # no stream
    loop.executor_turn(ex)
    assert ex.turns == [SPIN_ONCE_TIMEOUT_S] * 2


def test_at_a_high_frame_rate_every_hold_is_followed_by_a_turn(loop):
    """Frames at 1 kHz with a 1 ms window: each window opens as the last closes. The executor
    still runs a ready callback (spin_once without waiting) after every hold, so a disarm or an
    e-stop service is never starved."""
    ex, client = Executor(), loop.bridge.client
    client.now = 100 * MS
    for _ in range(4):
        client.expected = client.now + MS // 2  # always inside the next window
        loop.executor_turn(ex)
    assert ex.turns == [0.0, 0.0]  # hold, turn, hold, turn


def test_quiet_windows_off(loop):
    loop.quiet_ns = 0
    ex, client = Executor(), loop.bridge.client
    client.expected, client.now = 100 * MS, 99 * MS + MS // 2
    loop.executor_turn(ex)
    assert ex.turns == [SPIN_ONCE_TIMEOUT_S]
