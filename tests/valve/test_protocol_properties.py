"""DAC-board codec, layer by layer: COBS and the frame parser raise nothing but ProtocolError on
any bytes (test_protocol.py covers the stream decoder, round trips and bit flips), and a frame
whose CRC matches is either decoded or refused with a reason, never misread."""

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from equimus_hw.valve import protocol as P

SETTINGS = settings(max_examples=2000, deadline=None)


@SETTINGS
@given(st.binary(max_size=300))
def test_cobs_decode_raises_only_protocol_error(data):
    try:
        out = P.cobs_decode(data)
    except P.ProtocolError as exc:
        assert exc.reason in P.REASON_NAMES
        return
    assert P.cobs_encode(out) == data  # what decodes is exactly one encoding


@SETTINGS
@given(
    st.lists(
        st.one_of(st.just(b'\x00'), st.binary(min_size=250, max_size=260), st.binary(max_size=8)),
        max_size=6,
    ).map(b''.join)
)
def test_cobs_encoding_has_no_zero_and_decodes_back(data):
    """Any bytes, with zero runs and non-zero runs around the 254-byte block length (where an
    encoder by runs has to split): no zero on the wire, and the decoder gives them back."""
    enc = P.cobs_encode(data)
    assert 0 not in enc
    assert P.cobs_decode(enc) == data


@SETTINGS
@given(st.binary(max_size=100))
def test_decode_payload_raises_only_protocol_error(frame):
    try:
        P.decode_payload(frame)
    except P.ProtocolError as exc:
        assert exc.reason in P.REASON_NAMES


@SETTINGS
@given(mtype=st.integers(0, 255), seq=st.integers(0, 255), body=st.binary(max_size=60))
def test_frames_with_a_valid_crc_decode_or_are_refused_with_a_reason(mtype, seq, body):
    frame = bytes([mtype, seq]) + body
    frame += struct.pack('<H', P.crc16_ccitt(frame))
    try:
        msg = P.decode_payload(frame)
    except P.ProtocolError as exc:
        assert exc.reason in P.REASON_NAMES and exc.reason != P.R_BAD_CRC
        return
    assert P.encode_payload(msg) == frame  # decoded means: the same bytes re-encode
