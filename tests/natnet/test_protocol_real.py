"""Decode the real Motive 2.1 / NatNet 3.0 captures field by field (values from spec section 10,
plus extra fields read directly with struct at the spec's byte offsets)."""

import struct

import pytest

from equimus_hw.natnet import protocol as P


def load(natnet_data, name):
    return (natnet_data / name).read_bytes()


def test_serverinfo(natnet_data):
    d = load(natnet_data, 'serverinfo_packet_v3.bin')
    assert len(d) == 283 and struct.unpack_from('<HH', d) == (1, 279)
    s = P.decode_message(d)
    assert s == P.ServerInfo(
        'Motive', (2, 1, 0, 0), (3, 0, 0, 0), 3_312_787, 1511, True, '239.255.42.99'
    )
    # Pitfall 2: the name field carries junk after the NUL; we cut at the first NUL.
    assert d[4 + 6] == 0 and any(d[4 + 7 : 4 + 256])


def test_frame_fields(natnet_data):
    d = load(natnet_data, 'mocapframe_packet_v3.bin')
    assert len(d) == 336 and struct.unpack_from('<HH', d) == (7, 332)
    f = P.decode_message(d, (3, 0))
    p = d[4:]
    assert f.frame_number == 162734
    assert f.marker_sets == [] and len(f.other_markers) == 5
    assert f.other_markers[0] == struct.unpack_from('<3f', p, 12)
    assert len(f.rigid_bodies) == 1
    rb = f.rigid_bodies[0]
    assert rb.id == 2
    assert rb.position == pytest.approx((0.1744466, 1.4471314, -0.7343040), abs=1e-7)
    assert rb.orientation == pytest.approx((-0.0545942, 0.5099482, 0.0437036, -0.8573577), abs=1e-7)
    assert rb.mean_error == pytest.approx(0.000515, abs=5e-7)
    assert rb.mean_error == struct.unpack_from('<f', p, 108)[0]
    assert rb.params == 1 and rb.tracking_valid
    assert struct.unpack_from('<i', p, 72)[0] == 1 and struct.unpack_from('<h', p, 112)[0] == 1
    assert f.skeletons == [] and struct.unpack_from('<i', p, 114)[0] == 0
    assert len(f.labeled_markers) == 6 and struct.unpack_from('<i', p, 118)[0] == 6
    first, last = f.labeled_markers[0], f.labeled_markers[-1]
    assert (first.model_id, first.marker_id, first.params) == (2, 1, 10)
    assert first.residual == pytest.approx(2.07e-4, abs=5e-7)
    assert first.position == struct.unpack_from('<3f', p, 122 + 4)
    assert first.size == struct.unpack_from('<f', p, 122 + 16)[0]
    assert (last.model_id, last.marker_id, last.params) == (0, 50007, 18) and last.unlabeled
    assert not first.occluded
    assert f.force_plates == [] and f.devices == []
    assert struct.unpack_from('<ii', p, 278) == (0, 0)
    assert (f.timecode, f.timecode_sub) == (0, 0)
    assert f.timestamp == pytest.approx(1356.1166666667, abs=1e-9)
    assert f.timestamp == pytest.approx(162734 / 120, abs=1e-6)
    assert f.stamp_mid_exposure == 1416497730518
    assert f.stamp_data_received == 1416497745808
    assert f.stamp_transmit == 1416497748722
    assert struct.unpack_from('<Q', p, 318)[0] == f.stamp_transmit
    assert f.precision_timestamp is None and f.params == 0
    hz = 3_312_787
    assert (f.stamp_transmit - f.stamp_mid_exposure) / hz * 1e3 == pytest.approx(5.495, abs=1e-3)
    assert (f.stamp_transmit - f.stamp_data_received) / hz * 1e3 == pytest.approx(0.880, abs=1e-3)


def test_occluded_frame(natnet_data):
    f = P.decode_message(load(natnet_data, 'mocapframe_packet_occluded_v3.bin'), (3, 0))
    assert f.frame_number == 269007
    rb = {b.id: b for b in f.rigid_bodies}
    assert rb[7].tracking_valid
    m72 = [m for m in f.labeled_markers if (m.model_id, m.marker_id) == (7, 2)]
    assert len(m72) == 1 and m72[0].occluded
    assert f.timestamp == pytest.approx(269007 / 30, abs=1e-6)


