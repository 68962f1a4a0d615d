"""FrameReader (the receive path's frame decoder) gives what decode_frame gives, frame for frame
and error for error, whether a frame goes through a kept layout or is decoded in full."""

import dataclasses
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_protocol_roundtrip import VERSIONS, full_frame

from equimus_hw.natnet import protocol as P
from equimus_hw.natnet.emulator import NatNetEmulator


def leg_frame(version, others=1, labeled=2):
    """A frame as a leg's stream sends it: marker sets, bodies, markers; no skeleton, asset,
    force plate or device (the frames FrameReader keeps a layout of)."""
    f = full_frame(version)
    return dataclasses.replace(
        f,
        other_markers=[(0.5, 0.25, 0.125)] * others,
        skeletons=[],
        assets=[],
        force_plates=[],
        devices=[],
        labeled_markers=list(f.labeled_markers[:1]) * labeled,
    )


def payload(f, version):
    return P.split_packet(P.encode_message(f, version))[1]


def outcome(decode, data):
    """The frame, or the error's reason and offset."""
    try:
        return decode(data)
    except P.NatNetDecodeError as e:
        return ('error', e.reason, e.offset)


@pytest.mark.parametrize('version', VERSIONS)
def test_frames_read_through_a_layout_equal_decode_frame(version):
    reader = P.FrameReader(version)
    for k, (others, labeled) in enumerate([(1, 2), (0, 0), (3, 1), (1, 2), (0, 0)]):
        f = dataclasses.replace(leg_frame(version, others, labeled), frame_number=k)
        f.rigid_bodies[0] = dataclasses.replace(f.rigid_bodies[0], position=(0.25 * k, 1.0, 2.0))
        p = payload(f, version)
        got = reader.decode(p)
        assert got == P.decode_frame(p, version) == f
        assert repr(got) == repr(P.decode_frame(p, version))
    # Three layouts kept (one per length); the repeated ones were read through theirs.
    layouts = reader._layouts
    assert len(layouts) == 3 and all(lay is not None for lay in layouts.values())
    assert layouts[len(p)].read(p) == f


@pytest.mark.parametrize('version', VERSIONS)
def test_frames_with_skeletons_or_devices_are_decoded_in_full(version):
    reader = P.FrameReader(version)
    p = payload(full_frame(version), version)
    assert reader.decode(p) == P.decode_frame(p, version) == full_frame(version)
    assert reader._layouts[len(p)] is None


def test_the_real_motive_frames(natnet_data):
    for path in sorted(natnet_data.glob('mocapframe_*.bin')):
        data = path.read_bytes()
        reader = P.FrameReader((3, 0))
        first = P.decode_message(data, (3, 0), reader)
        again = P.decode_message(data, (3, 0), reader)
        assert first == again == P.decode_message(data, (3, 0)), path.name


def test_a_frame_whose_structure_changed_at_the_same_length_is_decoded_in_full():
    """Same length, other structure: a marker set renamed, markers moved between sections."""
    version = (4, 1)
    reader = P.FrameReader(version)
    base = leg_frame(version)
    reader.decode(payload(base, version))
    renamed = dataclasses.replace(
        base, marker_sets=[P.MarkerSetData('thugh', base.marker_sets[0].positions)]
    )
    renamed.marker_sets += base.marker_sets[1:]
    p = payload(renamed, version)
    assert len(p) == len(payload(base, version))
    assert reader.decode(p) == renamed
    # Twelve bytes more of name, one 12-byte unlabeled marker less.
    moved = dataclasses.replace(
        base,
        marker_sets=[P.MarkerSetData('thigh' + 'x' * 12, base.marker_sets[0].positions)]
        + base.marker_sets[1:],
        other_markers=[],
    )
    q = payload(moved, version)
    assert len(q) == len(payload(base, version))
    assert reader.decode(q) == moved


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    st.sampled_from(VERSIONS),
    st.lists(st.tuples(st.floats(0.0, 1.0, exclude_max=True), st.integers(0, 255)), max_size=4),
)
@example((4, 1), [(0.56640625, 127)])  # a body's mean error made NaN
def test_a_changed_frame_is_read_as_decode_frame_reads_it(version, changes):
    """Bytes of a frame changed anywhere (counts, names, byte counts, floats, the end marker)
    after the reader has kept its layout: the same frame or the same error as decode_frame."""
    reader = P.FrameReader(version)
    p = payload(leg_frame(version), version)
    reader.decode(p)
    q = bytearray(p)
    for where, value in changes:
        q[int(where * len(q))] = value
    q = bytes(q)
    # Compared as text: a changed byte may make a float NaN, in both, and NaN != NaN.
    assert repr(outcome(reader.decode, q)) == repr(outcome(lambda d: P.decode_frame(d, version), q))


def test_the_emulators_stream_is_read_through_its_layout():
    """The leg's stream, as the NatNet emulator sends it: every frame after the first read
    through the first one's layout."""
    emu = NatNetEmulator(rate_hz=120.0)
    reader = P.FrameReader(emu.version)
    frames = []
    for k in range(5):
        emu.set_pose('thigh', (0.1 * k, 0.2, 0.3), (0.0, 0.0, 0.0, 1.0))
        f = emu.build_frame(k / 120)
        f.frame_number = k + 1
        frames.append(payload(f, emu.version))
    assert len({len(p) for p in frames}) == 1
    for p in frames:
        assert reader.decode(p) == P.decode_frame(p, emu.version)
    layout = reader._layouts[len(frames[0])]
    assert layout is not None
    assert [layout.read(p) for p in frames] == [P.decode_frame(p, emu.version) for p in frames]
    body = layout.read(frames[-1]).rigid_bodies
    assert struct.pack('<3f', *body[0].position) != struct.pack('<3f', 0.0, 0.0, 0.0)
