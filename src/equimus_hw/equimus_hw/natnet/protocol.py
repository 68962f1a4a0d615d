"""NatNet 3.0 / 3.1 / 4.0 / 4.1 / 4.2 / 4.3 wire codec (no ROS).

Strict by design: every decoder consumes its payload exactly, and anything malformed raises
:class:`NatNetDecodeError` (a ``ValueError``) with a ``reason`` -- never ``struct.error``,
``IndexError`` or ``UnicodeDecodeError``. The encoders produce the byte layout Motive sends, so the
emulator speaks the real protocol. Layout facts: ``shared/spec/natnet.md`` sections 1-9; what 4.2
and 4.3 changed: docs/natnet.md "NatNet 4.2 and 4.3".
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from operator import itemgetter
from typing import Generic, TypeVar, overload

Version = tuple[int, int]
SUPPORTED_VERSIONS: tuple[Version, ...] = ((3, 0), (3, 1), (4, 0), (4, 1), (4, 2), (4, 3))
#: The newest layout this codec speaks: what a unicast client asks Motive for by default.
NEWEST_VERSION: Version = SUPPORTED_VERSIONS[-1]
HEADER = struct.Struct('<HH')
MAX_PAYLOAD = 65503
SENDER_NAME_LEN = 256
SENDER_LEN = 264
SERVERINFO_LEN = 279


class MessageId(IntEnum):
    CONNECT = 0
    SERVERINFO = 1
    REQUEST = 2
    RESPONSE = 3
    REQUEST_MODELDEF = 4
    MODELDEF = 5
    REQUEST_FRAMEOFDATA = 6
    FRAMEOFDATA = 7
    MESSAGESTRING = 8
    DISCONNECT = 9
    KEEPALIVE = 10
    DISCONNECTBYTIMEOUT = 11
    ECHOREQUEST = 12
    ECHORESPONSE = 13
    DISCOVERY = 14
    UNRECOGNIZED_REQUEST = 100


#: Some sources say Motive sends 0x100 for "unrecognized request" (spec pitfall 15): accept both.
UNRECOGNIZED_IDS = (100, 256)


class NatNetDecodeError(ValueError):
    """A datagram that is not valid NatNet for the negotiated version; ``reason`` says why."""

    def __init__(self, reason: str, offset: int | None = None):
        self.reason = reason
        self.offset = offset
        super().__init__(reason if offset is None else f'{reason} (at payload byte {offset})')


def parse_version(text: str | Sequence[int]) -> Version:
    """'4.1', '4.1.0.0' or (4, 1, 0, 0) -> (4, 1)."""
    if isinstance(text, str):
        parts = text.strip().split('.')
        try:
            nums = [int(p) for p in parts]
        except ValueError as exc:
            raise ValueError(
                f'bad NatNet version {text!r}: expected e.g. 3.0, 3.1, 4.0 ... 4.3'
            ) from exc
    else:
        nums = list(text)
    if len(nums) < 2:
        raise ValueError(f'bad NatNet version {text!r}: expected major.minor')
    return (nums[0], nums[1])


SUPPORTED_TEXT = ', '.join(f'{a}.{b}' for a, b in SUPPORTED_VERSIONS)


def version_text(version: Sequence[int]) -> str:
    return '.'.join(str(int(x)) for x in version)


def check_version(version: Version) -> Version:
    v = (int(version[0]), int(version[1]))
    if v not in SUPPORTED_VERSIONS:
        raise NatNetDecodeError(
            f'NatNet version {v[0]}.{v[1]} is not supported (supported: {SUPPORTED_TEXT}); '
            "set Motive's streaming bitstream to one of these"
        )
    return v


# --------------------------------------------------------------------------------------------
# Data records
# --------------------------------------------------------------------------------------------
Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]


@dataclass
class RigidBody:
    """One rigid-body record of a frame (38 bytes on the wire)."""

    id: int
    position: Vec3
    orientation: Quat  # x, y, z, w
    mean_error: float = 0.0
    params: int = 1

    @property
    def tracking_valid(self) -> bool:
        return bool(self.params & 0x01)


@dataclass
class Marker:
    """Labeled/asset marker record (26 bytes)."""

    id: int
    position: Vec3
    size: float = 0.0
    params: int = 0
    residual: float = 0.0

    @property
    def model_id(self) -> int:
        return (self.id >> 16) & 0xFFFF

    @property
    def marker_id(self) -> int:
        return self.id & 0xFFFF

    @property
    def occluded(self) -> bool:
        return bool(self.params & 0x01)

    @property
    def unlabeled(self) -> bool:
        return bool(self.params & 0x10)


@dataclass
class MarkerSetData:
    name: str
    positions: Sequence[Vec3] = field(default_factory=list)


@dataclass
class SkeletonData:
    id: int
    bones: list[RigidBody] = field(default_factory=list)


@dataclass
class AssetData:
    id: int
    rigid_bodies: list[RigidBody] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)


@dataclass
class AnalogData:
    """Force-plate or device data: one list of samples per channel."""

    id: int
    channels: list[list[float]] = field(default_factory=list)


@dataclass
class Frame:
    frame_number: int
    marker_sets: list[MarkerSetData] = field(default_factory=list)
    other_markers: Sequence[Vec3] = field(default_factory=list)
    rigid_bodies: list[RigidBody] = field(default_factory=list)
    skeletons: list[SkeletonData] = field(default_factory=list)
    assets: list[AssetData] = field(default_factory=list)
    labeled_markers: Sequence[Marker] = field(default_factory=list)
    force_plates: list[AnalogData] = field(default_factory=list)
    devices: list[AnalogData] = field(default_factory=list)
    timecode: int = 0
    timecode_sub: int = 0
    timestamp: float = 0.0
    stamp_mid_exposure: int = 0
    stamp_data_received: int = 0
    stamp_transmit: int = 0
    #: (secs, frac) external precision time; present on the wire only when not None (4.1).
    precision_timestamp: tuple[int, int] | None = None
    params: int = 0

    @property
    def models_changed(self) -> bool:
        return bool(self.params & 0x02)

    @property
    def bitstream_changed(self) -> bool:
        return bool(self.params & 0x08)


# Model definitions ---------------------------------------------------------------------------
@dataclass
class RigidBodyDescription:
    name: str
    id: int
    parent_id: int = -1
    offset: Vec3 = (0.0, 0.0, 0.0)
    marker_positions: list[Vec3] = field(default_factory=list)
    marker_labels: list[int] = field(default_factory=list)
    #: 4.0+ only; ``None`` for 3.x.
    marker_names: list[str] | None = None
    #: 4.2+ only (rotation offset from the parent, x y z w); ``None`` before 4.2.
    orientation: Quat | None = None
    type_id = 1


@dataclass
class MarkerSetDescription:
    name: str
    marker_names: list[str] = field(default_factory=list)
    type_id = 0


@dataclass
class SkeletonDescription:
    name: str
    id: int
    bones: list[RigidBodyDescription] = field(default_factory=list)
    type_id = 2


@dataclass
class ForcePlateDescription:
    id: int
    serial: str
    width: float = 0.0
    length: float = 0.0
    origin: Vec3 = (0.0, 0.0, 0.0)
    cal_matrix: list[float] = field(default_factory=lambda: [0.0] * 144)
    corners: list[float] = field(default_factory=lambda: [0.0] * 12)
    plate_type: int = 0
    channel_data_type: int = 0
    channel_names: list[str] = field(default_factory=list)
    type_id = 3


@dataclass
class DeviceDescription:
    id: int
    name: str
    serial: str = ''
    device_type: int = 0
    channel_data_type: int = 0
    channel_names: list[str] = field(default_factory=list)
    type_id = 4


@dataclass
class CameraDescription:
    name: str
    position: Vec3 = (0.0, 0.0, 0.0)
    orientation: Quat = (0.0, 0.0, 0.0, 1.0)
    type_id = 5


@dataclass
class AssetMarkerDescription:
    name: str
    id: int
    position: Vec3 = (0.0, 0.0, 0.0)
    size: float = 0.0
    params: int = 0


@dataclass
class AssetDescription:
    name: str
    asset_type: int
    id: int
    rigid_bodies: list[RigidBodyDescription] = field(default_factory=list)
    markers: list[AssetMarkerDescription] = field(default_factory=list)
    type_id = 6


@dataclass
class UnknownDescription:
    """A 4.1+ description of a type this codec does not know, kept raw (skipped by byte count)."""

    type_id: int
    body: bytes


Description = (
    MarkerSetDescription
    | RigidBodyDescription
    | SkeletonDescription
    | ForcePlateDescription
    | DeviceDescription
    | CameraDescription
    | AssetDescription
    | UnknownDescription
)


@dataclass
class ModelDefinitions:
    descriptions: list[Description] = field(default_factory=list)

    def rigid_bodies(self) -> list[RigidBodyDescription]:
        return [d for d in self.descriptions if isinstance(d, RigidBodyDescription)]


# Command-channel messages --------------------------------------------------------------------
@dataclass
class ServerInfo:
    app_name: str = 'Motive'
    app_version: tuple[int, int, int, int] = (3, 1, 0, 0)
    natnet_version: tuple[int, int, int, int] = (4, 1, 0, 0)
    clock_hz: int | None = 10_000_000  # None: old 264-byte form
    data_port: int = 1511
    multicast: bool = True
    multicast_group: str = '239.255.42.99'


@dataclass
class ConnectRequest:
    """NAT_CONNECT (or NAT_DISCOVERY). ``raw`` keeps payloads shorter than a sender block."""

    app_name: str = 'NatNetLib'
    app_version: tuple[int, int, int, int] = (4, 1, 0, 0)
    natnet_version: tuple[int, int, int, int] = (4, 1, 0, 0)
    subscribed_data_only: bool | None = None
    bitstream_version: tuple[int, int, int, int] | None = None
    raw: bytes | None = None


@dataclass
class Request:
    """NAT_REQUEST. Motive also exchanges binary requests (e.g. ``service20,`` + bytes); those keep
    their payload in ``raw`` and ``command`` holds the printable text before the first NUL."""

    command: str
    raw: bytes | None = None


@dataclass
class Response:
    """NAT_RESPONSE: 4 raw bytes (int32 or float32, by the request sent) or a string."""

    data: bytes

    @property
    def is_numeric(self) -> bool:
        return len(self.data) == 4

    def as_int(self) -> int:
        return struct.unpack('<i', self.data)[0]

    def as_float(self) -> float:
        return struct.unpack('<f', self.data)[0]

    @property
    def text(self) -> str:
        return self.data.rstrip(b'\0').decode('utf-8', 'replace')

    @classmethod
    def from_int(cls, value: int) -> Response:
        return cls(struct.pack('<i', value))

    @classmethod
    def from_float(cls, value: float) -> Response:
        return cls(struct.pack('<f', value))

    @classmethod
    def from_text(cls, text: str) -> Response:
        return cls(text.encode('utf-8') + b'\0')


@dataclass
class EchoRequest:
    client_time: int


@dataclass
class EchoResponse:
    client_time: int
    server_ticks: int


@dataclass
class MessageString:
    text: str


@dataclass
class Empty:
    """A message with no payload (REQUEST_MODELDEF, KEEPALIVE, DISCONNECT, UNRECOGNIZED...).

    ``payload`` is kept for UNRECOGNIZED_REQUEST only: real Motive sends it with a 264-byte sender
    block, whose content is not documented."""

    message_id: int
    payload: bytes = b''


Message = (
    Frame
    | ModelDefinitions
    | ServerInfo
    | ConnectRequest
    | Request
    | Response
    | EchoRequest
    | EchoResponse
    | MessageString
    | Empty
)


# --------------------------------------------------------------------------------------------
# Reader
# --------------------------------------------------------------------------------------------
T = TypeVar('T')


class LazyRecords(Sequence[T], Generic[T]):
    """A decoded frame's marker records, unpacked on first use. Markers are two thirds of a
    frame's decode and the control chain reads none of them: the fused loop's bridge reaches
    them only after the frame's valve command is written (docs/benchmarks.md, issue 30). The
    bytes were bounds-checked when the frame was decoded, so unpacking them cannot fail.
    Compares equal to a list of the same records; read-only."""

    __slots__ = ('_buf', '_pos', '_n', '_st', '_make', '_items')

    def __init__(
        self, buf: bytes, pos: int, n: int, st: struct.Struct, make: Callable[[tuple], T]
    ) -> None:
        self._buf, self._pos, self._n, self._st, self._make = buf, pos, n, st, make
        self._items: list[T] | None = None

    def _all(self) -> list[T]:
        items = self._items
        if items is None:
            end = self._pos + self._n * self._st.size
            raw = self._st.iter_unpack(memoryview(self._buf)[self._pos : end])
            items = self._items = [self._make(t) for t in raw]
        return items

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> list[T]: ...
    def __getitem__(self, i: int | slice) -> T | list[T]:
        return self._all()[i]

    def __iter__(self) -> Iterator[T]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return self._all() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, so unhashable like them

    def __repr__(self) -> str:
        return repr(self._all())


def _vec3(t: tuple) -> Vec3:
    return t  # three floats, as struct gave them


def _marker(t: tuple) -> Marker:
    return Marker(t[0], t[1:4], t[4], t[5], t[6])


_I32 = struct.Struct('<i')
_U32 = struct.Struct('<I')
_I16 = struct.Struct('<h')
_U64 = struct.Struct('<Q')
_F32 = struct.Struct('<f')
_F64 = struct.Struct('<d')
_VEC3 = struct.Struct('<3f')
_QUAT = struct.Struct('<4f')
_RB = struct.Struct('<i7ffh')  # 38 bytes
_MARKER = struct.Struct('<i4fhf')  # 26 bytes
_SUFFIX = struct.Struct('<IIdQQQ')  # 40 bytes
#: the Frame fields _SUFFIX carries, in wire order
_SUFFIX_FIELDS = (
    'timecode',
    'timecode_sub',
    'timestamp',
    'stamp_mid_exposure',
    'stamp_data_received',
    'stamp_transmit',
)
_ASSET_MARKER = struct.Struct('<i3ffh')


class _Reader:
    __slots__ = ('buf', 'pos', 'end')

    def __init__(self, buf: bytes, start: int = 0, end: int | None = None):
        self.buf = buf
        self.pos = start
        self.end = len(buf) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.end:
            raise NatNetDecodeError(
                f'truncated: {what} needs {n} bytes, {self.end - self.pos} left', self.pos
            )

    def unpack(self, st: struct.Struct, what: str):
        pos = self.pos
        if pos + st.size > self.end:
            self.need(st.size, what)
        self.pos = pos + st.size
        return st.unpack_from(self.buf, pos)

    def i32(self, what: str) -> int:
        pos = self.pos
        if pos + 4 > self.end:
            self.need(4, what)
        self.pos = pos + 4
        return _I32.unpack_from(self.buf, pos)[0]

    def _claim(self, n: int, st: struct.Struct, what: str) -> int:
        """Where n fixed-size records start, the reader moved past them. A shortfall is reported
        as reading them one by one would: the first record that does not fit, and what is left
        for it."""
        size = n * st.size
        pos = self.pos
        if pos + size > self.end:
            fit = max(self.end - pos, 0) // st.size
            self.pos = pos + fit * st.size
            self.need(st.size, what)
        self.pos = pos + size
        return pos

    def records(self, n: int, st: struct.Struct, what: str) -> list[tuple]:
        """n fixed-size records in one pass of C (struct.iter_unpack): a frame's bodies without a
        Python call each."""
        pos = self._claim(n, st, what)
        return list(st.iter_unpack(memoryview(self.buf)[pos : self.pos]))

    def lazy_records(
        self, n: int, st: struct.Struct, what: str, make: Callable[[tuple], T]
    ) -> LazyRecords[T]:
        """`records`, bounds-checked now and unpacked (through `make`) on first use."""
        return LazyRecords(self.buf, self._claim(n, st, what), n, st, make)

    def count(self, what: str, min_record: int) -> int:
        pos = self.pos
        if pos + 4 > self.end:
            self.need(4, what)
        self.pos = pos + 4
        n = _I32.unpack_from(self.buf, pos)[0]
        if n < 0:
            raise NatNetDecodeError(f'negative {what} ({n})', self.pos - 4)
        if n * min_record > self.end - self.pos:
            raise NatNetDecodeError(
                f'{what} {n} cannot fit in the {self.remaining()} bytes left', self.pos - 4
            )
        return n

    def cstr(self, what: str) -> str:
        i = self.buf.find(b'\0', self.pos, self.end)
        if i < 0:
            raise NatNetDecodeError(f'unterminated string ({what})', self.pos)
        try:
            s = bytes(self.buf[self.pos : i]).decode('utf-8')
        except UnicodeDecodeError:
            raise NatNetDecodeError(f'{what} is not valid UTF-8', self.pos) from None
        self.pos = i + 1
        return s

    def raw(self, n: int, what: str) -> bytes:
        self.need(n, what)
        b = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return b

    def floats(self, n: int, what: str) -> list[float]:
        self.need(4 * n, what)
        v = list(struct.unpack_from(f'<{n}f', self.buf, self.pos))
        self.pos += 4 * n
        return v


def _has_byte_counts(version: Version) -> bool:
    return version >= (4, 1)


def _section(r: _Reader, version: Version, what: str, min_record: int, read_n) -> list:
    """Read ``count [byte_count] records`` (``read_n(reader, count)``) and (4.1+) check the
    byte count matches exactly."""
    n = r.count(what, min_record)
    if version >= (4, 1):  # _has_byte_counts, inline: eight sections a frame
        if r.pos + 4 > r.end:
            r.need(4, f'{what} byte count')
        nbytes = _I32.unpack_from(r.buf, r.pos)[0]
        r.pos += 4
        if nbytes < 0 or nbytes > r.end - r.pos:
            raise NatNetDecodeError(f'{what} byte count {nbytes} out of range', r.pos - 4)
        start = r.pos
        if n == 0 and nbytes == 0:  # most sections of a frame: nothing to read
            return []
        sub = _Reader(r.buf, start, start + nbytes)
        out = read_n(sub, n)
        if sub.pos != sub.end:
            raise NatNetDecodeError(
                f'{what}: records used {sub.pos - start} bytes but byte count says {nbytes}', start
            )
        r.pos = sub.end
        return out
    return read_n(r, n)


def _each(read_one):
    """A section reader of records of varying size, one call each."""

    def read_n(r: _Reader, n: int) -> list:
        return [read_one(r) for _ in range(n)]

    return read_n


def _rd_rbs(r: _Reader, n: int) -> list[RigidBody]:
    return [
        RigidBody(t[0], t[1:4], t[4:8], t[8], t[9]) for t in r.records(n, _RB, 'rigid body record')
    ]


def _rd_markers(r: _Reader, n: int) -> list[Marker]:
    return [_marker(t) for t in r.records(n, _MARKER, 'marker record')]


def _rd_lazy_markers(r: _Reader, n: int) -> LazyRecords[Marker]:
    return r.lazy_records(n, _MARKER, 'marker record', _marker)


def _rd_vec3s(r: _Reader, n: int) -> LazyRecords[Vec3]:
    return r.lazy_records(n, _VEC3, 'marker position', _vec3)


def _rd_markerset(r: _Reader) -> MarkerSetData:
    name = r.cstr('marker set name')
    n = r.count('marker set marker count', 12)
    return MarkerSetData(name, _rd_vec3s(r, n))


def _rd_skeleton(r: _Reader) -> SkeletonData:
    sid = r.i32('skeleton id')
    n = r.count('skeleton bone count', _RB.size)
    return SkeletonData(sid, _rd_rbs(r, n))


def _rd_asset(r: _Reader) -> AssetData:
    aid = r.i32('asset id')
    nrb = r.count('asset rigid body count', _RB.size)
    rbs = _rd_rbs(r, nrb)
    nm = r.count('asset marker count', _MARKER.size)
    return AssetData(aid, rbs, _rd_markers(r, nm))


def _rd_analog(r: _Reader) -> AnalogData:
    aid = r.i32('analog id')
    nch = r.count('channel count', 4)
    chans = []
    for _ in range(nch):
        nf = r.count('channel frame count', 4)
        chans.append(r.floats(nf, 'channel samples'))
    return AnalogData(aid, chans)


_rd_markersets = _each(_rd_markerset)
_rd_skeletons = _each(_rd_skeleton)
_rd_assets = _each(_rd_asset)
_rd_analogs = _each(_rd_analog)


def decode_frame(payload: bytes, version: Version) -> Frame:
    """Decode a NAT_FRAMEOFDATA payload (header stripped)."""
    version = check_version(version)
    r = _Reader(payload)
    f = Frame(frame_number=r.i32('frame number'))
    f.marker_sets = _section(r, version, 'marker set count', 5, _rd_markersets)
    f.other_markers = _section(r, version, 'other marker count', 12, _rd_vec3s)
    f.rigid_bodies = _section(r, version, 'rigid body count', _RB.size, _rd_rbs)
    f.skeletons = _section(r, version, 'skeleton count', 8, _rd_skeletons)
    if version >= (4, 1):
        f.assets = _section(r, version, 'asset count', 12, _rd_assets)
    f.labeled_markers = _section(r, version, 'labeled marker count', _MARKER.size, _rd_lazy_markers)
    f.force_plates = _section(r, version, 'force plate count', 8, _rd_analogs)
    f.devices = _section(r, version, 'device count', 8, _rd_analogs)
    for name, value in zip(_SUFFIX_FIELDS, r.unpack(_SUFFIX, 'frame suffix'), strict=True):
        setattr(f, name, value)
    # Spec pitfall 9: the precision timestamp is recognised by the remaining length, not version.
    rem = r.remaining()
    if rem == 14:
        f.precision_timestamp = r.unpack(struct.Struct('<II'), 'precision timestamp')
    elif rem != 6:
        raise NatNetDecodeError(
            f'frame suffix: expected 6 or 14 bytes after the tick stamps, found {rem}', r.pos
        )
    f.params = r.unpack(_I16, 'frame flags')[0] & 0xFFFF
    end = r.i32('end-of-data marker')
    if end != 0:
        raise NatNetDecodeError(f'end-of-data marker is {end}, expected 0', r.pos - 4)
    return f


#: Frame layouts a FrameReader keeps (one per payload length: the model's frames with each
#: number of markers in view).
MAX_FRAME_LAYOUTS = 64


class _FrameLayout:
    """Where everything is in frames laid out as one frame already decoded: its counts, byte
    counts and names (the structure) equal, so its numbers are at the same places. One
    precompiled Struct reads a whole frame; the structure read back must equal the original's,
    which makes every check of decode_frame hold as it did for the original."""

    __slots__ = (
        'st',
        'size',
        'structure',
        'expected',
        'sets',
        'others',
        'rbs',
        'labeled',
        'tail',
        'flags',
    )

    def __init__(self, f: Frame, version: Version) -> None:
        codes: list[str] = ['i']  # the frame number
        structure: list[int] = []
        expected: list[object] = []
        n_values = 1
        pos = 4
        counted = version >= (4, 1)

        def fixed(code: str, value: object, nbytes: int) -> None:
            nonlocal n_values, pos
            codes.append(code)
            structure.append(n_values)
            expected.append(value)
            n_values += 1
            pos += nbytes

        def skip(nbytes: int) -> int:
            nonlocal pos
            at = pos
            if nbytes:
                codes.append(f'{nbytes}x')
            pos += nbytes
            return at

        def head(n: int, nbytes: int) -> None:
            fixed('i', n, 4)
            if counted:
                fixed('i', nbytes, 4)

        sets_bytes = sum(
            len(m.name.encode()) + 1 + 4 + 12 * len(m.positions) for m in f.marker_sets
        )
        head(len(f.marker_sets), sets_bytes)
        self.sets: list[tuple[str, int, int]] = []
        for m in f.marker_sets:
            name = m.name.encode() + b'\0'
            fixed(f'{len(name)}s', name, len(name))
            fixed('i', len(m.positions), 4)
            self.sets.append((m.name, skip(12 * len(m.positions)), len(m.positions)))
        n = len(f.other_markers)
        head(n, 12 * n)
        self.others = (skip(12 * n), n, not counted or n > 0)
        n = len(f.rigid_bodies)
        head(n, _RB.size * n)
        self.rbs = (n_values, n)
        codes.append('i7ffh' * n)
        n_values += 10 * n
        pos += _RB.size * n
        head(0, 0)  # skeletons
        if counted:
            head(0, 0)  # assets
        n = len(f.labeled_markers)
        head(n, _MARKER.size * n)
        self.labeled = (skip(_MARKER.size * n), n, not counted or n > 0)
        head(0, 0)  # force plates
        head(0, 0)  # devices
        codes.append('IIdQQQ')
        self.tail = n_values
        n_values += 6
        pos += _SUFFIX.size
        if f.precision_timestamp is not None:
            codes.append('II')
            n_values += 2
            pos += 8
        codes.append('h')
        self.flags = n_values
        n_values += 1
        pos += 2
        fixed('i', 0, 4)  # the end-of-data marker
        self.st = struct.Struct('<' + ''.join(codes))
        self.size = pos
        self.structure = itemgetter(*structure)
        self.expected = tuple(expected)

    @staticmethod
    def of(f: Frame, version: Version, size: int) -> _FrameLayout | None:
        """The layout of `f` (decoded from `size` bytes), or None for a frame this reader leaves
        to decode_frame: skeletons, assets, force plates or devices in it, or (never seen) a
        layout that does not come to the frame's size."""
        if f.skeletons or f.assets or f.force_plates or f.devices:
            return None
        layout = _FrameLayout(f, version)
        return layout if layout.size == layout.st.size == size else None

    def read(self, payload: bytes) -> Frame | None:
        """The frame, or None when `payload` is not laid out like this layout's frame."""
        v = self.st.unpack_from(payload)
        if self.structure(v) != self.expected:
            return None
        i, n = self.rbs
        rbs = [
            RigidBody(v[k], v[k + 1 : k + 4], v[k + 4 : k + 8], v[k + 8], v[k + 9])
            for k in range(i, i + 10 * n, 10)
        ]
        at, n, lazy = self.others
        others: Sequence[Vec3] = LazyRecords(payload, at, n, _VEC3, _vec3) if lazy else []
        at, n, lazy = self.labeled
        labeled: Sequence[Marker] = LazyRecords(payload, at, n, _MARKER, _marker) if lazy else []
        t, flags = self.tail, self.flags
        return Frame(
            v[0],
            [
                MarkerSetData(name, LazyRecords(payload, at, n, _VEC3, _vec3))
                for name, at, n in self.sets
            ],
            others,
            rbs,
            [],
            [],
            labeled,
            [],
            [],
            v[t],
            v[t + 1],
            v[t + 2],
            v[t + 3],
            v[t + 4],
            v[t + 5],
            v[t + 6 : flags] if flags > t + 6 else None,
            v[flags] & 0xFFFF,
        )


