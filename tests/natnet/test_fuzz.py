"""Bounded fuzzing: random, truncated and bit-flipped packets only ever raise NatNetDecodeError,
and the client's receive handler counts every rejection instead of raising."""

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_protocol_roundtrip import VERSIONS, full_frame, full_modeldef

from equimus_hw.natnet import protocol as P
from equimus_hw.natnet.client import NatNetClient

SETTINGS = settings(
    max_examples=1500,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow],
)


def seeds(natnet_data):
    out = [p.read_bytes() for p in sorted(natnet_data.glob('*.bin'))]
    for v in VERSIONS:
        out.append(P.encode_message(full_frame(v), v))
        out.append(P.encode_message(full_modeldef(v), v))
    return out


def decode_all_versions(data):
    """Return how many versions accepted it; anything but NatNetDecodeError propagates."""
    ok = 0
    for v in VERSIONS:
        try:
            P.decode_message(data, v)
            ok += 1
        except P.NatNetDecodeError as e:
            assert e.reason
    return ok


@SETTINGS
@given(st.binary(max_size=400))
def test_random_bytes(data):
    decode_all_versions(data)


@SETTINGS
@given(st.binary(max_size=300), st.sampled_from([5, 7, 1, 3, 0, 13]))
def test_random_payload_with_valid_header(payload, mid):
    decode_all_versions(struct.pack('<HH', mid, len(payload)) + payload)


@pytest.fixture(scope='module')
def seed_packets(shared_dir):
    from natnet_util import DATA

    return seeds(shared_dir / DATA)


@settings(max_examples=2500, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_truncations_and_bitflips(seed_packets, data):
    pkt = bytearray(data.draw(st.sampled_from([p for p in seed_packets if len(p) > 8])))
    kind = data.draw(st.sampled_from(['truncate', 'truncate_fix_header', 'flip', 'splice']))
    if kind == 'truncate':
        pkt = pkt[: data.draw(st.integers(0, len(pkt) - 1))]
    elif kind == 'truncate_fix_header':
        n = data.draw(st.integers(4, len(pkt) - 1))
        pkt = pkt[:n]
        struct.pack_into('<H', pkt, 2, n - 4)
    elif kind == 'flip':
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(pkt) - 1))
            pkt[i] ^= 1 << data.draw(st.integers(0, 7))
    else:
        i = data.draw(st.integers(4, len(pkt)))
        pkt = pkt[:i] + data.draw(st.binary(max_size=40)) + pkt[i:]
        struct.pack_into('<H', pkt, 2, (len(pkt) - 4) & 0xFFFF)
    decode_all_versions(bytes(pkt))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.binary(min_size=0, max_size=120), min_size=1, max_size=20))
def test_client_handler_counts_rejections(packets):
    c = NatNetClient()
    c._dispatch(P.ServerInfo(natnet_version=(4, 1, 0, 0)), 0)
    frames_before = 0
    for i, p in enumerate(packets):
        ev = c.handle_datagram(p, i)  # must never raise
        frames_before += ev is not None
    accepted = sum(1 for p in packets if _accepts(p))
    assert c.stats.rejected_packets == len(packets) - accepted
    if c.stats.rejected_packets:
        assert c.stats.last_reject_reason


def _accepts(p):
    try:
        P.decode_message(p, (4, 1))
        return True
    except P.NatNetDecodeError:
        return False


def test_client_survives_mutated_real_frames(seed_packets):
    """Deterministic sweep: every single-byte corruption of a real frame is handled."""
    c = NatNetClient()
    c._dispatch(P.ServerInfo(natnet_version=(3, 0, 0, 0), clock_hz=3_312_787), 0)
    c._dispatch(P.ModelDefinitions([P.RigidBodyDescription('RaceQuad', 2)]), 0)
    real = seed_packets[[i for i, p in enumerate(seed_packets) if p[:2] == b'\x07\x00'][0]]
    n = 0
    for i in range(len(real)):
        b = bytearray(real)
        b[i] ^= 0xFF
        c.handle_datagram(bytes(b), i)
        n += 1
    st = c.stats
    assert st.rejected_packets + st.frames + st.out_of_order + st.implausible_frames >= n - 5
    assert c.stats.rejected_packets > 50
