"""Binary serial protocol between the host and the VPPE DAC board (no ROS imports).

Every message is a COBS-encoded frame terminated by one 0x00 byte. The decoded frame is::

    type:u8 | seq:u8 | body (0..N bytes) | crc:u16 little-endian

with CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, no reflection, xorout 0) over type, seq and
body. All multi-byte integers are little-endian. docs/dac_board_protocol.md is the byte-by-byte
reference; this module is its executable form and is shared by the driver and the emulator.

Decoding never raises on wire data: `FrameDecoder.feed` turns every malformed frame into a
`Rejected` item with a reason code, so one bad byte can never escape the receive loop.
"""

from __future__ import annotations

import binascii
import dataclasses
import struct
from collections.abc import Callable, Sequence
from types import ModuleType

from equimus_description.compiled import prefer_compiled

_wire: ModuleType | None
try:
    from . import _wire
except ImportError:  # built without a C compiler, or not built: encode_set's Python form only
    _wire = None

PROTOCOL_VERSION = 1
DELIMITER = 0x00
MAX_CHANNELS = 8
# Largest decoded frame: ACK with MAX_CHANNELS applied + measured codes (2+2+2*2*8+2 = 38 bytes).
MAX_DECODED_LEN = 64
# COBS adds at most one byte per 254 plus one: anything longer than this is garbage.
MAX_ENCODED_LEN = MAX_DECODED_LEN + 2

# Message types: host -> board have the high bit clear, board -> host have it set.
T_HELLO = 0x01
T_PING = 0x02
T_SET = 0x03
T_ACK = 0x81
T_INFO = 0x82
T_NAK = 0x83
# What a board accepts; any other CRC-valid frame is NAKed as unknown_type, whatever its body.
HOST_TO_BOARD_TYPES = frozenset({T_HELLO, T_PING, T_SET})

# ACK flags.
ACK_MEASURED = 0x01  # measured codes (VPPE actual-value output via the ADC) follow
ACK_WATCHDOG_VENTED = 0x02  # board watchdog vented the outputs since the previous ACK
ACK_FRESH_BOOT = 0x04  # no valid SET received since power-up / reset
ACK_BAD_FRAME_VENTED = 0x08  # a bad frame vented the outputs since the previous ACK

# INFO flags.
INFO_VENT_ON_BAD_FRAME = 0x01

# NAK / rejection reasons.
R_BAD_COBS = 1
R_BAD_CRC = 2
R_BAD_LENGTH = 3
R_UNKNOWN_TYPE = 4
R_BAD_CHANNEL_COUNT = 5
R_CODE_OUT_OF_RANGE = 6
R_OVERFLOW = 7
R_EMPTY = 8

REASON_NAMES = {
    R_BAD_COBS: 'bad_cobs',
    R_BAD_CRC: 'bad_crc',
    R_BAD_LENGTH: 'bad_length',
    R_UNKNOWN_TYPE: 'unknown_type',
    R_BAD_CHANNEL_COUNT: 'bad_channel_count',
    R_CODE_OUT_OF_RANGE: 'code_out_of_range',
    R_OVERFLOW: 'overflow',
    R_EMPTY: 'empty',
}


class ProtocolError(ValueError):
    """A frame that cannot be decoded; `reason` is one of the R_* codes."""

    def __init__(self, reason: int, message: str, seq: int = 0):
        super().__init__(message)
        self.reason = reason
        self.seq = seq


# --------------------------------------------------------------------------- CRC and COBS


def crc16_ccitt(data: bytes, crc: int = 0xFFFF) -> int:
    """CRC-16/CCITT-FALSE; crc16_ccitt(b'123456789') == 0x29B1. binascii's crc_hqx is this CRC
    (polynomial 0x1021, not reflected, no final XOR) from the initial value given, in C: a
    twentieth of a Python table loop's time, on every frame in both directions."""
    return binascii.crc_hqx(data, crc)