class FrameReader:
    """decode_frame for one stream, at a fraction of its cost: a frame of a length seen before
    is read through that frame's layout when its structure matches (the same model, the same
    markers in view), else decoded in full (and its layout kept). The result is the Frame
    decode_frame gives, and so are its errors (tests/natnet/test_frame_reader.py)."""

    __slots__ = ('version', '_layouts')

    def __init__(self, version: Version) -> None:
        self.version = check_version(version)
        self._layouts: dict[int, _FrameLayout | None] = {}

    def decode(self, payload: bytes) -> Frame:
        size = len(payload)
        layout = self._layouts.get(size)
        if layout is not None:
            f = layout.read(payload)
            if f is not None:
                return f
        f = decode_frame(payload, self.version)
        if len(self._layouts) >= MAX_FRAME_LAYOUTS:
            self._layouts.clear()
        self._layouts[size] = _FrameLayout.of(f, self.version, size)
        return f


# Model definitions ---------------------------------------------------------------------------
def _rd_rb_desc(r: _Reader, version: Version) -> RigidBodyDescription:
    name = r.cstr('rigid body name')
    rid, parent = r.unpack(struct.Struct('<ii'), 'rigid body id/parent')
    offset = r.unpack(_VEC3, 'rigid body offset')
    rot = r.unpack(_QUAT, 'rigid body rotation offset') if version >= (4, 2) else None
    n = r.count('rigid body marker count', 16)
    pos = r.records(n, _VEC3, 'rigid body marker position')
    labels = [r.i32('marker active label') for _ in range(n)]
    names = [r.cstr('marker name') for _ in range(n)] if version >= (4, 0) else None
    return RigidBodyDescription(name, rid, parent, offset, pos, labels, names, rot)


