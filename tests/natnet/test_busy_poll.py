"""Busy-polling receive (issue 18, latency): the client over real UDP from the emulator, with the
socket polled the last ms before each expected frame or all the time, against the sleeping
default; SO_BUSY_POLL set or its refusal reported."""

import time

import pytest
from natnet_util import streaming_client

from equimus_hw.natnet.client import NEXT_FRAME_WINDOW


def _run(ports, window, seconds=1.5, so_busy_poll_us=0, until=None):
    calls = 0
    with streaming_client(ports, busy_poll_window=window, so_busy_poll_us=so_busy_poll_us) as (
        emu,
        c,
        events,
        logs,
    ):
        end = time.monotonic() + seconds
        c0 = time.thread_time()
        while time.monotonic() < end and not (until is not None and until(events)):
            (c.busy_poll if window > 0 else c.poll)(0.05)
            calls += 1
        cpu = time.thread_time() - c0
    return events, cpu, calls, c, logs, emu


@pytest.mark.parametrize('window', [0.002, 1.0])
def test_busy_poll_receives_every_frame(ports, window):
    # Until 150 frames came, at most 15 s: the in-process emulator's thread sends fewer than
    # 120 a second when the cores are busy (137 in 1.5 s once, with none dropped).
    events, _, _, c, _, emu = _run(ports, window, seconds=15.0, until=lambda ev: len(ev) > 150)
    n = len(events)
    assert n > 150, n
    # Every frame sent was received: the only gaps are exposures a starved emulator skipped.
    assert c.stats.dropped_frames == emu.frames_skipped and c.stats.rejected_packets == 0
    numbers = [e.frame.frame_number for e in events]
    assert numbers == sorted(numbers) and len(set(numbers)) == n
    # The next frame is expected at most one period after the last one arrived (less if that
    # one came late), and not before the last one was sent. The period is the stream's own: a
    # busy machine slows the in-process emulator's sends below 120 Hz (13.3 ms ahead once in
    # CI, both cores busy), which the mean arrival interval of the recent frames shows too.
    expected = c.next_frame_ns()
    assert expected is not None
    ahead = (expected - events[-1].arrival_ns) / 1e9
    recent = events[-NEXT_FRAME_WINDOW:]
    period = (recent[-1].arrival_ns - recent[0].arrival_ns) / (len(recent) - 1) / 1e9
    assert -0.05 < ahead <= max(1 / 120, period) + 0.0015, (ahead, period)


def test_cpu_sleeping_below_window_below_polling_all_the_time(ports):
    """The window sleeps until 2 ms before each frame: CPU between the two others."""
    cpu = {w: _run(ports, w, seconds=1.0)[1] for w in (0.0, 0.002, 1.0)}
    assert cpu[0.0] < cpu[0.002] < cpu[1.0], cpu
    assert cpu[1.0] > 2 * cpu[0.0], cpu


def test_so_busy_poll_is_set_or_its_refusal_reported(ports):
    events, _, _, c, logs, _ = _run(ports, 0.0, seconds=0.5, so_busy_poll_us=50)
    assert len(events) > 20
    if c.so_busy_poll_error:
        assert any('so_busy_poll_us=50 refused' in m for _, m in logs), logs
    else:
        assert not any('refused' in m for _, m in logs), logs