def cobs_encode(data: bytes) -> bytes:
    """Consistent Overhead Byte Stuffing: the output contains no 0x00 byte. Each run between
    zero bytes is one block (its length + 1, then the run), a run of 254 non-zero bytes a full
    block (0xFF) that no zero follows; by runs, not bytes: this runs on every frame sent."""
    out = bytearray()
    for run in bytes(data).split(b'\x00'):
        while len(run) >= 254:
            out.append(255)
            out += run[:254]
            run = run[254:]
        out.append(len(run) + 1)
        out += run
    return bytes(out)


def cobs_decode(data: bytes) -> bytes:
    """Inverse of cobs_encode; raises ProtocolError(R_BAD_COBS) on malformed input."""
    out = bytearray()
    i = 0
    n = len(data)
    if n == 0:
        raise ProtocolError(R_EMPTY, 'empty frame')
    while i < n:
        code = data[i]
        if code == 0:
            raise ProtocolError(R_BAD_COBS, 'zero byte inside a COBS frame')
        end = i + code
        if end > n:
            raise ProtocolError(R_BAD_COBS, 'COBS block runs past the end of the frame')
        block = data[i + 1 : end]
        if 0 in block:
            raise ProtocolError(R_BAD_COBS, 'zero byte inside a COBS frame')
        out += block
        i = end
        if code < 255 and i < n:
            out.append(0)
    return bytes(out)


# --------------------------------------------------------------------------- messages


@dataclasses.dataclass(frozen=True)
class Hello:
    """Host asks the board to identify itself; answered by Info."""

    seq: int


@dataclasses.dataclass(frozen=True)
class Ping:
    """Host asks for the current state; answered by Ack. Does NOT feed the board watchdog."""

    seq: int


@dataclasses.dataclass(frozen=True)
class Set:
    """Host sets every DAC channel; the only message that feeds the board watchdog."""

    seq: int
    codes: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Ack:
    """Board confirms a SET or PING with the codes now on the DAC and, if it has an ADC,
    the measured actual-value codes."""

    seq: int
    flags: int
    applied: tuple[int, ...]
    measured: tuple[int, ...] | None = None


@dataclasses.dataclass(frozen=True)
class Info:
    """Board identity and fixed configuration, the answer to Hello."""

    seq: int
    protocol_version: int
    firmware: tuple[int, int, int]
    channels: int
    dac_bits: int
    adc_bits: int  # 0: no read-back ADC
    flags: int
    dac_vref_mv: int
    watchdog_ms: int
    max_code: int  # board-side hard ceiling; SET codes above it are refused and vent


@dataclasses.dataclass(frozen=True)
class Nak:
    """Board refuses a frame. seq echoes the request if the frame was decodable, else 0."""

    seq: int
    reason: int
    detail: int = 0


@dataclasses.dataclass(frozen=True)
class Rejected:
    """What the decoder yields for a frame it could not decode (never an exception)."""

    reason: int
    message: str
    seq: int = 0
    raw: bytes = b''


Message = Hello | Ping | Set | Ack | Info | Nak


def _u8(v: int, what: str) -> int:
    if not 0 <= int(v) <= 0xFF:
        raise ValueError(f'{what}={v} does not fit in a byte')
    return int(v)


def _codes(codes: Sequence[int], what: str) -> bytes:
    if not 1 <= len(codes) <= MAX_CHANNELS:
        raise ValueError(f'{what}: {len(codes)} channels, allowed 1..{MAX_CHANNELS}')
    for c in codes:
        if not 0 <= int(c) <= 0xFFFF:
            raise ValueError(f'{what}: code {c} outside 0..65535')
    return struct.pack(f'<{len(codes)}H', *[int(c) for c in codes])