def _rd_desc_body(r: _Reader, t: int, version: Version) -> Description:
    if t == 0:
        name = r.cstr('marker set name')
        n = r.count('marker set name count', 1)
        return MarkerSetDescription(name, [r.cstr('marker name') for _ in range(n)])
    if t == 1:
        return _rd_rb_desc(r, version)
    if t == 2:
        name = r.cstr('skeleton name')
        sid = r.i32('skeleton id')
        n = r.count('skeleton bone count', 33)
        return SkeletonDescription(name, sid, [_rd_rb_desc(r, version) for _ in range(n)])
    if t == 3:
        pid = r.i32('force plate id')
        serial = r.cstr('force plate serial')
        w, ln = r.unpack(struct.Struct('<2f'), 'force plate size')
        origin = r.unpack(_VEC3, 'force plate origin')
        cal = r.floats(144, 'force plate calibration matrix')
        corners = r.floats(12, 'force plate corners')
        ptype, dtype = r.unpack(struct.Struct('<ii'), 'force plate types')
        n = r.count('force plate channel count', 1)
        return ForcePlateDescription(
            pid,
            serial,
            w,
            ln,
            origin,
            cal,
            corners,
            ptype,
            dtype,
            [r.cstr('channel name') for _ in range(n)],
        )
    if t == 4:
        did = r.i32('device id')
        name = r.cstr('device name')
        serial = r.cstr('device serial')
        dtype, ctype = r.unpack(struct.Struct('<ii'), 'device types')
        n = r.count('device channel count', 1)
        return DeviceDescription(
            did, name, serial, dtype, ctype, [r.cstr('channel name') for _ in range(n)]
        )
    if t == 5 and version >= (4, 0):
        name = r.cstr('camera name')
        vals = r.unpack(struct.Struct('<7f'), 'camera pose')
        return CameraDescription(name, vals[:3], vals[3:])
    if t == 6 and version >= (4, 1):
        name = r.cstr('asset name')
        atype, aid = r.unpack(struct.Struct('<ii'), 'asset type/id')
        nrb = r.count('asset rigid body count', 33)
        rbs = [_rd_rb_desc(r, version) for _ in range(nrb)]
        nm = r.count('asset marker count', 1 + _ASSET_MARKER.size)
        markers = []
        for _ in range(nm):
            mname = r.cstr('asset marker name')
            mid, x, y, z, size, params = r.unpack(_ASSET_MARKER, 'asset marker')
            markers.append(AssetMarkerDescription(mname, mid, (x, y, z), size, params))
        return AssetDescription(name, atype, aid, rbs, markers)
    raise NatNetDecodeError(
        f'unknown model description type {t} for NatNet {version[0]}.{version[1]}', r.pos
    )


