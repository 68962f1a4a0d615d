"""Encode -> decode round trips for every version and message type, and version gating."""

import struct

import numpy as np
import pytest

from equimus_hw.natnet import protocol as P

VERSIONS = [(3, 0), (3, 1), (4, 0), (4, 1), (4, 2), (4, 3)]


def f32(x):
    return float(np.float32(x))


def rb(i, k=0.0, params=1):
    return P.RigidBody(
        i, (f32(0.1 + k), f32(1.2), f32(-0.3)), (0.0, f32(0.6), 0.0, f32(0.8)), f32(0.0004), params
    )


def full_frame(version):
    f = P.Frame(
        frame_number=4242,
        marker_sets=[
            P.MarkerSetData('thigh', [(f32(0.1), 0.5, f32(0.25)), (1.0, 2.0, 3.0)]),
            P.MarkerSetData('all', []),
        ],
        other_markers=[(0.5, 0.25, 0.125)],
        rigid_bodies=[rb(1), rb(2, 0.5, params=0), rb(3, 1.0)],
        skeletons=[P.SkeletonData(5, [rb((5 << 16) | 1), rb((5 << 16) | 2)])],
        assets=[P.AssetData(9, [rb(90)], [P.Marker((9 << 16) | 1, (1.0, 2.0, 3.0), 0.5, 5, 0.25)])]
        if version >= (4, 1)
        else [],
        labeled_markers=[
            P.Marker((2 << 16) | 1, (0.5, 0.25, 1.0), f32(0.015), 0x0A, f32(2e-4)),
            P.Marker(50007, (1.0, 1.0, 1.0), f32(0.01), 0x12, 0.0),
        ],
        force_plates=[P.AnalogData(1, [[1.0, 2.0], [3.0], []])],
        devices=[P.AnalogData(2, [[0.5]])],
        timecode=(1 << 24) | (2 << 16) | (3 << 8) | 4,
        timecode_sub=7,
        timestamp=12.345678901,
        stamp_mid_exposure=123456789012,
        stamp_data_received=123456789999,
        stamp_transmit=123456790100,
        precision_timestamp=(1700000000, 123456) if version >= (4, 1) else None,
        params=0x0B,
    )
    return f


def full_modeldef(version):
    v4 = version >= (4, 0)
    rbd = P.RigidBodyDescription(
        'thigh',
        2,
        -1,
        (0.0, 0.5, 0.0),
        [(0.5, 0.25, 0.125), (1.0, 0.0, 0.0)],
        [0, 7],
        ['M1', 'M2'] if v4 else None,
        (0.0, f32(0.6), 0.0, f32(0.8)) if version >= (4, 2) else None,
    )
    d = [
        P.MarkerSetDescription('thigh', ['thigh_1', 'thigh_2']),
        rbd,
        P.SkeletonDescription(
            'leg',
            5,
            [
                rbd,
                P.RigidBodyDescription(
                    'shin',
                    (5 << 16) | 2,
                    (5 << 16) | 1,
                    (0.0, -0.25, 0.0),
                    [],
                    [],
                    [] if v4 else None,
                    (0.0, 0.0, 0.0, 1.0) if version >= (4, 2) else None,
                ),
            ],
        ),
        P.ForcePlateDescription(
            1,
            'FP-001',
            0.5,
            0.25,
            (0.0, 0.0, 0.0),
            [float(i) for i in range(144)],
            [float(i) for i in range(12)],
            2,
            1,
            ['Fx', 'Fy', 'Fz'],
        ),
        P.DeviceDescription(3, 'NIDAQ', 'SN9', 1, 1, ['ai0', 'ai1']),
    ]
    if v4:
        d.append(P.CameraDescription('Prime13', (1.0, 2.0, 3.0), (0.0, 0.0, 0.0, 1.0)))
    if version >= (4, 1):
        d.append(
            P.AssetDescription(
                'trained',
                1,
                11,
                [rbd],
                [P.AssetMarkerDescription('A1', 1, (0.5, 0.5, 0.5), 0.25, 1)],
            )
        )
        d.append(P.UnknownDescription(42, b'\x01\x02\x03'))
    return P.ModelDefinitions(d)


@pytest.mark.parametrize('version', VERSIONS)
def test_frame_roundtrip(version):
    f = full_frame(version)
    pkt = P.encode_message(f, version)
    g = P.decode_message(pkt, version)
    assert g == f
    assert P.encode_message(g, version) == pkt
    assert g.rigid_bodies[1].tracking_valid is False
    assert g.models_changed and g.bitstream_changed


@pytest.mark.parametrize('version', VERSIONS)
def test_modeldef_roundtrip(version):
    m = full_modeldef(version)
    pkt = P.encode_message(m, version)
    g = P.decode_message(pkt, version)
    assert g == m
    assert P.encode_message(g, version) == pkt


def test_41_byte_counts_and_precision_timestamp_on_the_wire():
    f = P.Frame(7, rigid_bodies=[rb(1), rb(2)], precision_timestamp=(5, 6))
    p = P.encode_frame(f, (4, 1))
    # frame#, markersets count+bytes, other count+bytes, then RB count 2 with 76 bytes.
    assert struct.unpack_from('<iiiiiii', p, 0) == (7, 0, 0, 0, 0, 2, 76)
    assert len(p) == 4 + 8 + 8 + 8 + 76 + 8 + 8 + 8 + 8 + 8 + 40 + 8 + 6
    assert struct.unpack_from('<II', p, len(p) - 14) == (5, 6)
    p40 = P.encode_frame(P.Frame(7, rigid_bodies=[rb(1), rb(2)]), (4, 0))
    assert len(p40) == 4 + 4 * 2 + 4 + 76 + 4 * 4 + 40 + 6


