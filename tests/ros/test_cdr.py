"""equimus_ros.cdr: pre-serialised hot-path messages are byte-identical to rclpy's serialiser,
arrive as ordinary messages over real DDS, and fall back to message objects when the check fails."""

import math
import random
import time

import pytest

rclpy = pytest.importorskip('rclpy')

from geometry_msgs.msg import PoseStamped  # noqa: E402
from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray, MultiArrayDimension  # noqa: E402

from equimus_ros.cdr import (  # noqa: E402
    ArrayWriter,
    ClockWriter,
    JointStateWriter,
    PoseWriter,
    PressureStateWriter,
)


class Captured:
    """A stand-in publisher that keeps what it is given (no `handle`: the public path)."""

    def __init__(self):
        self.sent = []

    def publish(self, item):
        self.sent.append(item)


def _array_proto(n, labelled=True):
    m = Float64MultiArray(data=[0.0] * n)
    if labelled:
        m.layout.dim = [MultiArrayDimension(label='maa,baa', size=n, stride=n)]
    return m


def _writers():
    return [
        (ClockWriter(Captured()), lambda r: (r.randrange(0, 2 * 10**18),)),
        (
            PoseWriter(Captured(), 'mocap'),
            lambda r: (
                r.randrange(0, 2 * 10**18),
                [r.uniform(-5, 5) for _ in range(3)],
                [r.uniform(-1, 1) for _ in range(4)],
            ),
        ),
        (
            PoseWriter(Captured(), 'a_longer_frame_ïd'),
            lambda r: (r.randrange(0, 10**12), [math.nan] * 3, [math.nan] * 4),
        ),
        (
            JointStateWriter(Captured(), ['hip', 'knee']),
            lambda r: (
                r.randrange(0, 10**15),
                [r.gauss(0, 2) for _ in range(2)],
                [r.gauss(0, 9) for _ in range(2)],
            ),
        ),
        (
            JointStateWriter(Captured(), ['a', 'bb', 'ccc'], frame_id='mocap'),
            lambda r: (
                r.randrange(0, 10**15),
                [r.gauss(0, 2) for _ in range(3)],
                [r.gauss(0, 9) for _ in range(3)],
            ),
        ),
        (
            PressureStateWriter(Captured(), ['maa', 'baa']),
            lambda r: (r.randrange(0, 10**15), [r.uniform(0, 50) for _ in range(2)]),
        ),
        (
            ArrayWriter(Captured(), _array_proto(2)),
            lambda r: ([r.uniform(0, 50) for _ in range(2)],),
        ),
        (
            ArrayWriter(Captured(), _array_proto(3, labelled=False)),
            lambda r: ([r.uniform(-1e6, 1e6) for _ in range(3)],),
        ),
    ]


def _nan_equal(a, b):
    """Message equality where NaN equals NaN (untracked poses are all-NaN)."""
    return repr(a) == repr(b)


def test_every_writer_packs_what_rclpy_serialises():
    """The same decoded message; bytes may differ in padding, which rclpy leaves uninitialised,
    and in the alignment bytes serialize_message appends after the last field."""
    rng = random.Random(7)
    for writer, draw in _writers():
        assert writer.packed, type(writer).__name__
        for _ in range(200):
            args = draw(rng)
            packed, msg = writer._encode(*args), writer._message(*args)
            # up to 8: after a JointState ending in a double sequence it appends 8 bytes
            assert 0 <= len(serialize_message(msg)) - len(packed) <= 8, (writer, args)
            back = deserialize_message(packed, type(msg))
            assert back == msg or _nan_equal(back, msg), (writer, args)


def test_packed_messages_end_at_their_last_field_for_strict_readers():
    """rosbags (what `equimus` reads bags with, like Foxglove) rejects trailing bytes, which
    serialize_message leaves after a JointState; the recorder stores what was published."""
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    rng = random.Random(3)
    for writer, draw in _writers():
        args = draw(rng)
        msg = writer._message(*args)
        name = type(msg).__module__.split('.')[0] + '/msg/' + type(msg).__name__
        decoded = store.deserialize_cdr(writer._encode(*args), name)
        assert decoded.__msgtype__ == name


