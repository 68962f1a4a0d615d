"""Issue 16/18 client behaviour over real sockets: bitstream negotiation, layout mismatch, foreign
senders, monotonicity, plausibility (mutated frames), body-name matching, capture/replay."""

import math
import random
import socket
import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from natnet_util import random_group, wait_for

from equimus_description.config import ConfigError
from equimus_hw.natnet import protocol as P
from equimus_hw.natnet.capture import CaptureError, read_capture, record, summary
from equimus_hw.natnet.checks import Plausibility, implausible_reason, match_bodies, topic_token
from equimus_hw.natnet.client import NatNetClient, NatNetConfig
from equimus_hw.natnet.emulator import NatNetEmulator


def run_client(client, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        client.poll(0.02)


def run_client_until(client, frames, timeout=20.0):
    """Poll until `frames` frames were taken (at most `timeout` s): that frames flow is what
    counts, not how many a loaded host delivers in a fixed time."""
    end = time.monotonic() + timeout
    while client.stats.frames < frames and time.monotonic() < end:
        client.poll(0.02)


def unicast_client(ports, **kw):
    c = NatNetClient(command_port=ports[0], data_port=ports[1], multicast=False, **kw)
    c.open()
    return c


def test_unicast_client_requests_and_confirms_the_newest_version(ports):
    with NatNetEmulator(
        version='4.1', command_port=ports[0], data_port=ports[1], multicast=False
    ) as emu:
        c = unicast_client(ports, bitstream_version='4.3')
        try:
            info = c.connect()
            assert info.natnet_version[:2] == (4, 1)  # what the server announced
            assert emu.bitstream_requests == ['4.3'] and emu.version == (4, 3)
            assert c.version == (4, 3) and not c.version_error
            assert 'confirmed 4.3' in c.version_note
            run_client_until(c, 31)
            assert c.stats.frames > 30
            # Definitions requested after the switch carry the 4.2+ rotation offset.
            assert all(d.orientation is not None for d in c.model.rigid_bodies())
            assert c.stats.rejected_packets <= 3  # at most the frames in flight at the switch
        finally:
            c.close()


def test_server_refusing_the_switch_keeps_its_supported_version(ports):
    with NatNetEmulator(
        version='4.1',
        command_port=ports[0],
        data_port=ports[1],
        multicast=False,
        bitstream_changeable=False,
    ):
        c = unicast_client(ports, bitstream_version='4.3')
        try:
            c.connect()
            assert c.version == (4, 1) and not c.version_error
            assert 'refused Bitstream,4.3 (answer -1)' in c.version_note
            run_client_until(c, 11)
            assert c.stats.frames > 10 and c.stats.rejected_packets == 0
        finally:
            c.close()


def test_server_insisting_on_an_unsupported_version_gives_one_clear_error(ports):
    logs = []
    with NatNetEmulator(
        version='4.1',
        command_port=ports[0],
        data_port=ports[1],
        multicast=False,
        bitstream_changeable=False,
        announce_version='4.7',
    ):
        c = unicast_client(
            ports, bitstream_version='4.3', on_log=lambda lv, m: logs.append((lv, m))
        )
        try:
            c.connect()
            assert c.version is None
            e = c.version_error
            assert 'NatNet 4.7' in e and 'refused to switch to 4.3' in e
            assert 'In Motive' in e and 'bitstream' in e
            errors = [m for lv, m in logs if lv == 'error']
            assert errors == [e], logs  # one error, not one per packet
        finally:
            c.close()


def test_multicast_layout_mismatch_is_named(ports):
    group = random_group()
    with NatNetEmulator(
        version='4.0',
        announce_version='4.1',
        command_port=ports[0],
        data_port=ports[1],
        multicast_group=group,
    ):
        c = NatNetClient(command_port=ports[0], data_port=ports[1], multicast_group=group)
        c.open()
        try:
            c.connect()
            assert c.version == (4, 1)
            run_client(c, 0.4)
            assert c.stats.frames == 0
            assert 'do not match the NatNet 4.1 layout' in c.layout_error
            assert '4.0' in c.layout_error.split('decode as NatNet')[1]
        finally:
            c.close()


def test_only_the_configured_server_is_heard(ports):
    group = random_group()
    with NatNetEmulator(
        version='4.1', command_port=ports[0], data_port=ports[1], multicast_group=group
    ) as emu:
        c = NatNetClient(command_port=ports[0], data_port=ports[1], multicast_group=group)
        c.open()
        try:
            c.connect()
            run_client_until(c, 6)
            frames = c.stats.frames
            assert frames > 5
            fake = emu.build_frame(0.0)
            fake.frame_number = 10**6
            stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            stranger.bind(('127.0.0.2', 0))
            stranger.setsockopt(
                socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton('127.0.0.1')
            )
            for _ in range(20):
                stranger.sendto(P.encode_message(fake, (4, 1)), (group, ports[1]))
                stranger.sendto(P.encode_message(fake, (4, 1)), c.cmd_sock.getsockname())
            stranger.close()
            run_client(c, 0.2)
            assert c.stats.foreign_packets == 40
            assert c.stats.last_foreign_sender.startswith('127.0.0.2:')
            assert c.stats.last_frame_number < 10**6  # none of the stranger's frames was used
        finally:
            c.close()


def test_allowed_senders_are_heard(ports):
    c = NatNetClient(allowed_senders=('127.0.0.2',))
    c._dispatch(P.ServerInfo(natnet_version=(4, 1, 0, 0)), 0)
    c._dispatch(P.ModelDefinitions([P.RigidBodyDescription('base', 1)]), 0)
    f = P.Frame(1, rigid_bodies=[P.RigidBody(1, (0.0, 1.0, 0.0), (0.0, 0.0, 0.0, 1.0))])
    assert c.handle_datagram(P.encode_message(f, (4, 1)), 0, ('127.0.0.2', 1511)) is not None
    f.frame_number = 2
    assert c.handle_datagram(P.encode_message(f, (4, 1)), 0, ('127.0.0.3', 1511)) is None
    assert c.stats.foreign_packets == 1


def frame(n, ts, pos=(0.0, 1.0, 0.0), q=(0.0, 0.0, 0.0, 1.0), params=1):
    return P.Frame(n, rigid_bodies=[P.RigidBody(1, pos, q, 0.0, params)], timestamp=ts)


def ready_client():
    c = NatNetClient()
    c._dispatch(P.ServerInfo(natnet_version=(4, 1, 0, 0)), 0)
    c._dispatch(P.ModelDefinitions([P.RigidBodyDescription('base', 1)]), 0)
    return c


def test_frame_number_and_timestamp_monotonicity_flagged():
    c = ready_client()
    for n, ts in ((10, 1.0), (11, 1.1), (9, 0.9), (11, 1.1), (12, 0.5), (13, 1.3), (1, 0.0)):
        c.handle_datagram(P.encode_message(frame(n, ts), (4, 1)), 0)
    st = c.stats
    assert st.out_of_order == 2  # 9 (a step back within REORDER_WINDOW), the repeated 11
    assert st.non_monotonic_timestamps == 1  # frame 12 went back in time: flagged, kept
    assert st.frame_number_resets == 1 and st.frames == 5  # 1: 12 back, a new sequence
    for n in (5000, 5001, 2):  # then a restart: far back
        c.handle_datagram(P.encode_message(frame(n, n / 100), (4, 1)), 0)
    assert st.frame_number_resets == 2 and st.last_frame_number == 2
    assert st.frame_number_glitches == 0


def test_frames_before_the_model_are_held_not_lost():
    c = NatNetClient()
    got = []
    c.on_frame = lambda ev: got.append((ev.frame.frame_number, [b.name for b in ev.bodies]))
    c._dispatch(P.ServerInfo(natnet_version=(4, 1, 0, 0)), 0)
    for n in range(1, 6):
        c.handle_datagram(P.encode_message(frame(n, n / 120), (4, 1)), 0)
    assert got == []
    c._dispatch(P.ModelDefinitions([P.RigidBodyDescription('base', 1)]), 0)
    assert got == [(n, ['base']) for n in range(1, 6)]


def test_plausibility_rules():
    lim = Plausibility(1e-3, (-1.0, 0.0, -1.0), (1.0, 2.0, 1.0))
    assert implausible_reason(frame(1, 0), lim) == ''
    assert 'non-finite' in implausible_reason(frame(1, 0, pos=(math.nan, 1.0, 0.0)), lim)
    assert 'norm' in implausible_reason(frame(1, 0, q=(0.0, 0.0, 0.0, 1.002)), lim)
    assert implausible_reason(frame(1, 0, q=(0.0, 0.0, 0.0, 1.0009)), lim) == ''
    assert 'outside the workspace' in implausible_reason(frame(1, 0, pos=(0.0, 2.5, 0.0)), lim)
    # An untracked body is not judged (Motive zeroes it; the bridge publishes NaN).
    assert implausible_reason(frame(1, 0, q=(0.0, 0.0, 0.0, 0.0), params=0), lim) == ''


@st.composite
def _body(draw):
    """A plausible body, then perhaps one of its eight numbers replaced by any float32 (NaN,
    infinities, values just past a limit among them)."""
    f32 = lambda v: struct.unpack('<f', struct.pack('<f', v))[0]  # noqa: E731
    pos = [draw(st.floats(-0.5, 0.5, width=32)) for _ in range(3)]
    q = [draw(st.floats(-1.0, 1.0, width=32)) for _ in range(4)]
    n = math.sqrt(sum(v * v for v in q))
    q = [f32(v / n) for v in q] if n > 0.1 else [0.0, 0.0, 0.0, 1.0]
    values = [*pos, *q, draw(st.floats(0.0, 0.0078125, width=32))]
    if draw(st.booleans()):
        values[draw(st.integers(0, 7))] = draw(
            st.one_of(
                st.floats(allow_nan=True, allow_infinity=True, width=32),
                st.sampled_from([1.0, -1.0, 1.001, -1.001, 0.5, -0.5, 0.5001, 0.0]),
            )
        )
    return tuple(values[:3]), tuple(values[3:7]), values[7], draw(st.integers(0, 3))


@settings(max_examples=2000, deadline=None)
@given(st.lists(_body(), min_size=1, max_size=3), st.sampled_from([1e-3, 0.5]))
def test_a_frame_is_implausible_exactly_when_a_tracked_body_breaks_a_rule(bodies, tol):
    """The rules, from the module's docstring: a tracked body with a non-finite value, a
    quaternion norm off by more than the tolerance, or a position outside the workspace."""
    lim = Plausibility(tol, (-1.0, -0.5, -1.0), (1.0, 0.5, 1.0))
    f = P.Frame(
        1,
        rigid_bodies=[
            P.RigidBody(i, p, q, e, params) for i, (p, q, e, params) in enumerate(bodies)
        ],
    )

    def bad(b):
        values = (*b.position, *b.orientation, b.mean_error)
        if not all(math.isfinite(v) for v in values):
            return True
        if abs(math.sqrt(sum(v * v for v in b.orientation)) - 1.0) > tol:
            return True
        return not all(
            lo <= v <= hi
            for v, lo, hi in zip(b.position, lim.workspace_min, lim.workspace_max, strict=True)
        )

    first_bad = next((b for b in f.rigid_bodies if b.params & 1 and bad(b)), None)
    reason = implausible_reason(f, lim)
    if first_bad is None:
        assert reason == ''
    else:
        assert reason.startswith(f'rigid body {first_bad.id}: '), reason


def body_ok(b, lim):
    n = math.sqrt(sum(q * q for q in b.orientation))
    return (
        all(math.isfinite(v) for v in (*b.position, *b.orientation))
        and abs(n - 1) <= lim.quaternion_norm_tolerance
        and all(
            lo <= v <= hi
            for v, lo, hi in zip(b.position, lim.workspace_min, lim.workspace_max, strict=True)
        )
    )


@pytest.mark.parametrize('version', [(3, 0), (4, 1), (4, 3)])
def test_mutated_frames_never_publish_garbage(version):
    """10,000 frames with random bit flips and float overwrites in the rigid-body records: every
    frame is rejected, dropped as implausible, or carries only plausible tracked poses."""
    rng = random.Random(16)
    emu = NatNetEmulator(version=P.version_text(version))
    c = NatNetClient()
    c._dispatch(P.ServerInfo(natnet_version=(*version, 0, 0)), 0)
    c._dispatch(emu.model_definitions(), 0)
    published = []
    c.on_frame = lambda ev: published.append(ev)
    lim = c.plausibility
    n = 10_000
    for i in range(n):
        f = emu.build_frame(i / 120)
        f.frame_number = i + 1
        pkt = bytearray(P.encode_message(f, version))
        # The rigid-body section: find the first 38-byte record (id 1) after the marker sets.
        b0 = f.rigid_bodies[0]
        start = bytes(pkt).find(
            struct.pack('<i7ffh', 1, *b0.position, *b0.orientation, b0.mean_error, 1)
        )
        assert start > 0
        for _ in range(rng.randint(1, 3)):
            j = rng.randrange(start + 4, start + 3 * 38)
            if rng.random() < 0.5:
                pkt[j] ^= 1 << rng.randrange(8)
            else:
                k = j - (j - start) % 2
                pkt[k : k + 4] = rng.choice(
                    [b'\x00\x00\xc0\x7f', b'\x00\x00\x80\x7f', rng.randbytes(4)]
                )
        c.handle_datagram(bytes(pkt), i)
    st = c.stats
    assert st.frames + st.rejected_packets + st.implausible_frames + st.out_of_order == n
    assert st.implausible_frames > 1000, st
    for ev in published:
        for b in ev.bodies:
            if b.tracking_valid:
                assert body_ok(b, lim), (ev.frame.frame_number, b)


def test_match_bodies_names_ids_duplicates():
    model = P.ModelDefinitions(
        [
            P.RigidBodyDescription('base', 1),
            P.RigidBodyDescription('Rigid Body 2', 2),
            P.RigidBodyDescription('dup', 3),
            P.RigidBodyDescription('dup', 4),
            P.MarkerSetDescription('all'),
        ]
    )
    m = match_bodies(['base', 'thigh', '2', 'dup'], model)
    assert m.ids == {'base': 1, '2': 2} and m.by_id == ['2']
    assert m.missing == ['thigh'] and m.ambiguous == ['dup'] and not m.ok
    err = m.error()
    assert (
        "['thigh'] are not streamed" in err
        and 'base (id 1)' in err
        and 'Rigid Body 2 (id 2)' in err
    )
    assert match_bodies(None, model).ids == {'base': 1, 'Rigid Body 2': 2}
    assert match_bodies(['base'], model).ok and match_bodies(['base'], model).error() == ''
    assert topic_token('Rigid Body 2') == 'Rigid_Body_2'
    assert topic_token('2') == 'body_2' and topic_token('thigh') == 'thigh'


def test_config_refuses_bad_values():
    from equimus_hw.natnet.bridge_node import BridgeConfig

    with pytest.raises(ConfigError, match='more than once'):
        BridgeConfig(rigid_bodies=('base', 'thigh', 'base'))
    with pytest.raises(ConfigError, match='would both publish'):
        BridgeConfig(rigid_bodies=('a b', 'a_b'))
    with pytest.raises(ConfigError, match='bitstream_version'):
        NatNetConfig(bitstream_version='4.9')
    with pytest.raises(ConfigError, match='below workspace_max'):
        NatNetConfig(workspace_min=(0.0, 0.0, 0.0), workspace_max=(1.0, -1.0, 1.0))
    with pytest.raises(ConfigError, match='allowed_senders'):
        NatNetConfig(allowed_senders=('motive.local',))
    assert NatNetConfig().bitstream_version == '4.3'


def test_record_then_replay_byte_for_byte(ports, tmp_path):
    path = tmp_path / 'session.natnet'
    with NatNetEmulator(version='4.2', command_port=ports[0], data_port=ports[1], multicast=False):
        cfg = NatNetConfig(command_port=ports[0], data_port=ports[1], multicast=False)
        w = record(cfg, path, 0.6)
    cap = read_capture(path)
    s = summary(cap)
    assert w.count == len(cap) and s['frames'] > 40 and s['model_definitions']
    assert 'NatNet 4.2' in s['server']
    recorded = [d.data for d in cap if d.message_id == P.MessageId.FRAMEOFDATA]

    emu = NatNetEmulator.from_capture(
        str(path), command_port=ports[0], data_port=ports[1], multicast=False
    )
    got = []
    c = unicast_client(ports, bitstream_version='4.3')
    c.raw_sink = lambda d, t, ch: got.append(d) if d[:2] == b'\x07\x00' else None
    emu.start()
    try:
        c.connect()
        assert c.version == (4, 2)  # the replay refuses to switch: its bytes are 4.2
        assert wait_for(lambda: (c.poll(0.02), emu.replay_done.is_set())[1], 5)
        run_client(c, 0.1)
    finally:
        c.close()
        emu.stop()
    assert got == recorded
    assert c.stats.frames == len(recorded) and c.stats.rejected_packets == 0


def test_capture_errors_are_clear(tmp_path):
    p = tmp_path / 'x.natnet'
    p.write_bytes(b'hello')
    with pytest.raises(CaptureError, match='not a NatNet capture'):
        read_capture(p)
    with pytest.raises(CaptureError, match='cannot read'):
        read_capture(tmp_path / 'missing.natnet')
    p.write_bytes(b'EQNATNT1' + b'\x00' * 5)
    with pytest.raises(CaptureError, match='truncated'):
        read_capture(p)


def test_a_client_from_a_configuration_takes_every_setting_and_the_overrides():
    """The bridge, the rig check, the capture and `equimus natnet list` build their clients
    from one configuration through `from_config`: each setting must arrive."""
    cfg = NatNetConfig(
        server_address='10.0.0.5',
        local_address='10.0.0.9',
        multicast=False,
        command_port=1600,
        data_port=1601,
        multicast_group='239.1.2.3',
        stale_timeout=2.5,
        bitstream_version='3.1',
        allowed_senders=('10.0.0.6',),
        quaternion_norm_tolerance=0.2,
        workspace_min=(-1.0, -2.0, -3.0),
        workspace_max=(1.0, 2.0, 3.0),
        busy_poll_window=0.002,
        so_busy_poll_us=50,
    )
    c = NatNetClient.from_config(cfg)
    assert c.server == ('10.0.0.5', 1600) and c.local_address == '10.0.0.9'
    assert (c.data_port, c.multicast, c.group, c.stale_timeout) == (1601, False, '239.1.2.3', 2.5)
    assert c.allowed_hosts == {'10.0.0.5', '10.0.0.6'}
    assert c.preferred == P.parse_version('3.1')
    assert c.plausibility == cfg.plausibility()
    assert (c.busy_poll_window, c.so_busy_poll_us) == (0.002, 50)
    seen = []
    c = NatNetClient.from_config(cfg, bitstream_version='', on_frame=seen.append)
    assert c.preferred is None and c.on_frame == seen.append