def encode_payload(msg: Message) -> bytes:
    """The decoded frame (type, seq, body, crc) of a message, before COBS."""
    if isinstance(msg, Hello):
        head, body = T_HELLO, b''
    elif isinstance(msg, Ping):
        head, body = T_PING, b''
    elif isinstance(msg, Set):
        head, body = T_SET, bytes([len(msg.codes)]) + _codes(msg.codes, 'SET')
    elif isinstance(msg, Ack):
        flags = msg.flags & ~ACK_MEASURED
        body = _codes(msg.applied, 'ACK applied')
        if msg.measured is not None:
            if len(msg.measured) != len(msg.applied):
                raise ValueError('ACK: measured and applied must have the same length')
            flags |= ACK_MEASURED
            body += _codes(msg.measured, 'ACK measured')
        head, body = T_ACK, bytes([_u8(flags, 'flags'), len(msg.applied)]) + body
    elif isinstance(msg, Info):
        head = T_INFO
        body = struct.pack(
            '<8B3H',
            _u8(msg.protocol_version, 'protocol_version'),
            *[_u8(v, 'firmware') for v in msg.firmware],
            _u8(msg.channels, 'channels'),
            _u8(msg.dac_bits, 'dac_bits'),
            _u8(msg.adc_bits, 'adc_bits'),
            _u8(msg.flags, 'flags'),
            msg.dac_vref_mv,
            msg.watchdog_ms,
            msg.max_code,
        )
    elif isinstance(msg, Nak):
        head, body = T_NAK, bytes([_u8(msg.reason, 'reason'), _u8(msg.detail, 'detail')])
    else:
        raise TypeError(f'not a protocol message: {msg!r}')
    frame = bytes([head, _u8(msg.seq, 'seq')]) + body
    return frame + struct.pack('<H', crc16_ccitt(frame))


def encode(msg: Message) -> bytes:
    """Bytes to put on the wire for one message: COBS(frame) + 0x00."""
    return cobs_encode(encode_payload(msg)) + bytes([DELIMITER])


def encode_set(seq: int, codes: Sequence[int]) -> bytes:
    """encode(Set(seq, codes)): the interpreted form of the compiled `_wire.encode_set`, which
    gives the same bytes and refuses the same input with the same error."""
    return encode(Set(seq, tuple(codes)))


def set_encoder(prefer: bool | None = None) -> Callable[[int, Sequence[int]], bytes]:
    """The SET encoder a link built now calls on every frame: the compiled one where this
    build has it, unless `prefer` is False or the process asks for the interpreted form
    (equimus_description.compiled)."""
    if _wire is not None and prefer_compiled(prefer):
        encoder: Callable[[int, Sequence[int]], bytes] = _wire.encode_set
        return encoder
    return encode_set


def encoder_form(encoder: Callable[[int, Sequence[int]], bytes]) -> str:
    """'compiled' or 'python': which of set_encoder's two an encoder is."""
    return 'compiled' if _wire is not None and encoder is _wire.encode_set else 'python'


