"""Properties of the pre-serialised CDR writers: for any frame id, joint names, array layout,
time and values (NaN and infinities included), what a writer publishes reads back with rclpy's
deserialiser as exactly the message it stands for, packed or (if its self-check refused the
layout) as the message object itself. Invalid input raises only struct.error/ValueError/TypeError
before anything is published."""

import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip('rclpy')

from rclpy.serialization import deserialize_message  # noqa: E402
from std_msgs.msg import Float64MultiArray, MultiArrayDimension  # noqa: E402

from equimus_ros.cdr import ArrayWriter, ClockWriter, JointStateWriter, PoseWriter  # noqa: E402

SETTINGS = settings(max_examples=200, deadline=None)
# builtin_interfaces/Time: int32 seconds, so a stamp fits below 2**31 s
T_NS = st.integers(min_value=0, max_value=(2**31 - 1) * 10**9 + 999_999_999)
F = st.floats(allow_nan=True, allow_infinity=True, width=64)
NAME = st.text(
    alphabet=st.characters(blacklist_categories=('Cs',), blacklist_characters='\x00'), max_size=12
)


class Captured:
    def __init__(self):
        self.sent = []

    def publish(self, item):
        self.sent.append(item)


def _read_back(writer, args):
    writer.write(*args)
    item = writer.publisher.sent[-1]
    want = writer._message(*args)
    got = deserialize_message(item, type(want)) if isinstance(item, bytes) else item
    assert repr(got) == repr(want)  # repr: NaN equals NaN
    return got


@SETTINGS
@given(t=T_NS)
def test_clock(t):
    assert _read_back(ClockWriter(Captured()), (t,)).clock.sec == t // 10**9


@SETTINGS
@given(
    frame=NAME, t=T_NS, p=st.lists(F, min_size=3, max_size=3), q=st.lists(F, min_size=4, max_size=4)
)
def test_pose(frame, t, p, q):
    w = PoseWriter(Captured(), frame)
    got = _read_back(w, (t, p, q))
    assert got.header.frame_id == frame


@SETTINGS
@given(
    names=st.lists(NAME, min_size=1, max_size=5),
    frame=NAME,
    t=T_NS,
    data=st.data(),
)
def test_joint_state(names, frame, t, data):
    n = len(names)
    pos = data.draw(st.lists(F, min_size=n, max_size=n))
    vel = data.draw(st.lists(F, min_size=n, max_size=n))
    w = JointStateWriter(Captured(), names, frame_id=frame)
    assert list(_read_back(w, (t, pos, vel)).name) == names


@SETTINGS
@given(labels=st.lists(NAME, max_size=3), n=st.integers(1, 6), data=st.data())
def test_array(labels, n, data):
    proto = Float64MultiArray(data=[0.0] * n)
    proto.layout.dim = [MultiArrayDimension(label=s, size=n, stride=n) for s in labels]
    w = ArrayWriter(Captured(), proto)
    values = data.draw(st.lists(F, min_size=n, max_size=n))
    _read_back(w, (values,))


@SETTINGS
@given(
    bad=st.one_of(st.lists(F, max_size=5), st.lists(st.text(max_size=2), min_size=2, max_size=2))
)
def test_wrong_input_raises_a_documented_error_and_publishes_nothing(bad):
    proto = Float64MultiArray(data=[0.0, 0.0])
    w = ArrayWriter(Captured(), proto)
    try:
        w.write(bad)
    except (struct.error, ValueError, TypeError):
        assert not w.publisher.sent
        return
    assert len(bad) == 2 and all(isinstance(v, float) or math.isnan(v) for v in bad)
