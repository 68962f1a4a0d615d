"""Pre-serialised publishing for the 120 Hz hot paths.

On every ``publish(msg)`` rclpy converts the Python message to C and serialises it (6–9 µs for a
PoseStamped on this machine), while ``publish(bytes)`` hands already serialised bytes to the
middleware (≈1–2.5 µs). The hot-path messages have a fixed layout (same frame id, names and array
lengths every time) in which only a few numbers change, so a writer keeps rclpy's own
serialisation of a prototype as a template and packs the changing numbers into it at the offsets
given by the CDR rules.

Each writer checks itself when it is made: it packs probe values and reads them back with
rclpy's deserialiser. If the message differs (another RMW or CDR encoding), it publishes message
objects instead, so it is never wrong, only sometimes not faster. Subscribers, recorders and
``ros2 bag`` see ordinary messages either way.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from rclpy.publisher import Publisher
from rclpy.serialization import deserialize_message, serialize_message

_HEADER = 4  # encapsulation header (representation id + options) before the payload
_STAMP = struct.Struct('<iI')


class _Layout:
    """Walks a classic (XCDR1) CDR payload: primitives are aligned to their size, counted from
    the end of the encapsulation header; strings are a uint32 length (with the NUL), the bytes
    and a NUL; sequences are a uint32 count then the elements."""

    def __init__(self):
        self.pos = 0
        self.padding: list[tuple[int, int]] = []  # (start, end) in the whole buffer

    def take(self, size: int, align: int) -> int:
        """Reserve `size` bytes aligned to `align`; return their offset in the whole buffer."""
        pad = -self.pos % align
        if pad:
            self.padding.append((self.pos + _HEADER, self.pos + _HEADER + pad))
        self.pos += pad
        offset = self.pos + _HEADER
        self.pos += size
        return offset

    def string(self, text: str) -> None:
        self.take(4, 4)
        self.pos += len(text.encode()) + 1

    def doubles(self, n: int) -> int:
        """A float64 sequence of length n (count, then data); return the data offset."""
        self.take(4, 4)
        return self.take(8 * n, 8) if n else self.pos + _HEADER


_D3 = struct.Struct('<3d')
_D4 = struct.Struct('<4d')


def _around(
    template: bytes | bytearray, fields: Sequence[tuple[int, str]]
) -> tuple[struct.Struct, tuple]:
    """One struct for a whole message: the changing fields, given in order as (offset, struct
    codes), with the template's own bytes (the header, the fixed fields, the padding as rclpy
    serialised it) between them as 's' items; returns it and those fixed byte runs. One pack
    call then makes the message's bytes (a third of the cost of packing into a copy)."""
    fmt, fixed, at = '<', [], 0
    for offset, codes in fields:
        fixed.append(bytes(template[at:offset]))
        fmt += f'{offset - at}s{codes}'
        at = offset + struct.calcsize('<' + codes)
    fixed.append(bytes(template[at:]))
    return struct.Struct(f'{fmt}{len(template) - at}s'), tuple(fixed)