def test_version_gating_pitfall_1():
    """A 4.1 frame read as 4.0 (or vice versa) is rejected, never silently misread."""
    f = full_frame((4, 1))
    with pytest.raises(P.NatNetDecodeError):
        P.decode_frame(P.encode_frame(f, (4, 1)), (4, 0))
    with pytest.raises(P.NatNetDecodeError):
        P.decode_frame(P.encode_frame(full_frame((4, 0)), (4, 0)), (4, 1))


def test_41_byte_count_mismatch_rejected():
    good = P.encode_frame(P.Frame(1, rigid_bodies=[rb(1)]), (4, 1))
    assert struct.unpack_from('<i', good, 24)[0] == 38
    for wrong, msg in ((37, 'truncated'), (42, 'byte count says 42')):
        p = bytearray(good)
        struct.pack_into('<i', p, 24, wrong)
        with pytest.raises(P.NatNetDecodeError, match=msg):
            P.decode_frame(bytes(p), (4, 1))


def test_unknown_description_before_41_is_an_error():
    p = struct.pack('<ii', 1, 42) + b'xyz'
    with pytest.raises(P.NatNetDecodeError, match='unknown model description type 42'):
        P.decode_modeldef(p, (4, 0))


def test_unsupported_version():
    with pytest.raises(P.NatNetDecodeError, match='not supported'):
        P.decode_frame(b'', (2, 10))
    with pytest.raises(P.NatNetDecodeError, match='not supported'):
        P.decode_frame(b'', (4, 4))
    with pytest.raises(P.NatNetDecodeError, match='not supported'):
        P.decode_frame(b'', (5, 0))


def test_42_rigid_body_description_has_rotation_offset():
    """4.2 inserts a 16-byte quaternion after the parent offset (SDK 4.3 NatNetClient.py)."""
    d = P.RigidBodyDescription('b', 1, -1, (0.0, 0.0, 0.0), [], [], [], (0.0, 0.0, 0.5, 0.75))
    b41 = P.encode_modeldef(P.ModelDefinitions([d]), (4, 1))
    b42 = P.encode_modeldef(P.ModelDefinitions([d]), (4, 2))
    assert len(b42) == len(b41) + 16
    # count, type, byte count, 'b\0', id, parent, offset xyz, then the quaternion.
    assert struct.unpack_from('<4f', b42, 4 + 4 + 4 + 2 + 8 + 12) == (0.0, 0.0, 0.5, 0.75)
    assert P.decode_modeldef(b42, (4, 3)).descriptions[0].orientation == (0.0, 0.0, 0.5, 0.75)
    # A 4.2 definition read as 4.1 (or back) fails its byte count instead of being misread.
    with pytest.raises(P.NatNetDecodeError):
        P.decode_modeldef(b42, (4, 1))
    with pytest.raises(P.NatNetDecodeError):
        P.decode_modeldef(b41, (4, 2))


@pytest.mark.parametrize('version', [(4, 1), (4, 2), (4, 3)])
def test_frame_layout_unchanged_from_41(version):
    """The SDK 4.3 client reads 4.2/4.3 frames with the 4.1 layout (byte counts, assets, PTP)."""
    f = full_frame(version)
    assert P.encode_frame(f, version) == P.encode_frame(f, (4, 1))


def test_response_variants():
    assert P.decode_message(P.encode_message(P.Response.from_float(120.0))).as_float() == 120.0
    assert P.decode_message(P.encode_message(P.Response.from_int(-1))).as_int() == -1
    r = P.decode_message(P.encode_message(P.Response.from_text('Bitstream,4.1')))
    assert r.text == 'Bitstream,4.1' and not r.is_numeric
    assert P.decode_message(P.packet(256)) == P.Empty(P.MessageId.UNRECOGNIZED_REQUEST)
    assert P.decode_message(P.packet(100)) == P.Empty(P.MessageId.UNRECOGNIZED_REQUEST)


def test_real_motive_strictness_cases():
    """Seen from real Motive: UNRECOGNIZED_REQUEST with a 264-byte payload, and a binary
    REQUEST/RESPONSE pair (``service20,`` followed by non-UTF-8 bytes)."""
    body = b'Motive\0' + bytes(range(200, 256)) + bytes(264 - 7 - 56)
    u = P.decode_message(P.packet(100, body))
    assert u.message_id == P.MessageId.UNRECOGNIZED_REQUEST and len(u.payload) == 264
    assert P.encode_message(u) == P.packet(100, body)
    binary = b'service20,\xff\xfe\x00\x81\x00'
    req = P.decode_message(P.packet(P.MessageId.REQUEST, binary))
    assert req.command == 'service20,\ufffd\ufffd' and req.raw == binary
    assert P.encode_message(req) == P.packet(P.MessageId.REQUEST, binary)
    resp = P.decode_message(P.packet(P.MessageId.RESPONSE, binary))
    assert resp.data == binary and not resp.is_numeric


def test_connect_variants():
    ping = P.decode_message(P.packet(0, b'Ping\0'))
    assert ping.app_name == 'Ping' and P.encode_message(ping) == P.packet(0, b'Ping\0')
    c = P.ConnectRequest('NatNetLib', (4, 1, 0, 0), (4, 1, 0, 0), True, (3, 1, 0, 0))
    pkt = P.encode_message(c)
    assert len(pkt) == 4 + 269 and P.decode_message(pkt) == c
    assert P.decode_message(P.packet(0)).raw == b''


def test_serverinfo_short_form():
    s = P.ServerInfo('Motive', (1, 10, 0, 0), (2, 10, 0, 0), None)
    pkt = P.encode_message(s)
    assert len(pkt) == 4 + 264 and P.decode_message(pkt) == P.ServerInfo(
        'Motive', (1, 10, 0, 0), (2, 10, 0, 0), None
    )