def decode_modeldef(payload: bytes, version: Version) -> ModelDefinitions:
    version = check_version(version)
    r = _Reader(payload)
    n = r.count('description count', 4)
    out: list[Description] = []
    for _ in range(n):
        t = r.i32('description type')
        if _has_byte_counts(version):
            size = r.i32('description byte count')
            if size < 0 or size > r.remaining():
                raise NatNetDecodeError(f'description byte count {size} out of range', r.pos - 4)
            if t not in range(0, 7):
                out.append(UnknownDescription(t, r.raw(size, 'unknown description')))
                continue
            sub = _Reader(r.buf, r.pos, r.pos + size)
            out.append(_rd_desc_body(sub, t, version))
            if sub.pos != sub.end:
                raise NatNetDecodeError(
                    f'description type {t} used {sub.pos - r.pos} bytes, byte count says {size}',
                    r.pos,
                )
            r.pos = sub.end
        else:
            out.append(_rd_desc_body(r, t, version))
    if r.remaining():
        raise NatNetDecodeError(f'{r.remaining()} trailing bytes after model definitions', r.pos)
    return ModelDefinitions(out)


# Sender blocks -------------------------------------------------------------------------------
def _cut_name(raw: bytes) -> str:
    """Spec pitfall 2: the 256-byte name may carry junk after the first NUL."""
    return raw.split(b'\0', 1)[0].decode('utf-8', 'replace')