class _Writer:
    """A publisher with a template. Subclasses give `_encode(*args) -> bytes` (pack into the
    template) and `_message(*args)` (the equivalent message: the self-check and the fallback);
    `fields` (offset, struct codes) of the changing fields: `_encode` packs them with the
    template's fixed bytes by one call of `_whole` (`_around`)."""

    def __init__(
        self,
        publisher,
        prototype,
        probe: Sequence,
        layout: _Layout,
        fields: Sequence[tuple[int, str]],
    ):
        self.publisher = publisher
        # rclpy's Publisher.publish(bytes) ends in the binding's publish_raw; calling it directly
        # saves the wrapper's type checks (≈1.5 µs). Distros without it use the public call, and
        # so does a publisher with a publish of its own (equimus_ros.qos.TolerantPublisher: a
        # publication DDS refuses is counted, not raised).
        own = getattr(type(publisher), 'publish', None) is not Publisher.publish
        handle_raw = getattr(getattr(publisher, 'handle', None), 'publish_raw', None)
        self._publish_raw = publisher.publish if own or handle_raw is None else handle_raw
        # serialize_message may append alignment bytes after the last field (4 for JointState);
        # on the wire a message ends at its last field, and strict readers (rosbags) insist.
        self._buf = bytearray(serialize_message(prototype)[: _HEADER + layout.pos])
        # Its alignment padding as left in memory: zeroed, so equal messages are equal bytes
        # (a recording compared byte for byte, tests/bringup/test_sim_graph.py).
        for start, end in layout.padding:
            self._buf[start:end] = bytes(end - start)
        self._whole, self._fixed = _around(self._buf, fields)
        self.packed = self._check(probe)

    # The two hooks every writer gives (the signatures differ per message type).
    def _encode(self, *args: Any, **kwargs: Any) -> bytes:
        raise NotImplementedError

    def _message(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def _check(self, probe) -> bool:
        # Compare decoded messages and sizes, not bytes: the serialiser leaves alignment padding
        # uninitialised, so equal messages may differ there.
        try:
            packed, msg = self._encode(*probe), self._message(*probe)
            return (
                len(packed) <= len(serialize_message(msg))
                and deserialize_message(packed, type(msg)) == msg
            )
        except Exception:  # any failure of the check means: publish message objects
            return False

    def write(self, *args) -> None:
        if self.packed:
            # A `publish` set on the publisher itself is a composing process's hand-off
            # (sim_graph's, set at any time): it takes the bytes, not the middleware.
            (self.publisher.__dict__.get('publish') or self._publish_raw)(self._encode(*args))
        else:
            self.publisher.publish(self._message(*args))


class ClockWriter(_Writer):
    """rosgraph_msgs/Clock: ``write(t_ns)``."""

    def __init__(self, publisher):
        from rosgraph_msgs.msg import Clock

        lay = _Layout()
        stamp = lay.take(8, 4)
        super().__init__(publisher, Clock(), [1_700_000_003_123_456_789], lay, [(stamp, 'iI')])

    def _encode(self, t_ns: int) -> bytes:
        head, tail = self._fixed
        sec, nanosec = divmod(int(t_ns), 1_000_000_000)
        return self._whole.pack(head, sec, nanosec, tail)

    def _message(self, t_ns: int):
        from rosgraph_msgs.msg import Clock

        msg = Clock()
        msg.clock.sec, msg.clock.nanosec = divmod(int(t_ns), 1_000_000_000)
        return msg


class PoseWriter(_Writer):
    """geometry_msgs/PoseStamped with a fixed frame id: ``write(t_ns, (x, y, z), (w, x, y, z))``
    (quaternion scalar first, as MuJoCo holds it; the message's order is x, y, z, w)."""

    def __init__(self, publisher, frame_id: str):
        from geometry_msgs.msg import PoseStamped

        self.frame_id = frame_id
        lay = _Layout()
        stamp = lay.take(8, 4)
        lay.string(frame_id)
        pose = lay.take(56, 8)  # position then orientation: seven doubles in a row
        proto = PoseStamped()
        proto.header.frame_id = frame_id
        super().__init__(
            publisher,
            proto,
            [17_999_999_999, (0.1, -2.5, 3e-7), (0.625, 0.5, -0.5, 0.25)],
            lay,
            [(stamp, 'iI'), (pose, '7d')],
        )

    def _encode(self, t_ns: int, position, quat_wxyz) -> bytes:
        head, mid, tail = self._fixed
        sec, nanosec = divmod(int(t_ns), 1_000_000_000)
        px, py, pz = position
        w, x, y, z = quat_wxyz
        return self._whole.pack(head, sec, nanosec, mid, px, py, pz, x, y, z, w, tail)

    def _message(self, t_ns: int, position, quat_wxyz):
        from geometry_msgs.msg import PoseStamped

        msg = PoseStamped()
        msg.header.frame_id = self.frame_id
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(t_ns), 1_000_000_000)
        p, q = msg.pose.position, msg.pose.orientation
        p.x, p.y, p.z = (float(v) for v in position)
        q.w, q.x, q.y, q.z = (float(v) for v in quat_wxyz)
        return msg


def _joint_state_head(lay: _Layout, frame_id: str, names: Sequence[str]) -> int:
    """Lay out a JointState's header and names; the stamp's offset (the fields that vary)."""
    stamp = lay.take(8, 4)
    lay.string(frame_id)
    lay.take(4, 4)
    for name in names:
        lay.string(name)
    return stamp