def test_modeldef(natnet_data):
    d = load(natnet_data, 'modeldef_packet_v3.bin')
    m = P.decode_message(d, (3, 0))
    rb, ms1, ms2 = m.descriptions
    assert isinstance(rb, P.RigidBodyDescription)
    assert (rb.name, rb.id, rb.parent_id) == ('RaceQuad', 2, -1)
    assert len(rb.marker_positions) == 5 and rb.marker_names is None
    # First marker offset right after name(9) + id, parent, offset(3f) + count.
    p = d[4:]
    assert struct.unpack_from('<ii', p, 0) == (3, 1)
    assert rb.marker_positions[0] == struct.unpack_from('<3f', p, 8 + 9 + 8 + 12 + 4)
    assert (ms1.name, ms2.name) == ('RaceQuad', 'all')
    assert isinstance(ms1, P.MarkerSetDescription)
    assert m.rigid_bodies() == [rb]


def test_command_packets(natnet_data):
    c = P.decode_message(load(natnet_data, 'connect_packet_v3.bin'))
    assert (c.app_name, c.app_version, c.natnet_version) == (
        'NatNetLib',
        (3, 0, 0, 0),
        (3, 0, 0, 0),
    )
    assert isinstance(
        P.decode_message(load(natnet_data, 'discovery_packet_v3.bin')), P.ConnectRequest
    )
    req = P.decode_message(load(natnet_data, 'echorequest_packet_v3.bin'))
    rsp = P.decode_message(load(natnet_data, 'echoresponse_packet_v3.bin'))
    assert rsp.client_time == req.client_time
    assert rsp.server_ticks > 0
    assert P.decode_message(load(natnet_data, 'requestmodeldef_packet_v3.bin')) == P.Empty(
        P.MessageId.REQUEST_MODELDEF
    )


@pytest.mark.parametrize(
    'name',
    [
        'mocapframe_packet_v3.bin',
        'mocapframe_packet_occluded_v3.bin',
        'modeldef_packet_v3.bin',
        'connect_packet_v3.bin',
        'echorequest_packet_v3.bin',
        'echoresponse_packet_v3.bin',
        'requestmodeldef_packet_v3.bin',
    ],
)
def test_byte_exact_reencode(natnet_data, name):
    d = load(natnet_data, name)
    assert P.encode_message(P.decode_message(d, (3, 0)), (3, 0)) == d


def test_real_frame_rejected_with_wrong_version(natnet_data):
    """Pitfall 1: decoding a 3.0 frame as 4.1 must fail cleanly, not return garbage."""
    d = load(natnet_data, 'mocapframe_packet_v3.bin')
    with pytest.raises(P.NatNetDecodeError):
        P.decode_message(d, (4, 1))


def test_markers_unpacked_on_first_use_and_bounds_checked_at_decode(natnet_data):
    """The frame's marker records are read only when asked for (the control chain never asks),
    give the records the wire holds, and a frame whose marker section runs past the datagram is
    still refused when it is decoded, not when the markers are first read."""
    d = load(natnet_data, 'mocapframe_packet_v3.bin')
    f = P.decode_message(d, (3, 0))
    lazy = f.labeled_markers
    assert isinstance(lazy, P.LazyRecords) and lazy._items is None
    assert len(lazy) == 6 and lazy._items is None  # the count needs no unpacking
    p = d[4:]
    records = [struct.unpack_from('<i4fhf', p, 122 + 26 * i) for i in range(6)]
    eager = [P.Marker(t[0], t[1:4], t[4], t[5], t[6]) for t in records]
    assert lazy == eager and eager == lazy and list(lazy) == eager and lazy[1:3] == eager[1:3]
    assert lazy._items is not None
    assert len(f.other_markers) == 5 and f.other_markers[4] == struct.unpack_from('<3f', p, 12 + 48)
    cut = struct.pack('<HH', 7, 122 + 26 * 3) + p[: 122 + 26 * 3]  # three of the six markers
    with pytest.raises(P.NatNetDecodeError, match='labeled marker'):
        P.decode_message(cut, (3, 0))