def _version4(raw: bytes) -> tuple[int, int, int, int]:
    """A 4-byte version field (major, minor, build, revision)."""
    a, b, c, d = raw
    return (a, b, c, d)


def decode_serverinfo(payload: bytes) -> ServerInfo:
    if len(payload) not in (SENDER_LEN, SERVERINFO_LEN):
        raise NatNetDecodeError(f'server info must be 264 or 279 bytes, got {len(payload)}')
    info = ServerInfo(
        app_name=_cut_name(payload[:256]),
        app_version=_version4(payload[256:260]),
        natnet_version=_version4(payload[260:264]),
    )
    if len(payload) == SENDER_LEN:
        info.clock_hz = None
        return info
    clock, port, mc = struct.unpack_from('<QHB', payload, 264)
    if clock == 0:
        raise NatNetDecodeError('server info reports a 0 Hz clock')
    info.clock_hz, info.data_port, info.multicast = clock, port, bool(mc)
    info.multicast_group = '.'.join(str(b) for b in payload[275:279])
    return info


def decode_connect(payload: bytes) -> ConnectRequest:
    if len(payload) < SENDER_LEN:
        # SDK 3.x Python sample sends "Ping\0"; accept anything.
        return ConnectRequest(
            app_name=_cut_name(payload),
            app_version=(0, 0, 0, 0),
            natnet_version=(0, 0, 0, 0),
            raw=bytes(payload),
        )
    c = ConnectRequest(
        _cut_name(payload[:256]), _version4(payload[256:260]), _version4(payload[260:264])
    )
    if len(payload) >= 265:
        c.subscribed_data_only = bool(payload[264])
    if len(payload) >= 269:
        c.bitstream_version = _version4(payload[265:269])
    return c


