"""Client <-> emulator in one process over real UDP sockets on loopback."""

import itertools
import socket
import time

import pytest
from natnet_util import random_group

from equimus_hw.natnet import protocol as P
from equimus_hw.natnet.client import ECHO_WINDOW, NatNetClient, NatNetConnectError
from equimus_hw.natnet.emulator import (
    CATCH_UP_S,
    Faults,
    NatNetEmulator,
    SwingingLeg,
    TrajectoryFile,
)


def pump(client, seconds, until=None):
    """Poll for `seconds`, or until `until()` holds, at most `seconds` (a machine whose cores
    are busy may run the emulator's thread seldom: 15 frames in 1 s were seen in CI)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (until is not None and until()):
        client.poll(0.02)


def request(ports, msg, version=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(('127.0.0.1', 0))
    s.settimeout(2)
    s.sendto(P.encode_message(msg, version), ('127.0.0.1', ports[0]))
    data, addr = s.recvfrom(65536)
    s.close()
    return data, addr


@pytest.mark.parametrize('version', ['3.0', '3.1', '4.0', '4.1', '4.2', '4.3'])
def test_command_channel(ports, version):
    with NatNetEmulator(
        version=version, command_port=ports[0], data_port=ports[1], multicast=False
    ) as emu:
        v = P.parse_version(version)
        info = P.decode_message(request(ports, P.ConnectRequest())[0])
        assert info.natnet_version[:2] == v and info.clock_hz == 10_000_000
        assert info.data_port == ports[1] and not info.multicast
        md = P.decode_message(request(ports, P.Empty(P.MessageId.REQUEST_MODELDEF))[0], v)
        assert [d.name for d in md.rigid_bodies()] == ['base', 'thigh', 'calf']
        assert any(isinstance(d, P.CameraDescription) for d in md.descriptions) == (v >= (4, 0))
        fr = P.decode_message(request(ports, P.Request('FrameRate'))[0])
        assert fr.as_float() == 120.0
        bs = P.decode_message(request(ports, P.Request('Bitstream'))[0])
        assert bs.text == f'Bitstream,{version}'
        unk = P.decode_message(request(ports, P.Request('NoSuchCommand'))[0])
        assert unk == P.Empty(P.MessageId.UNRECOGNIZED_REQUEST)
        t0 = time.perf_counter_ns() // 100
        echo = P.decode_message(request(ports, P.EchoRequest(12345))[0])
        assert echo.client_time == 12345 and echo.server_ticks >= t0
        frame = P.decode_message(request(ports, P.Empty(P.MessageId.REQUEST_FRAMEOFDATA))[0], v)
        assert [b.id for b in frame.rigid_bodies] == [1, 2, 3]
        assert (frame.precision_timestamp is not None) == (v >= (4, 1))
        assert emu.clients  # the CONNECT above registered a unicast client


def test_the_official_sdks_request_form(ports):
    """The NatNet SDK's clients send a request as its header, its string and a NUL: with no
    string, a 0-byte header and one NUL. The emulator answers it as Motive does."""
    with NatNetEmulator(version='4.1', command_port=ports[0], data_port=ports[1], multicast=False):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(('127.0.0.1', 0))
        s.settimeout(2)
        try:
            s.sendto(
                P.HEADER.pack(P.MessageId.REQUEST_MODELDEF, 0) + b'\0', ('127.0.0.1', ports[0])
            )
            reply = P.decode_message(s.recvfrom(65536)[0], (4, 1))
        finally:
            s.close()
    assert isinstance(reply, P.ModelDefinitions), reply
    assert [d.name for d in reply.rigid_bodies()] == ['base', 'thigh', 'calf']
    with pytest.raises(P.NatNetDecodeError):  # one NUL more, or another byte, is still refused
        P.split_packet(P.HEADER.pack(P.MessageId.REQUEST_MODELDEF, 0) + b'\0\0')
    with pytest.raises(P.NatNetDecodeError):
        P.split_packet(P.HEADER.pack(P.MessageId.REQUEST_MODELDEF, 0) + b'x')


def test_bad_command_does_not_kill_emulator(ports):
    with NatNetEmulator(command_port=ports[0], data_port=ports[1], multicast=False):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b'\xff\xff\x10', ('127.0.0.1', ports[0]))
        s.close()
        assert isinstance(P.decode_message(request(ports, P.ConnectRequest())[0]), P.ServerInfo)


@pytest.mark.parametrize('multicast', [True, False])
def test_stream_counts_drops_and_reconstructs_time(ports, multicast):
    group = random_group()
    emu = NatNetEmulator(
        version='4.1',
        command_port=ports[0],
        data_port=ports[1],
        multicast=multicast,
        multicast_group=group,
        faults=Faults(drop_every=10),
        exposure_latency_s=0.006,
    ).start()
    events = []
    c = NatNetClient(
        command_port=ports[0],
        data_port=ports[1],
        multicast=multicast,
        multicast_group=group,
        on_frame=events.append,
    )
    try:
        c.connect()
        pump(c, 20.0, until=lambda: len(events) > 100)
    finally:
        c.close()
        emu.stop()
    assert len(events) > 100
    # Every 10th frame dropped by the emulator -> counted as gaps.
    assert c.stats.dropped_frames >= len(events) // 9 - 2
    assert all(e.frame.frame_number % 10 for e in events)
    # Same host, same clock: the echo offset is ~0 ticks (< 1 ms).
    assert abs(c.clock_offset_ticks) < 10_000
    ages = sorted(e.exposure_age_s for e in events[10:])
    assert all(e.stamp_source == 'mid_exposure' for e in events[10:])
    # Never younger than the 6 ms exposure latency (the frame cannot arrive before it is sent);
    # the upper bound allows for this thread's reads being scheduled late on a loaded machine.
    assert 0.006 <= ages[len(ages) // 2] < 0.05
    assert [b.name for b in events[-1].bodies] == ['base', 'thigh', 'calf']


def test_fallback_without_mid_exposure(ports):
    emu = NatNetEmulator(
        version='3.0',
        command_port=ports[0],
        data_port=ports[1],
        multicast=False,
        mid_exposure=False,
        software_latency_s=0.002,
    ).start()
    events = []
    c = NatNetClient(
        command_port=ports[0], data_port=ports[1], multicast=False, on_frame=events.append
    )
    try:
        c.connect()
        pump(c, 10.0, until=lambda: len(events) > 12)
        # Without echo answers: software latency only.
        c._echo.clear()
        ev = c.handle_datagram(P.encode_message(events[-1].frame, (3, 0)), time.perf_counter_ns())
    finally:
        c.close()
        emu.stop()
    assert events[-1].stamp_source == 'received+echo'
    assert 0.002 <= events[-1].exposure_age_s < 0.1  # one sample: at least the 2 ms, same rule
    assert ev is None or ev.stamp_source == 'received'  # a re-sent frame is a duplicate...
    assert c.stats.out_of_order >= 1  # ...and is discarded as such
    f = events[-1].frame
    f.frame_number += 1000
    ev = c._on_frame(f, time.perf_counter_ns())
    assert ev.stamp_source == 'received' and ev.exposure_age_s == pytest.approx(0.002, abs=2e-7)


def test_bitstream_switch_unicast(ports):
    emu = NatNetEmulator(
        version='4.1', command_port=ports[0], data_port=ports[1], multicast=False
    ).start()
    try:
        resp = P.decode_message(request(ports, P.Request('Bitstream,3.1'))[0])
        assert resp.as_int() == 0 and emu.version == (3, 1)
        # Frames now decode as 3.1 and the first carries flag bit 3.
        c = NatNetClient(command_port=ports[0], data_port=ports[1], multicast=False)
        events = []
        c.on_frame = events.append
        c.connect()
        pump(c, 10.0, until=lambda: len(events) > 0)
        c.close()
        assert c.version == (3, 1) and events and c.stats.rejected_packets == 0
    finally:
        emu.stop()


def test_connect_timeout_message(ports):
    c = NatNetClient(command_port=ports[0], data_port=ports[1], multicast=False)
    with pytest.raises(NatNetConnectError, match='natnet_emulator'):
        c.connect(timeout=0.3)
    c.close()


def test_pose_sources(tmp_path):
    leg = SwingingLeg()
    p = leg(0.5)
    assert set(p) == {'base', 'thigh', 'calf'}
    for _, q in p.values():
        assert sum(x * x for x in q) == pytest.approx(1.0)
    csv = tmp_path / 't.csv'
    csv.write_text('time,body,x,y,z,qx,qy,qz,qw\n0,a,0,0,0,0,0,0,1\n1,a,1,2,3,0,0,1,0\n')
    tr = TrajectoryFile(str(csv))
    pos, q = tr(0.5)['a']
    assert pos == pytest.approx((0.5, 1.0, 1.5))
    assert q == pytest.approx((0, 0, 2**-0.5, 2**-0.5))
    bad = tmp_path / 'bad.csv'
    bad.write_text('time,body,x\n0,a,1\n')
    with pytest.raises(ValueError, match='header must contain'):
        TrajectoryFile(str(bad))


def test_echoes_go_out_fast_until_one_comes_back_quickly(ports):
    """A mapping from slow echoes (50 ms round trip: a busy machine) asks again after 0.1 s; with
    a fast echo in the window, after a second. Real emulator, real UDP."""
    emu = NatNetEmulator(
        version='4.1', command_port=ports[0], data_port=ports[1], multicast=False
    ).start()
    c = NatNetClient(command_port=ports[0], data_port=ports[1], multicast=False)
    sent = []
    send_echo = c.send_echo
    c.send_echo = lambda: (sent.append(time.monotonic()), send_echo())[1]
    try:
        c.connect()
        pump(c, 0.2)
        for rtt_ns, fast in ((50_000_000, True), (100_000, False)):
            offset = c.clock_offset_ticks or 0.0
            with c._lock:
                c._echo.clear()
                c._echo.extend([(rtt_ns, offset)] * ECHO_WINDOW)
            assert c.clock_uncertainty_s == pytest.approx(rtt_ns / 2e9)
            c._last_echo = c.clock_ns()  # as if one had just gone out
            t0 = time.monotonic()
            pump(c, 0.5, until=lambda t0=t0: any(t >= t0 for t in sent))
            n = sum(t >= t0 for t in sent)
            assert (n == 1) if fast else (n == 0), (rtt_ns, n)
    finally:
        c.close()
        emu.stop()


def test_a_late_frame_keeps_its_exposure_time(ports):
    """The emulator's stream held up for 40 ms every 20 frames (as a starved process): those
    frames go out late, but their mid-exposure stamps keep the 120 Hz camera clock, as a real
    camera system's hardware-timed exposures do; only the transmit stamps show the hold-up. Held
    up once past the stream's catch-up window (a suspended emulator): the exposures missed are
    skipped, and the clock still runs on."""
    held = []

    def hold():
        if len(held) == 50:
            time.sleep(CATCH_UP_S + 0.1)
        elif len(held) % 20 == 10:
            time.sleep(0.04)
        held.append(1)

    emu = NatNetEmulator(version='4.1', command_port=ports[0], data_port=ports[1], multicast=False)
    emu.before_frame = hold
    emu.start()
    events = []
    c = NatNetClient(
        command_port=ports[0], data_port=ports[1], multicast=False, on_frame=events.append
    )
    try:
        c.connect()
        pump(c, 20.0, until=lambda: len(events) > 90)
    finally:
        c.close()
        emu.stop()
    frames = [e.frame for e in events[5:]]
    pairs = [(a, b) for a, b in itertools.pairwise(frames) if b.frame_number == a.frame_number + 1]
    exposure = [(b.stamp_mid_exposure - a.stamp_mid_exposure) / 1e7 for a, b in pairs]
    transmit = [(b.stamp_transmit - a.stamp_transmit) / 1e7 for a, b in pairs]
    assert max(transmit) > 0.035, transmit  # the hold-ups happened
    skipped = [b.frame_number - a.frame_number for a, b in itertools.pairwise(frames)]
    assert max(skipped) > 5, skipped  # the long one skipped exposures
    # Each frame's exposure one period after the last (a late wake-up of the loop itself, a
    # millisecond or two when both cores are busy, aside).
    assert all(abs(d - 1 / 120) < 0.003 for d in exposure), exposure