class JointStateWriter(_Writer):
    """sensor_msgs/JointState with fixed names, positions and velocities, no efforts:
    ``write(t_ns, positions, velocities)``."""

    def __init__(self, publisher, names: Sequence[str], frame_id: str = ''):
        from sensor_msgs.msg import JointState

        self.names, self.frame_id = list(names), frame_id
        n = len(self.names)
        lay = _Layout()
        stamp = _joint_state_head(lay, frame_id, self.names)
        pos = lay.doubles(n)
        vel = lay.doubles(n)
        lay.doubles(0)
        proto = JointState(name=self.names, position=[0.0] * n, velocity=[0.0] * n)
        proto.header.frame_id = frame_id
        super().__init__(
            publisher,
            proto,
            [5_000_000_042, [0.5 + i for i in range(n)], [-1.25 * i for i in range(n)]],
            lay,
            [(stamp, 'iI'), (pos, f'{n}d'), (vel, f'{n}d')],
        )

    def _encode(self, t_ns: int, position, velocity) -> bytes:
        head, names, count, tail = self._fixed
        sec, nanosec = divmod(int(t_ns), 1_000_000_000)
        return self._whole.pack(head, sec, nanosec, names, *position, count, *velocity, tail)

    def _message(self, t_ns: int, position, velocity):
        from sensor_msgs.msg import JointState

        msg = JointState(
            name=self.names,
            position=[float(v) for v in position],
            velocity=[float(v) for v in velocity],
        )
        msg.header.frame_id = self.frame_id
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(t_ns), 1_000_000_000)
        return msg


class PressureStateWriter(_Writer):
    """sensor_msgs/JointState with fixed names and efforts only (the stamped pressures, kPa):
    ``write(t_ns, efforts)``."""

    def __init__(self, publisher, names: Sequence[str], frame_id: str = ''):
        from sensor_msgs.msg import JointState

        self.names, self.frame_id = list(names), frame_id
        n = len(self.names)
        lay = _Layout()
        stamp = _joint_state_head(lay, frame_id, self.names)
        lay.doubles(0)
        lay.doubles(0)
        effort = lay.doubles(n)
        proto = JointState(name=self.names, effort=[0.0] * n)
        proto.header.frame_id = frame_id
        super().__init__(
            publisher,
            proto,
            [5_000_000_042, [0.5 + 3 * i for i in range(n)]],
            lay,
            [(stamp, 'iI'), (effort, f'{n}d')],
        )

    def _encode(self, t_ns: int, effort) -> bytes:
        head, mid, tail = self._fixed
        sec, nanosec = divmod(int(t_ns), 1_000_000_000)
        return self._whole.pack(head, sec, nanosec, mid, *effort, tail)

    def _message(self, t_ns: int, effort):
        from sensor_msgs.msg import JointState

        msg = JointState(name=self.names, effort=[float(v) for v in effort])
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(t_ns), 1_000_000_000)
        msg.header.frame_id = self.frame_id
        return msg


class ArrayWriter(_Writer):
    """std_msgs/Float64MultiArray with the prototype's layout and length: ``write(values)``."""

    def __init__(self, publisher, prototype):
        n = len(prototype.data)
        lay = _Layout()
        lay.take(4, 4)
        for dim in prototype.layout.dim:
            lay.string(dim.label)
            lay.take(8, 4)
        lay.take(4, 4)
        data = lay.doubles(n)
        self._layout = prototype.layout
        super().__init__(
            publisher, prototype, [[0.5 - 3 * i for i in range(n)]], lay, [(data, f'{n}d')]
        )

    def _encode(self, values) -> bytes:
        head, tail = self._fixed
        return self._whole.pack(head, *values, tail)

    def _message(self, values):
        from std_msgs.msg import Float64MultiArray

        return Float64MultiArray(layout=self._layout, data=[float(v) for v in values])


# ----------------------------------------------------------------------------------------------
# Message objects to bytes: what a recorder in the publishing process writes.

_U32 = struct.Struct('<I')


class _Builder:
    """Writes a whole classic CDR payload into a zeroed buffer (padding is always zero, so equal
    messages give equal bytes) and remembers where the changing numbers go."""

    def __init__(self) -> None:
        self.lay = _Layout()
        self.parts: list[tuple[int, bytes]] = []

    def u32(self, value: int) -> None:
        self.parts.append((self.lay.take(4, 4), _U32.pack(value)))

    def string(self, text: str) -> None:
        raw = text.encode() + b'\0'
        self.u32(len(raw))
        self.parts.append((self.lay.take(len(raw), 1), raw))

    def stamp(self) -> int:
        return self.lay.take(8, 4)

    def doubles(self, n: int) -> int:
        self.u32(n)
        return self.lay.take(8 * n, 8) if n else 0

    def buffer(self) -> bytearray:
        buf = bytearray(_HEADER + self.lay.pos)
        buf[1] = 1  # CDR_LE, options 0
        for offset, raw in self.parts:
            buf[offset : offset + len(raw)] = raw
        return buf