def _cstr_payload(payload: bytes, what: str) -> str:
    if not payload or payload[-1:] != b'\0' or b'\0' in payload[:-1]:
        raise NatNetDecodeError(f'{what} must be one NUL-terminated string')
    try:
        return payload[:-1].decode('utf-8')
    except UnicodeDecodeError:
        raise NatNetDecodeError(f'{what} is not valid UTF-8') from None


# --------------------------------------------------------------------------------------------
# Top level
# --------------------------------------------------------------------------------------------
def split_packet(datagram: bytes) -> tuple[int, bytes]:
    """Check the 4-byte header against the datagram length; return (message id, payload).

    One NUL byte past the payload is tolerated: the official NatNet SDK sends its requests as
    the header, the request string and its terminator, so a request without a string (model
    definitions, keep-alive) is a 0-byte header followed by one NUL."""
    if len(datagram) < 4:
        raise NatNetDecodeError(f'datagram of {len(datagram)} bytes is shorter than the header')
    mid, n = HEADER.unpack_from(datagram, 0)
    if n == len(datagram) - 5 and datagram[-1] == 0:
        return mid, memoryview(datagram)[4:-1].tobytes()
    if n != len(datagram) - 4:
        raise NatNetDecodeError(
            f'header says {n} payload bytes but the datagram carries {len(datagram) - 4}'
        )
    return mid, memoryview(datagram)[4:].tobytes()