def decode_payload(frame: bytes, accept: frozenset[int] | None = None) -> Message:
    """Parse one decoded (un-COBSed) frame; raises ProtocolError with a reason code.

    accept: the message types this side takes (a board: HOST_TO_BOARD_TYPES); a CRC-valid frame
    of any other type is unknown_type before its body is looked at."""
    if len(frame) < 4:
        raise ProtocolError(R_BAD_LENGTH, f'frame of {len(frame)} bytes is shorter than 4')
    if len(frame) > MAX_DECODED_LEN:
        raise ProtocolError(R_BAD_LENGTH, f'frame of {len(frame)} bytes exceeds {MAX_DECODED_LEN}')
    (crc,) = struct.unpack_from('<H', frame, len(frame) - 2)
    if crc != crc16_ccitt(frame[:-2]):
        raise ProtocolError(R_BAD_CRC, 'CRC mismatch')
    mtype, seq = frame[0], frame[1]
    body = frame[2:-2]
    if accept is not None and mtype not in accept:
        raise ProtocolError(R_UNKNOWN_TYPE, f'message type 0x{mtype:02x} not accepted here', seq)

    def need(n: int) -> None:
        if len(body) != n:
            raise ProtocolError(
                R_BAD_LENGTH, f'type 0x{mtype:02x}: body of {len(body)} bytes, expected {n}', seq
            )

    def channel_count(n: int) -> int:
        if not 1 <= n <= MAX_CHANNELS:
            raise ProtocolError(
                R_BAD_CHANNEL_COUNT, f'{n} channels, allowed 1..{MAX_CHANNELS}', seq
            )
        return n

    if mtype == T_HELLO:
        need(0)
        return Hello(seq)
    if mtype == T_PING:
        need(0)
        return Ping(seq)
    if mtype == T_SET:
        if not body:
            raise ProtocolError(R_BAD_LENGTH, 'SET without a channel count', seq)
        n = channel_count(body[0])
        need(1 + 2 * n)
        return Set(seq, struct.unpack_from(f'<{n}H', body, 1))
    if mtype == T_ACK:
        if len(body) < 2:
            raise ProtocolError(R_BAD_LENGTH, 'ACK shorter than flags + count', seq)
        flags = body[0]
        n = channel_count(body[1])
        measured_present = bool(flags & ACK_MEASURED)
        need(2 + 2 * n * (2 if measured_present else 1))
        applied = struct.unpack_from(f'<{n}H', body, 2)
        measured = struct.unpack_from(f'<{n}H', body, 2 + 2 * n) if measured_present else None
        return Ack(seq, flags, applied, measured)
    if mtype == T_INFO:
        need(14)
        v = struct.unpack('<8B3H', body)
        return Info(seq, v[0], (v[1], v[2], v[3]), v[4], v[5], v[6], v[7], v[8], v[9], v[10])
    if mtype == T_NAK:
        need(2)
        return Nak(seq, body[0], body[1])
    raise ProtocolError(R_UNKNOWN_TYPE, f'unknown message type 0x{mtype:02x}', seq)


class FrameDecoder:
    """Streaming decoder: feed it whatever bytes arrived, get messages and rejections back.

    Bytes are collected up to each 0x00 delimiter. An empty frame (two delimiters in a row) is
    ignored silently, so a sender may emit a leading 0x00 to resynchronise the receiver. A frame
    longer than MAX_ENCODED_LEN is dropped up to the next delimiter and reported once as overflow.
    """

    def __init__(self, accept: frozenset[int] | None = None) -> None:
        """accept: see decode_payload (None: every message type)."""
        self._accept = accept
        self._buf = bytearray()
        self._overflow = False
        self.frames_ok = 0
        self.rejected = 0

    def reset(self) -> None:
        """Forget any partial frame (e.g. after reopening the port)."""
        self._buf.clear()
        self._overflow = False

    def feed(self, data: bytes) -> list[Message | Rejected]:
        out: list[Message | Rejected] = []
        start = 0
        while True:
            idx = data.find(b'\x00', start)
            chunk = data[start:] if idx < 0 else data[start:idx]
            if not self._overflow:
                self._buf += chunk
                if len(self._buf) > MAX_ENCODED_LEN:
                    self._overflow = True
                    self._buf.clear()
            if idx < 0:
                break
            start = idx + 1
            if self._overflow:
                self._overflow = False
                self.rejected += 1
                out.append(Rejected(R_OVERFLOW, f'frame longer than {MAX_ENCODED_LEN} bytes'))
                continue
            if not self._buf:
                continue
            raw = bytes(self._buf)
            self._buf.clear()
            out.append(self._decode_one(raw))
        return out

    def _decode_one(self, raw: bytes) -> Message | Rejected:
        try:
            msg = decode_payload(cobs_decode(raw), self._accept)
        except ProtocolError as exc:
            self.rejected += 1
            return Rejected(exc.reason, str(exc), exc.seq, raw)
        except (ValueError, struct.error) as exc:  # defensive: never let wire data raise
            self.rejected += 1
            return Rejected(R_BAD_LENGTH, f'undecodable frame: {exc}', 0, raw)
        self.frames_ok += 1
        return msg
