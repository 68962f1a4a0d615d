"""equimus_ros.cdr.MessageEncoder: the bytes the composed graph records decode to the message
given, for every hot-path type and shape, with random numbers; a changed shape gets its own
template; what the check refuses (NaN in the first message of a shape, unknown types) is
serialised by rclpy."""

import math
import random

import pytest

rclpy = pytest.importorskip('rclpy')

from geometry_msgs.msg import PoseStamped, TransformStamped  # noqa: E402
from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray, MultiArrayDimension, String  # noqa: E402

from equimus_ros.cdr import MessageEncoder  # noqa: E402

try:
    from tf2_msgs.msg import TFMessage
except ImportError:  # PyPI ROS without the locally built tf2_msgs
    TFMessage = None


def _stamp(header, r):
    header.stamp.sec, header.stamp.nanosec = r.randrange(2**31), r.randrange(10**9)


def _clock(r):
    m = Clock()
    m.clock.sec, m.clock.nanosec = r.randrange(2**31), r.randrange(10**9)
    return m


def _pose(r, frame='mocap'):
    m = PoseStamped()
    _stamp(m.header, r)
    m.header.frame_id = frame
    p, q = m.pose.position, m.pose.orientation
    p.x, p.y, p.z = (r.uniform(-5, 5) for _ in range(3))
    q.x, q.y, q.z, q.w = (r.uniform(-1, 1) for _ in range(4))
    return m


def _joints(r, names=('hip', 'knee'), efforts=0):
    n = len(names)
    m = JointState(
        name=list(names),
        position=[r.uniform(-3, 3) for _ in range(n)],
        velocity=[r.uniform(-30, 30) for _ in range(n)],
        effort=[r.uniform(-1, 1) for _ in range(efforts)],
    )
    _stamp(m.header, r)
    m.header.frame_id = 'mocap'
    return m


def _array(r, n=2, label='maa,baa'):
    m = Float64MultiArray(data=[r.uniform(-100, 100) for _ in range(n)])
    m.layout.dim = [MultiArrayDimension(label=label, size=n, stride=n)]
    return m


def _tf(r, pairs=(('base', 'thigh'), ('thigh', 'calf'))):
    out = []
    for parent, child in pairs:
        t = TransformStamped()
        _stamp(t.header, r)
        t.header.frame_id, t.child_frame_id = parent, child
        tr, rot = t.transform.translation, t.transform.rotation
        tr.x, tr.y, tr.z = (r.uniform(-1, 1) for _ in range(3))
        rot.x, rot.y, rot.z, rot.w = (r.uniform(-1, 1) for _ in range(4))
        out.append(t)
    return TFMessage(transforms=out)


MAKERS = [_clock, _pose, _joints, _array] + ([_tf] if TFMessage is not None else [])


@pytest.mark.parametrize('make', MAKERS, ids=lambda f: f.__name__)
def test_encoded_bytes_decode_to_the_message(make):
    r = random.Random(7)
    first = make(r)
    enc = MessageEncoder(type(first))
    for _ in range(200):
        msg = make(r)
        data = enc.encode(msg)
        assert deserialize_message(data, type(msg)) == msg
        assert len(data) <= len(serialize_message(msg))
    # A template was used (not rclpy): exactly one shape seen, and it passed the check.
    assert list(enc._templates.values()) != [None] and len(enc._templates) == 1


def test_padding_is_zero_so_equal_messages_give_equal_bytes():
    r = random.Random(3)
    msg = _joints(r)
    enc = MessageEncoder(JointState)
    assert enc.encode(msg) == enc.encode(msg)
    # frame id 'mocap' + NUL is 6 bytes, so two bytes of padding follow before the name count
    data = enc.encode(msg)
    assert data[4 + 8 + 4 + 6 : 4 + 8 + 4 + 8] == b'\0\0'


def test_each_shape_gets_its_own_template():
    r = random.Random(5)
    enc = MessageEncoder(JointState)
    shapes = [
        _joints(r),
        _joints(r, names=('hip', 'knee', 'ankle')),
        _joints(r, efforts=2),
        _joints(r, names=()),
    ]
    for msg in shapes * 3:
        assert deserialize_message(enc.encode(msg), JointState) == msg
    assert len(enc._templates) == 4
    poses = MessageEncoder(PoseStamped)
    for frame in ('mocap', 'world', ''):
        msg = _pose(r, frame)
        assert deserialize_message(poses.encode(msg), PoseStamped) == msg
    arrays = MessageEncoder(Float64MultiArray)
    for n, label in ((2, 'maa,baa'), (3, 'a,b,c'), (0, '')):
        msg = _array(r, n, label)
        assert deserialize_message(arrays.encode(msg), Float64MultiArray) == msg


@pytest.mark.skipif(TFMessage is None, reason='tf2_msgs is not importable (scripts/setup.sh)')
def test_tf_messages_of_different_frames_share_a_topic():
    r = random.Random(9)
    enc = MessageEncoder(TFMessage)
    msgs = [_tf(r), _tf(r, (('mocap', 'mocap_base'),)), _tf(r, (('mocap', 'mocap_calf'),))]
    for msg in msgs * 5:
        assert deserialize_message(enc.encode(msg), TFMessage) == msg
    assert len(enc._templates) == 3


def test_what_the_check_refuses_is_serialised_by_rclpy():
    r = random.Random(1)
    msg = _array(r)
    msg.data = [math.nan, 1.0]
    enc = MessageEncoder(Float64MultiArray)
    assert enc.encode(msg) == serialize_message(msg)  # NaN != NaN: the check fails
    assert list(enc._templates.values()) == [None]
    later = _array(r)
    assert enc.encode(later) == serialize_message(later)
    text = MessageEncoder(String)
    assert text.encode(String(data='hello')) == serialize_message(String(data='hello'))


@pytest.mark.skipif(TFMessage is None, reason='tf2_msgs is not importable (scripts/setup.sh)')
def test_transforms_writer_bytes_decode_to_the_transforms():
    from equimus_ros.cdr import TransformsWriter

    r = random.Random(13)
    for pairs in ((('base', 'thigh'), ('thigh', 'calf')), (('mocap', 'mocap_calf'),)):
        w = TransformsWriter(pairs)
        assert w.ok
        for _ in range(100):
            values = [
                (
                    r.randrange(2**31 * 10**9),
                    tuple(r.uniform(-3, 3) for _ in range(3)),
                    tuple(r.uniform(-1, 1) for _ in range(4)),
                )
                for _ in pairs
            ]
            data = w.encode(values)
            assert deserialize_message(data, TFMessage) == w.message(values)
            assert data == w.encode(values)  # zero padding: the same bytes every time
            t = deserialize_message(data, TFMessage).transforms[-1]
            assert (t.header.frame_id, t.child_frame_id) == pairs[-1]
            assert t.transform.rotation.w == values[-1][2][3]