def _expect_len(payload: bytes, n: int, what: str) -> None:
    if len(payload) != n:
        raise NatNetDecodeError(f'{what} payload must be {n} bytes, got {len(payload)}')


def decode_message(
    datagram: bytes, version: Version | None = None, frames: FrameReader | None = None
) -> Message:
    """Decode one datagram. ``version`` is needed for frames and model definitions; `frames`,
    a FrameReader of that version, decodes the frames of a stream."""
    mid, p = split_packet(datagram)
    if mid == MessageId.FRAMEOFDATA or mid == MessageId.MODELDEF:
        if version is None:
            raise NatNetDecodeError(
                'frame or model definitions received before server info (NatNet version unknown)'
            )
        if mid == MessageId.MODELDEF:
            return decode_modeldef(p, version)
        if frames is not None and frames.version == version:
            return frames.decode(p)
        return decode_frame(p, version)
    if mid == MessageId.SERVERINFO:
        return decode_serverinfo(p)
    if mid in (MessageId.CONNECT, MessageId.DISCOVERY):
        return decode_connect(p)
    if mid == MessageId.REQUEST:
        try:
            return Request(_cstr_payload(p, 'request'))
        except NatNetDecodeError:
            return Request(_cut_name(p), raw=p)
    if mid == MessageId.RESPONSE:
        return Response(p)  # 4-byte number, a string, or binary (Motive's service replies)
    if mid == MessageId.MESSAGESTRING:
        return MessageString(_cstr_payload(p, 'message string'))
    if mid == MessageId.ECHOREQUEST:
        _expect_len(p, 8, 'echo request')
        return EchoRequest(_U64.unpack(p)[0])
    if mid == MessageId.ECHORESPONSE:
        _expect_len(p, 16, 'echo response')
        return EchoResponse(*struct.unpack('<QQ', p))
    if mid in UNRECOGNIZED_IDS:
        return Empty(MessageId.UNRECOGNIZED_REQUEST, p)
    if mid in (
        MessageId.REQUEST_MODELDEF,
        MessageId.REQUEST_FRAMEOFDATA,
        MessageId.DISCONNECT,
        MessageId.KEEPALIVE,
        MessageId.DISCONNECTBYTIMEOUT,
    ):
        _expect_len(p, 0, f'message {mid}')
        return Empty(mid)
    raise NatNetDecodeError(f'unknown message id {mid}')


# --------------------------------------------------------------------------------------------
# Encoders
# --------------------------------------------------------------------------------------------
def packet(message_id: int, payload: bytes = b'') -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f'payload of {len(payload)} bytes exceeds the NatNet maximum')
    return HEADER.pack(int(message_id), len(payload)) + payload


def _cs(s: str) -> bytes:
    return s.encode('utf-8') + b'\0'


def _cs_list(names: Sequence[str]) -> bytes:
    """A count, then that many NUL-terminated strings (marker and channel names)."""
    return _I32.pack(len(names)) + b''.join(_cs(s) for s in names)


def _enc_section(parts: list[bytes], items: Sequence, enc_one, version: Version) -> None:
    body = b''.join(enc_one(x) for x in items)
    parts.append(_I32.pack(len(items)))
    if _has_byte_counts(version):
        parts.append(_I32.pack(len(body)))
    parts.append(body)


def _enc_rb(b: RigidBody) -> bytes:
    return _RB.pack(b.id, *b.position, *b.orientation, b.mean_error, _s16(b.params))


def _s16(v: int) -> int:
    v &= 0xFFFF
    return v - 0x10000 if v >= 0x8000 else v


def _enc_marker(m: Marker) -> bytes:
    return _MARKER.pack(m.id, *m.position, m.size, _s16(m.params), m.residual)


def _enc_analog(a: AnalogData) -> bytes:
    out = [_I32.pack(a.id), _I32.pack(len(a.channels))]
    for ch in a.channels:
        out.append(_I32.pack(len(ch)) + struct.pack(f'<{len(ch)}f', *ch))
    return b''.join(out)


def encode_frame(f: Frame, version: Version) -> bytes:
    version = check_version(version)
    parts = [_I32.pack(f.frame_number)]
    _enc_section(
        parts,
        f.marker_sets,
        lambda m: (
            _cs(m.name)
            + _I32.pack(len(m.positions))
            + b''.join(_VEC3.pack(*p) for p in m.positions)
        ),
        version,
    )
    _enc_section(parts, f.other_markers, lambda p: _VEC3.pack(*p), version)
    _enc_section(parts, f.rigid_bodies, _enc_rb, version)
    _enc_section(
        parts,
        f.skeletons,
        lambda s: _I32.pack(s.id) + _I32.pack(len(s.bones)) + b''.join(_enc_rb(b) for b in s.bones),
        version,
    )
    if version >= (4, 1):
        _enc_section(
            parts,
            f.assets,
            lambda a: (
                _I32.pack(a.id)
                + _I32.pack(len(a.rigid_bodies))
                + b''.join(_enc_rb(b) for b in a.rigid_bodies)
                + _I32.pack(len(a.markers))
                + b''.join(_enc_marker(m) for m in a.markers)
            ),
            version,
        )
    _enc_section(parts, f.labeled_markers, _enc_marker, version)
    _enc_section(parts, f.force_plates, _enc_analog, version)
    _enc_section(parts, f.devices, _enc_analog, version)
    parts.append(_SUFFIX.pack(*(getattr(f, name) for name in _SUFFIX_FIELDS)))
    if f.precision_timestamp is not None:
        parts.append(struct.pack('<II', *f.precision_timestamp))
    parts.append(_I16.pack(_s16(f.params)) + _I32.pack(0))
    return b''.join(parts)