def _stamp_of(stamp: Any) -> tuple[int, int]:
    return stamp.sec, stamp.nanosec


class _Template:
    """One shape of one message type: the bytes with the fixed parts written, and `fill`, which
    packs a message's changing numbers into a copy."""

    def __init__(self, buf: bytearray, fill: Any) -> None:
        self.buf, self.fill = buf, fill

    def encode(self, msg: Any) -> bytes:
        buf = self.buf[:]  # a copy per call: two threads may publish on one topic
        self.fill(buf, msg)
        return bytes(buf)


def _clock(msg: Any) -> _Template:
    b = _Builder()
    at = b.stamp()

    def fill(buf: bytearray, m: Any) -> None:
        _STAMP.pack_into(buf, at, m.clock.sec, m.clock.nanosec)

    return _Template(b.buffer(), fill)


def _pose_stamped(msg: Any) -> _Template:
    b = _Builder()
    at = b.stamp()
    b.string(msg.header.frame_id)
    pos, quat = b.lay.take(24, 8), b.lay.take(32, 8)

    def fill(buf: bytearray, m: Any) -> None:
        s, p, q = m.header.stamp, m.pose.position, m.pose.orientation
        _STAMP.pack_into(buf, at, s.sec, s.nanosec)
        _D3.pack_into(buf, pos, p.x, p.y, p.z)
        _D4.pack_into(buf, quat, q.x, q.y, q.z, q.w)

    return _Template(b.buffer(), fill)


def _joint_state(msg: Any) -> _Template:
    b = _Builder()
    at = b.stamp()
    b.string(msg.header.frame_id)
    b.u32(len(msg.name))
    for name in msg.name:
        b.string(name)
    arrays = [
        (field, b.doubles(n), struct.Struct(f'<{n}d'))
        for field, n in (
            ('position', len(msg.position)),
            ('velocity', len(msg.velocity)),
            ('effort', len(msg.effort)),
        )
    ]
    filled = [(f, off, st) for f, off, st in arrays if st.size]

    def fill(buf: bytearray, m: Any) -> None:
        s = m.header.stamp
        _STAMP.pack_into(buf, at, s.sec, s.nanosec)
        for field, offset, st in filled:
            st.pack_into(buf, offset, *getattr(m, field))

    return _Template(b.buffer(), fill)


def _float64_array(msg: Any) -> _Template:
    b = _Builder()
    b.u32(len(msg.layout.dim))
    for dim in msg.layout.dim:
        b.string(dim.label)
        b.u32(dim.size)
        b.u32(dim.stride)
    b.u32(msg.layout.data_offset)
    n = len(msg.data)
    at, st = b.doubles(n), struct.Struct(f'<{n}d')

    def fill(buf: bytearray, m: Any) -> None:
        st.pack_into(buf, at, *m.data)

    return _Template(b.buffer(), fill)


def _tf_message(msg: Any) -> _Template:
    b = _Builder()
    b.u32(len(msg.transforms))
    offsets = []
    for t in msg.transforms:
        at = b.stamp()
        b.string(t.header.frame_id)
        b.string(t.child_frame_id)
        offsets.append((at, b.lay.take(24, 8), b.lay.take(32, 8)))

    def fill(buf: bytearray, m: Any) -> None:
        for t, (at, tr_at, rot_at) in zip(m.transforms, offsets, strict=True):
            s, tr, rot = t.header.stamp, t.transform.translation, t.transform.rotation
            _STAMP.pack_into(buf, at, s.sec, s.nanosec)
            _D3.pack_into(buf, tr_at, tr.x, tr.y, tr.z)
            _D4.pack_into(buf, rot_at, rot.x, rot.y, rot.z, rot.w)

    return _Template(b.buffer(), fill)


def _dims(msg: Any) -> tuple:
    layout = msg.layout
    return (
        tuple((d.label, d.size, d.stride) for d in layout.dim),
        layout.data_offset,
        len(msg.data),
    )


# type name -> (shape key: everything but the changing numbers, template maker)
_KINDS: dict[str, tuple[Any, Any]] = {
    'rosgraph_msgs/Clock': (lambda m: None, _clock),
    'geometry_msgs/PoseStamped': (lambda m: m.header.frame_id, _pose_stamped),
    'sensor_msgs/JointState': (
        lambda m: (
            m.header.frame_id,
            tuple(m.name),
            len(m.position),
            len(m.velocity),
            len(m.effort),
        ),
        _joint_state,
    ),
    'std_msgs/Float64MultiArray': (_dims, _float64_array),
    'tf2_msgs/TFMessage': (
        lambda m: tuple((t.header.frame_id, t.child_frame_id) for t in m.transforms),
        _tf_message,
    ),
}