def test_packed_bytes_read_back_as_the_values_written():
    w = PoseWriter(Captured(), 'mocap')
    msg = deserialize_message(
        w._encode(12_345_678_901, (1.0, -2.0, 3.5), (0.5, 0.1, -0.2, 0.3)), PoseStamped
    )
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (12, 345_678_901)
    assert msg.header.frame_id == 'mocap'
    p, q = msg.pose.position, msg.pose.orientation
    assert (p.x, p.y, p.z) == (1.0, -2.0, 3.5)
    assert (q.w, q.x, q.y, q.z) == (0.5, 0.1, -0.2, 0.3)


def test_a_failed_self_check_publishes_message_objects():
    class Misplaced(PoseWriter):
        def _encode(self, t_ns, position, quat_wxyz):
            return super()._encode(t_ns, position, quat_wxyz)[:-8]  # a wrong layout

    pub = Captured()
    w = Misplaced(pub, 'mocap')
    assert not w.packed
    w.write(3_000_000_001, (1.0, 2.0, 3.0), (1.0, 0.0, 0.0, 0.0))
    [msg] = pub.sent
    assert isinstance(msg, PoseStamped)
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec, msg.pose.position.z) == (3, 1, 3.0)


def test_writers_deliver_ordinary_messages_over_dds():
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        node = rclpy.create_node('cdr_probe', context=ctx)
        got = {}
        for topic, typ in (
            ('/cdr_test/clock', Clock),
            ('/cdr_test/pose', PoseStamped),
            ('/cdr_test/joints', JointState),
            ('/cdr_test/array', Float64MultiArray),
        ):
            node.create_subscription(typ, topic, lambda m, t=topic: got.setdefault(t, m), 10)
        clock = ClockWriter(node.create_publisher(Clock, '/cdr_test/clock', 10))
        pose = PoseWriter(node.create_publisher(PoseStamped, '/cdr_test/pose', 10), 'mocap')
        joints = JointStateWriter(
            node.create_publisher(JointState, '/cdr_test/joints', 10), ['hip', 'knee']
        )
        array = ArrayWriter(
            node.create_publisher(Float64MultiArray, '/cdr_test/array', 10), _array_proto(2)
        )
        assert all(w.packed for w in (clock, pose, joints, array))
        executor = rclpy.executors.SingleThreadedExecutor(context=ctx)
        executor.add_node(node)
        deadline = time.monotonic() + 10
        while len(got) < 4 and time.monotonic() < deadline:
            clock.write(7_000_000_123)
            pose.write(8_000_000_000, (0.1, 0.2, 0.3), (0.0, 1.0, 0.0, 0.0))
            joints.write(9_500_000_000, [1.25, -0.5], [0.0, 3.0])
            array.write([12.5, 40.0])
            executor.spin_once(timeout_sec=0.02)
        assert len(got) == 4, got.keys()
        c, p, j, a = (
            got[t]
            for t in ('/cdr_test/clock', '/cdr_test/pose', '/cdr_test/joints', '/cdr_test/array')
        )
        assert (c.clock.sec, c.clock.nanosec) == (7, 123)
        assert (
            p.header.frame_id == 'mocap'
            and p.pose.orientation.x == 1.0
            and p.pose.position.z == 0.3
        )
        assert list(j.name) == ['hip', 'knee'] and list(j.position) == [1.25, -0.5]
        assert list(j.velocity) == [0.0, 3.0] and list(j.effort) == []
        assert j.header.stamp.sec == 9 and j.header.stamp.nanosec == 500_000_000
        assert list(a.data) == [12.5, 40.0] and a.layout.dim[0].label == 'maa,baa'
        executor.shutdown()
        node.destroy_node()
    finally:
        rclpy.try_shutdown(context=ctx)
