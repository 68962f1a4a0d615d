"""Frame numbers that go back (issue 28): a take looped or scrubbed in Motive, a restarted
server, one corrupted frame number. The stream resynchronises within a few frames and counts
what happened; before, every frame was dropped until the old number was passed (a short looped
take stopped publishing for good after its first pass).

Real Motive 2.1 / NatNet 3.0 datagrams (../shared), renumbered as each case needs, served over
real UDP by the emulator's replay; and the bridge process on the emulator's looped take."""

import struct

import pytest
from natnet_util import random_group, wait_for
from test_bridge_e2e import Listener, bridge_args, vals

from equimus_hw.natnet.capture import CaptureWriter
from equimus_hw.natnet.client import REORDER_WINDOW, NatNetClient
from equimus_hw.natnet.emulator import Faults, NatNetEmulator

HZ = 120.0
CLOCK_HZ = 3_312_787  # the recorded server's tick rate (its SERVERINFO)
FIRST = 162734  # the recorded frame's number


def _renumbered(frame: bytes, number: int, tick: int) -> bytes:
    """The recorded frame with another frame number, Motive's frame clock at that number and
    the server's three stamps moved on by `tick` frame periods (the server's clock runs on)."""
    b = bytearray(frame)
    struct.pack_into('<i', b, 4, number)
    struct.pack_into('<d', b, 4 + 294, number / HZ)
    for off in (302, 310, 318):
        (stamp,) = struct.unpack_from('<Q', b, 4 + off)
        struct.pack_into('<Q', b, 4 + off, stamp + int(tick * CLOCK_HZ / HZ))
    return bytes(b)


def _take(natnet_data, tmp_path, numbers, ticks=None):
    """A capture: the recorded SERVERINFO and model, then one frame per number at 120 Hz."""
    frame = (natnet_data / 'mocapframe_packet_v3.bin').read_bytes()
    path = tmp_path / 'take.natnet'
    w = CaptureWriter(path)
    w.write((natnet_data / 'serverinfo_packet_v3.bin').read_bytes(), 0, 1)
    w.write((natnet_data / 'modeldef_packet_v3.bin').read_bytes(), 1, 1)
    for i, n in enumerate(numbers):
        tick = i if ticks is None else ticks[i]
        w.write(_renumbered(frame, n, tick), 2 + int(i * 1e9 / HZ), 0)
    w.close()
    return path


def _receive(path, ports):
    """Replay the capture over UDP to a client; the frame numbers it published, its stats."""
    emu = NatNetEmulator.from_capture(
        str(path), command_port=ports[0], data_port=ports[1], multicast=False
    )
    got = []
    c = NatNetClient(
        command_port=ports[0],
        data_port=ports[1],
        multicast=False,
        on_frame=lambda ev: got.append(ev.frame.frame_number),
    )
    c.open()
    emu.start()
    try:
        c.connect()
        assert wait_for(lambda: (c.poll(0.02), emu.replay_done.is_set())[1], 30)
        end_at = len(got)
        wait_for(lambda: (c.poll(0.02), len(got))[1] > end_at + 1000, 0.3)  # the last datagrams
    finally:
        c.close()
        emu.stop()
    assert c.stats.rejected_packets == 0 and c.version == (3, 0)
    return got, c.stats


TAKE = list(range(FIRST, FIRST + 60))


def test_a_looped_take_publishes_every_pass(natnet_data, ports, tmp_path):
    got, st = _receive(_take(natnet_data, tmp_path, TAKE * 4), ports)
    assert got == TAKE * 4  # every frame of every pass, none dropped
    assert st.frame_number_resets == 3 and st.out_of_order == 0 and st.dropped_frames == 0


def test_a_take_scrubbed_back_resynchronises(natnet_data, ports, tmp_path):
    far = list(range(FIRST, FIRST + 50)) + list(range(FIRST + 20, FIRST + 80))  # back by 30
    near = list(range(FIRST + 80, FIRST + 77, -1))  # then back by 2 (as late datagrams are)
    numbers = far + near + list(range(FIRST + 80, FIRST + 120))
    got, st = _receive(_take(natnet_data, tmp_path, numbers), ports)
    # Back by 30: resynchronised at once. Back by 2 (within REORDER_WINDOW): those two and the
    # repeat of the last number are discarded as late, then the stream goes on.
    assert got == far + [FIRST + 80] + list(range(FIRST + 81, FIRST + 120)), got
    assert st.frame_number_resets == 1 and st.out_of_order == 3


def test_one_corrupted_frame_number_costs_no_frame(natnet_data, ports, tmp_path):
    numbers = list(range(FIRST, FIRST + 120))
    numbers[50] += 512
    got, st = _receive(_take(natnet_data, tmp_path, numbers), ports)
    assert got == numbers  # the corrupt one too (its poses are fine) and every one after it
    assert st.frame_number_glitches == 1 and st.frame_number_resets == 0
    assert st.dropped_frames == 0 and st.out_of_order == 0


def test_a_restarted_server_with_a_restarted_clock(natnet_data, ports, tmp_path):
    """Numbers and the server's stamps both start again (a rebooted Motive PC): the new frames
    look sent before the last one, so at most REORDER_WINDOW of them are lost."""
    numbers = TAKE + list(range(1, 61))
    ticks = list(range(60)) + [t - 100_000 for t in range(60)]
    got, st = _receive(_take(natnet_data, tmp_path, numbers, ticks), ports)
    assert got == TAKE + list(range(1 + REORDER_WINDOW, 61)), got
    assert st.frame_number_resets == 1 and st.out_of_order == REORDER_WINDOW


@pytest.fixture
def listener():
    lst = Listener()
    yield lst
    lst.close()


def test_the_bridge_keeps_publishing_a_short_looped_take(ports, spawn, listener):
    """A 0.5 s take looped in Motive: the bridge publishes through every pass, says OK on
    /diagnostics and counts the loops (before: nothing after the first pass, 'stream
    stopped')."""
    group = random_group()
    emu = NatNetEmulator(
        command_port=ports[0],
        data_port=ports[1],
        multicast_group=group,
        faults=Faults(loop_every=60),
    ).start()
    try:
        bridge = spawn(bridge_args(ports, True, group), 'bridge')
        assert wait_for(lambda: listener.count('base') >= 10, 30), bridge.stop()[1]
        seen = listener.count('base')
        loops = emu.frames_sent // 60
        # Three more passes of the take, each published.
        assert wait_for(lambda: emu.frames_sent // 60 >= loops + 3, 30)
        assert listener.count('base') >= seen + 120, (seen, listener.count('base'))

        def counted(d):
            return int(vals(d).get('frame_number_resets', 0)) >= 3

        assert wait_for(lambda: any(counted(d) for d in list(listener.diags)), 10)
        d = next(d for d in reversed(list(listener.diags)) if counted(d))
        assert d.level == b'\x00' and 'stopped' not in d.message, d.message
        rc, out = bridge.stop()
        assert rc == 0 and 'Traceback' not in out, out
        warnings = [x for x in out.splitlines() if 'went back' in x]
        assert 1 <= len(warnings) <= 2 + emu.frames_sent // HZ, warnings  # rate-limited
    finally:
        emu.stop()