class MessageEncoder:
    """``encode(msg) -> bytes`` for one message type: rclpy's serialisation (same decoded
    message; trailing and padding bytes zero), 3-10x faster for the hot-path types.

    rclpy converts every field of a message object to C before serialising it (20 µs for a
    TFMessage on this machine, loaded). The hot-path messages come in a few shapes (frame ids,
    names, array lengths) with only their numbers changing, so the encoder keeps one template per
    shape and packs the numbers into a copy. Each new shape is checked once against rclpy's
    deserialiser; a type without a template, or a shape that fails the check, is serialised by
    rclpy, so it is never wrong, only sometimes not faster.
    """

    def __init__(self, msg_type: type) -> None:
        name = f'{msg_type.__module__.split(".")[0]}/{msg_type.__name__}'
        kind = _KINDS.get(name)
        self._key: Callable[[Any], Any] | None = None if kind is None else kind[0]
        self._make: Callable[[Any], _Template] | None = None if kind is None else kind[1]
        self._templates: dict[Any, _Template | None] = {}

    def encode(self, msg: Any) -> bytes:
        if self._key is None:
            return serialize_message(msg)
        key = self._key(msg)
        if key in self._templates:
            template = self._templates[key]
        else:
            template = self._templates[key] = self._checked(msg)
        if template is None:
            return serialize_message(msg)
        return template.encode(msg)

    def _checked(self, msg: Any) -> _Template | None:
        try:
            assert self._make is not None
            template = self._make(msg)
            return template if deserialize_message(template.encode(msg), type(msg)) == msg else None
        except Exception:  # any failure of the check means: serialise with rclpy
            return None


class TransformsWriter:
    """tf2_msgs/TFMessage bytes for fixed (parent, child) frame pairs, from plain numbers:
    ``encode([(t_ns, (x, y, z), (qx, qy, qz, qw)), ...])`` (one entry per pair).

    For the 120 Hz /tf of the state_publisher: no message objects are built (each field set on
    a generated message costs a type check). The template is written here with zero padding,
    so equal transforms give equal bytes. `ok` is False if the bytes do not decode to the
    equivalent message (then publish message objects)."""

    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        self.pairs = list(pairs)
        b = _Builder()
        b.u32(len(self.pairs))
        self._at = []
        for parent, child in self.pairs:
            stamp = b.stamp()
            b.string(parent)
            b.string(child)
            self._at.append((stamp, b.lay.take(24, 8), b.lay.take(32, 8)))
        self._buf = b.buffer()
        probe = [
            (17_999_999_999 + i, (0.1, -2.5, 3e-7), (0.625, 0.5, -0.5, 0.25))
            for i in range(len(self.pairs))
        ]
        try:
            msg = self.message(probe)
            self.ok = deserialize_message(self.encode(probe), type(msg)) == msg
        except Exception:  # any failure of the check means: publish message objects
            self.ok = False

    def encode(self, transforms: Sequence) -> bytes:
        buf = self._buf[:]  # a copy per call: nothing shared between callers
        for (stamp, tr, rot), (t_ns, xyz, quat) in zip(self._at, transforms, strict=True):
            _STAMP.pack_into(buf, stamp, *divmod(int(t_ns), 1_000_000_000))
            _D3.pack_into(buf, tr, *xyz)
            _D4.pack_into(buf, rot, *quat)
        return bytes(buf)

    def message(self, transforms: Sequence) -> Any:
        """The equivalent TFMessage (the self-check and the fallback)."""
        from geometry_msgs.msg import TransformStamped
        from tf2_msgs.msg import TFMessage

        out = []
        for (parent, child), (t_ns, xyz, quat) in zip(self.pairs, transforms, strict=True):
            t = TransformStamped()
            t.header.stamp.sec, t.header.stamp.nanosec = divmod(int(t_ns), 1_000_000_000)
            t.header.frame_id, t.child_frame_id = parent, child
            tr, rot = t.transform.translation, t.transform.rotation
            tr.x, tr.y, tr.z = (float(v) for v in xyz)
            rot.x, rot.y, rot.z, rot.w = (float(v) for v in quat)
            out.append(t)
        return TFMessage(transforms=out)