def _enc_rb_desc(d: RigidBodyDescription, version: Version) -> bytes:
    n = len(d.marker_positions)
    labels = list(d.marker_labels) or [0] * n
    out = [
        _cs(d.name),
        struct.pack('<ii', d.id, d.parent_id),
        _VEC3.pack(*d.offset),
    ]
    if version >= (4, 2):
        out.append(_QUAT.pack(*(d.orientation or (0.0, 0.0, 0.0, 1.0))))
    out += [
        _I32.pack(n),
        b''.join(_VEC3.pack(*p) for p in d.marker_positions),
        struct.pack(f'<{n}i', *labels),
    ]
    if version >= (4, 0):
        names = d.marker_names if d.marker_names is not None else [''] * n
        out.append(b''.join(_cs(s) for s in names))
    return b''.join(out)


def _enc_desc_body(d: Description, version: Version) -> bytes:
    if isinstance(d, MarkerSetDescription):
        return _cs(d.name) + _cs_list(d.marker_names)
    if isinstance(d, RigidBodyDescription):
        return _enc_rb_desc(d, version)
    if isinstance(d, SkeletonDescription):
        return (
            _cs(d.name)
            + struct.pack('<ii', d.id, len(d.bones))
            + b''.join(_enc_rb_desc(b, version) for b in d.bones)
        )
    if isinstance(d, ForcePlateDescription):
        return (
            _I32.pack(d.id)
            + _cs(d.serial)
            + struct.pack('<2f', d.width, d.length)
            + _VEC3.pack(*d.origin)
            + struct.pack('<144f', *d.cal_matrix)
            + struct.pack('<12f', *d.corners)
            + struct.pack('<ii', d.plate_type, d.channel_data_type)
            + _cs_list(d.channel_names)
        )
    if isinstance(d, DeviceDescription):
        return (
            _I32.pack(d.id)
            + _cs(d.name)
            + _cs(d.serial)
            + struct.pack('<ii', d.device_type, d.channel_data_type)
            + _cs_list(d.channel_names)
        )
    if isinstance(d, CameraDescription):
        if version < (4, 0):
            raise ValueError('camera descriptions exist from NatNet 4.0')
        return _cs(d.name) + struct.pack('<7f', *d.position, *d.orientation)
    if isinstance(d, AssetDescription):
        if version < (4, 1):
            raise ValueError('asset descriptions exist from NatNet 4.1')
        return (
            _cs(d.name)
            + struct.pack('<iii', d.asset_type, d.id, len(d.rigid_bodies))
            + b''.join(_enc_rb_desc(b, version) for b in d.rigid_bodies)
            + _I32.pack(len(d.markers))
            + b''.join(
                _cs(m.name) + _ASSET_MARKER.pack(m.id, *m.position, m.size, _s16(m.params))
                for m in d.markers
            )
        )
    if isinstance(d, UnknownDescription):
        if version < (4, 1):
            raise ValueError('unknown descriptions can only be sent with 4.1 byte counts')
        return d.body
    raise TypeError(f'not a model description: {d!r}')


def encode_modeldef(m: ModelDefinitions, version: Version) -> bytes:
    version = check_version(version)
    parts = [_I32.pack(len(m.descriptions))]
    for d in m.descriptions:
        body = _enc_desc_body(d, version)
        parts.append(_I32.pack(d.type_id))
        if _has_byte_counts(version):
            parts.append(_I32.pack(len(body)))
        parts.append(body)
    return b''.join(parts)


def _name_field(name: str) -> bytes:
    b = name.encode('utf-8')[: SENDER_NAME_LEN - 1]
    return b + b'\0' * (SENDER_NAME_LEN - len(b))


def encode_serverinfo(s: ServerInfo) -> bytes:
    out = _name_field(s.app_name) + bytes(s.app_version) + bytes(s.natnet_version)
    if s.clock_hz is None:
        return out
    group = bytes(int(x) for x in s.multicast_group.split('.'))
    return out + struct.pack('<QHB', s.clock_hz, s.data_port, int(s.multicast)) + group


def encode_connect(c: ConnectRequest) -> bytes:
    if c.raw is not None:
        return c.raw
    out = _name_field(c.app_name) + bytes(c.app_version) + bytes(c.natnet_version)
    if c.subscribed_data_only is not None or c.bitstream_version is not None:
        out += bytes([int(bool(c.subscribed_data_only))])
        out += bytes(c.bitstream_version or (0, 0, 0, 0))
    return out


def encode_message(msg: Message, version: Version | None = None) -> bytes:
    """Whole datagram (header + payload) for any message dataclass."""
    if isinstance(msg, Frame | ModelDefinitions):
        if version is None:
            raise ValueError('encoding a frame or model definitions needs the NatNet version')
        if isinstance(msg, Frame):
            return packet(MessageId.FRAMEOFDATA, encode_frame(msg, version))
        return packet(MessageId.MODELDEF, encode_modeldef(msg, version))
    if isinstance(msg, ServerInfo):
        return packet(MessageId.SERVERINFO, encode_serverinfo(msg))
    if isinstance(msg, ConnectRequest):
        return packet(MessageId.CONNECT, encode_connect(msg))
    if isinstance(msg, Request):
        return packet(MessageId.REQUEST, msg.raw if msg.raw is not None else _cs(msg.command))
    if isinstance(msg, Response):
        return packet(MessageId.RESPONSE, msg.data)
    if isinstance(msg, EchoRequest):
        return packet(MessageId.ECHOREQUEST, _U64.pack(msg.client_time))
    if isinstance(msg, EchoResponse):
        return packet(MessageId.ECHORESPONSE, struct.pack('<QQ', msg.client_time, msg.server_ticks))
    if isinstance(msg, MessageString):
        return packet(MessageId.MESSAGESTRING, _cs(msg.text))
    if isinstance(msg, Empty):
        return packet(msg.message_id, msg.payload)
    raise TypeError(f'cannot encode {msg!r}')
