"""The composed graph's bag writer in a child process (equimus_bringup.bag_process), for real: a
child interpreter, a socket between the two, an mcap bag read back with rosbags."""

import pytest
from mcap.reader import make_reader
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from equimus_bringup.bag_process import BagWriterProcess
from equimus_record.bag import read_messages

JS = 'sensor_msgs/msg/JointState'
ARRAY = 'std_msgs/msg/Float64MultiArray'


def test_a_topic_added_with_a_sample_has_its_type_prepared_before_the_answer(tmp_path):
    """The child builds its reader of the type on the sample before add_topic returns, not at
    the first frame's messages: the answer is the sample's size on the wire, which takes that
    reader to find (rclpy's serialiser ends an empty JointState with 8 alignment bytes)."""
    w = BagWriterProcess(tmp_path / 'bag')
    try:
        sample = serialize_message(JointState())
        assert len(sample) == 44
        assert w.add_topic('/joint_states', JS, sample=sample) == 36
        array = serialize_message(Float64MultiArray())
        assert w.add_topic('/valve/command', ARRAY, sample=array) == 16
        assert w.add_topic('/plain', ARRAY) is None  # no sample: prepared at its first message
        assert w.add_topic('/joint_states', JS, sample=sample) is None  # already there
    finally:
        w.close()


def test_messages_of_a_prepared_type_are_written_whole_and_trimmed(tmp_path):
    """The size the sample gave is used for messages of its length only; longer ones are
    measured on their own: every message reads back as written."""
    w = BagWriterProcess(tmp_path / 'bag')
    w.add_topic('/joint_states', JS, sample=serialize_message(JointState()))
    sent = []
    for i in range(30):
        n = i % 3
        msg = JointState(name=['j'] * n, position=[0.1 * i] * n, velocity=[-0.2 * i] * n)
        msg.header.stamp.sec = i
        sent.append(msg)
        w.write('/joint_states', 1_000 + i, serialize_message(msg))
    w.close()
    got = [m for _, _, m in read_messages(tmp_path / 'bag')]

    def fields(m):
        return m.header.stamp.sec, list(m.name), list(m.position), list(m.velocity)

    assert [fields(m) for m in got] == [fields(m) for m in sent]


def test_messages_handed_over_by_log_time_groups_are_logged_at_their_groups_time(tmp_path):
    """write_logged: an int is the log time of the messages after it (the first ones get the
    time given); the answer is the last group's time, the count includes them all; messages of
    `write` between two groups keep their place in the file."""
    w = BagWriterProcess(tmp_path / 'bag')
    w.add_topic('/a', ARRAY, sample=serialize_message(Float64MultiArray()))
    w.add_topic('/b', ARRAY)

    def msg(x):
        return ('/a' if x < 10 else '/b'), serialize_message(Float64MultiArray(data=[float(x)]))

    assert w.write_logged([msg(1), 100, msg(2), msg(11), 200, msg(3)], 50) == 200
    assert w.write_logged([msg(12)], 200) == 200  # no group of its own: the time before
    w.write('/a', 250, msg(4)[1])
    assert w.write_logged([300, msg(13)], 200) == 300
    assert w.count == 7
    w.close()
    (path,) = (tmp_path / 'bag').glob('*.mcap')
    with path.open('rb') as f:
        got = [
            (
                channel.topic,
                message.log_time,
                list(deserialize_message(message.data, Float64MultiArray).data),
            )
            for _, channel, message in make_reader(f).iter_messages(log_time_order=False)
        ]
    assert got == [
        ('/a', 50, [1.0]),
        ('/a', 100, [2.0]),
        ('/b', 100, [11.0]),
        ('/a', 200, [3.0]),
        ('/b', 200, [12.0]),
        ('/a', 250, [4.0]),
        ('/b', 300, [13.0]),
    ]


def test_a_logged_message_on_a_topic_never_added_stops_the_recording_as_a_write_error(tmp_path):
    """What came before it is kept; the writer says why (the recorder then stops recording)."""
    w = BagWriterProcess(tmp_path / 'bag')
    w.add_topic('/a', ARRAY)
    data = serialize_message(Float64MultiArray(data=[1.0]))
    w.write_logged([10, ('/a', data), ('/nowhere', data), ('/a', data)], 0)
    w.flush()
    assert '/nowhere' in w.failed
    with pytest.raises(OSError, match='/nowhere'):
        w.write('/a', 20, data)
        w.flush()
    w.close()
    (path,) = (tmp_path / 'bag').glob('*.mcap')
    with path.open('rb') as f:
        times = [m.log_time for _, _, m in make_reader(f).iter_messages(log_time_order=False)]
    assert times == [10]
