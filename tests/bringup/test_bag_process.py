"""The composed graph's bag writer in a child process (equimus_bringup.bag_process), for real: a
child interpreter, a socket between the two, an mcap bag read back with rosbags."""

from rclpy.serialization import serialize_message
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
