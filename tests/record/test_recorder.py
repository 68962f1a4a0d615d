"""The recorder node against real DDS publishers; bags read back with rosbags."""

import signal
import time

import pytest
import rclpy
from rclpy.qos import qos_profile_sensor_data
from rosproc import start_node, stop
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from equimus_record import bag


@pytest.fixture
def node(ros_node):
    return ros_node


def _publish(node, pubs, n, period=0.004):
    for i in range(n):
        m = Float64MultiArray(data=[float(i), 2.0 * i])
        pubs[0].publish(m)
        js = JointState(name=['hip', 'knee'], position=[0.01 * i, 0.02 * i])
        pubs[1].publish(js)
        rclpy.spin_once(node, timeout_sec=0)
        time.sleep(period)


def _wait_recording(node, proc, topics, timeout=15.0):
    """Until the recorder has subscribed to every topic (it logs each one)."""
    end = time.monotonic() + timeout
    seen = set()
    while time.monotonic() < end and seen != set(topics):
        for t in topics:
            if node.get_subscriptions_info_by_topic(t):
                seen.add(t)
        rclpy.spin_once(node, timeout_sec=0.1)
    assert seen == set(topics), f'recorder did not subscribe to {set(topics) - seen}'


def _wait_received(node, minimum, timeout=30.0):
    """Until the recorder's /diagnostics report at least `minimum` messages received and the
    count grows by no more than its own reports between two of them (it records /diagnostics
    too): DDS has delivered what was published (on a loaded machine that can take longer than
    any fixed wait). Received, not flushed: the signal's close still has to write the pending
    chunk."""
    from diagnostic_msgs.msg import DiagnosticArray

    counts = []

    def on(msg):
        for st in msg.status:
            values = {kv.key: kv.value for kv in st.values}
            if 'messages' in values and 'messages_on_disk' in values:
                counts.append(int(values['messages']))

    sub = node.create_subscription(DiagnosticArray, '/diagnostics', on, 10)
    try:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.1)
            if len(counts) >= 2 and counts[-1] >= minimum and counts[-1] - counts[-2] < 5:
                return counts[-1]
        raise AssertionError(f'the recorder reported {counts[-3:]} messages, wanted {minimum}')
    finally:
        node.destroy_subscription(sub)


#: of the 300 best-effort /joint_states: DDS does not resend one a loaded machine drops before
#: the recorder has it (about 20 were missing once beside the parallel suite and a /proc sampler);
#: every one the recorder did receive must be in the bag (the check at the end)
BEST_EFFORT_MIN = 250


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM])
def test_records_every_message_and_closes_on_signal(node, tmp_path, sig):
    path = tmp_path / 'bag'
    pubs = [
        node.create_publisher(Float64MultiArray, '/valve/command', 10),
        node.create_publisher(JointState, '/joint_states', qos_profile_sensor_data),
    ]
    proc = start_node('equimus_record', 'recorder', '-p', f'bag_path:={path}')
    try:
        _wait_recording(node, proc, ['/valve/command', '/joint_states'])
        time.sleep(0.5)
        _publish(node, pubs, 300)
        received = _wait_received(node, 300 + BEST_EFFORT_MIN)
    finally:
        out = stop(proc, sig)
    assert proc.returncode == 0, out
    assert bag.is_complete(path), out
    msgs = list(bag.read_messages(path, ['/valve/command']))
    # Reliable topic on loopback: nothing published after subscription may be missing.
    assert [m.data[0] for _, _, m in msgs] == [float(i) for i in range(300)]
    js = [m for t, _, m in bag.read_messages(path, ['/joint_states'])]
    assert len(js) >= BEST_EFFORT_MIN and list(js[-1].name) == ['hip', 'knee']
    counts = bag.topic_counts(path)
    assert counts['/valve/command'][0] == 'std_msgs/msg/Float64MultiArray'
    # Every message the recorder reported received is on disk (the count includes /diagnostics).
    assert sum(n for _, n, _ in counts.values()) >= received, (counts, received)


def test_killed_recorder_leaves_a_readable_bag(node, tmp_path):
    path = tmp_path / 'bag'
    pub = node.create_publisher(Float64MultiArray, '/valve/command', 10)
    proc = start_node(
        'equimus_record', 'recorder', '-p', f'bag_path:={path}', '-p', 'flush_period:=0.2'
    )
    try:
        _wait_recording(node, proc, ['/valve/command'])
        time.sleep(0.3)
        for i in range(200):
            pub.publish(Float64MultiArray(data=[float(i)]))
            time.sleep(0.005)
        # All of it on disk before the kill: polled (read-only) rather than a fixed 1 s, which a
        # loaded machine's DDS delivery and recorder can outlast.
        deadline = time.monotonic() + 20.0
        while len(list(bag.read_messages(path, ['/valve/command']))) < 200:
            assert time.monotonic() < deadline, 'the 200 messages never all reached the disk'
            time.sleep(0.2)
    finally:
        stop(proc, signal.SIGKILL)
    assert not bag.is_complete(path)
    # read_messages streams the unfinished bag read-only
    values = [m.data[0] for _, _, m in bag.read_messages(path, ['/valve/command'])]
    assert values == [float(i) for i in range(len(values))]
    # What was flushed before the kill survives it.
    assert len(values) == 200
    assert not bag.is_complete(path)  # reading wrote nothing
    assert 'stopped without closing' in bag.describe(path)
    bag.repair(path)
    assert bag.is_complete(path)
    assert [m.data[0] for _, _, m in bag.read_messages(path, ['/valve/command'])] == values


def test_a_stream_that_goes_quiet_is_flushed_by_the_timer(tmp_path):
    """BagWriter: the tail of a stream is made durable by `flush_if_due` (the recorder's timer)
    within one flush period, without waiting for a next message; nothing pending, no flush."""
    import shutil

    from rclpy.serialization import serialize_message

    # A period long against a loaded machine's stalls (1 s): at 50 ms, five writes and the
    # "not yet due" check could outlast it and flush early.
    w = bag.BagWriter(tmp_path / 'bag', flush_period=1.0)
    w.add_topic('/valve/command', 'std_msgs/msg/Float64MultiArray')
    for i in range(5):
        w.write(
            '/valve/command',
            1_000_000 * (i + 1),
            serialize_message(Float64MultiArray(data=[float(i)])),
        )
    assert w.flushed_count < 5  # written within one period: still pending
    assert not w.flush_if_due()  # the period has not passed yet
    time.sleep(1.05)
    assert w.flush_if_due() and w.flushed_count == 5
    time.sleep(0.06)
    assert not w.flush_if_due()  # nothing new
    # what a crash now would leave: the flushed bytes, read back without the writer closing
    copy = tmp_path / 'crashed'
    shutil.copytree(tmp_path / 'bag', copy)
    values = [m.data[0] for _, _, m in bag.read_messages(copy, ['/valve/command'])]
    assert values == [0.0, 1.0, 2.0, 3.0, 4.0]
    w.close()
