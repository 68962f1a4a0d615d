"""The receive thread's rehearsal before each expected frame (NatNetClient.rehearse), over real
UDP from the emulator: once a frame, with the last frame's datagram, before the next frame has
come, in the sleeping and the busy-polling receive alike; one that raises stops the rehearsals,
never the frames; the socketless spare it decodes on touches nothing of the client."""

import time

import pytest
from natnet_util import streaming_client


def _stream(ports, rehearse, lead_s, window=0.0, frames=120, seconds=15.0):
    with streaming_client(ports, busy_poll_window=window) as (emu, c, events, logs):
        c.rehearse = rehearse(c, events)
        c.rehearse_lead_s = lead_s
        end = time.monotonic() + seconds
        while time.monotonic() < end and len(events) < frames:
            (c.busy_poll if window > 0 else c.poll)(0.05)
    return events, c, logs, emu


def _recorder(calls):
    def rehearse(client, events):
        def call(datagram):
            calls.append((client.clock_ns(), datagram, len(events)))

        return call

    return rehearse


@pytest.mark.parametrize(('window', 'lead'), [(0.0, 0.001), (0.002, 0.001), (0.002, 0.003)])
def test_a_rehearsal_before_each_frame_with_the_last_one(ports, window, lead):
    calls = []
    events, c, logs, emu = _stream(ports, _recorder(calls), lead, window)
    n = len(events)
    assert n >= 120, n
    assert c.stats.dropped_frames == emu.frames_skipped and c.stats.rejected_packets == 0
    assert c.rehearsals == len(calls) and not c.rehearse_error and not logs
    # At most one rehearsal between two frames, and one before most of them (a frame that
    # comes early, or while the thread was busy, finds none due).
    seen = [k for _, _, k in calls]
    assert len(set(seen)) == len(seen), 'two rehearsals between the same two frames'
    assert len(calls) > 0.5 * n, (len(calls), n)
    for at, datagram, k in calls:
        assert k >= 1
        # the datagram of the frame before: the last one the client had taken
        assert _frame_number(datagram) == events[k - 1].frame.frame_number
        # and before the next frame was read
        if k < n:
            assert at < events[k].arrival_ns


def _frame_number(datagram: bytes) -> int:
    """The frame number of a FRAMEOFDATA datagram (after the 4-byte header)."""
    return int.from_bytes(datagram[4:8], 'little', signed=True)


def test_a_rehearsal_that_raises_stops_the_rehearsals_not_the_frames(ports):
    def rehearse(client, events):
        def call(datagram):
            raise RuntimeError('spare copy broken')

        return call

    events, c, logs, _ = _stream(ports, rehearse, 0.001, frames=60)
    assert len(events) >= 60
    assert c.rehearse is None and c.rehearsals == 0
    assert c.rehearse_error == 'RuntimeError: spare copy broken'
    errors = [m for level, m in logs if level == 'error']
    assert errors == ['rehearsals stopped (frames go on): RuntimeError: spare copy broken'], logs


def test_the_spare_decodes_like_the_client_and_changes_nothing_of_it(ports):
    calls = []
    events, c, _, _ = _stream(ports, _recorder(calls), 0.001, frames=30)
    stats = (c.stats.frames, c.stats.last_frame_number, c.stats.dropped_frames)
    spare = c.spare()
    assert spare.cmd_sock is None and spare.data_sock is None
    datagram = c.last_frame_datagram
    ev = spare.handle_datagram(datagram, c.clock_ns())
    assert ev is not None and ev.frame.frame_number == events[-1].frame.frame_number
    assert [(b.name, b.position, b.orientation) for b in ev.bodies] == [
        (b.name, b.position, b.orientation) for b in events[-1].bodies
    ]
    assert (c.stats.frames, c.stats.last_frame_number, c.stats.dropped_frames) == stats
    # the same datagram again is a repeat to the spare, not to the client
    assert spare.handle_datagram(datagram, c.clock_ns()) is None
    assert c.stats.frames == stats[0]
