"""A publication Fast DDS refuses (a reliable reader that stopped acknowledging) is counted and
warned about by the nodes' publishers, not raised: real rclpy, a real stopped reader process."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import rclpy
from slow_reader import QOS  # this folder is on the path (pytest's rootdir-relative import)
from std_msgs.msg import Float64MultiArray

from equimus_ros.qos import is_dds_refusal, tolerant_publisher

READER = pathlib.Path(__file__).with_name('slow_reader.py')

#: Fast DDS keeps at most 5000 unacknowledged samples of a KEEP_ALL writer
MESSAGES = 12_000


@pytest.fixture
def stopped_reader():
    proc = subprocess.Popen([sys.executable, str(READER)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == 'ready'
    yield proc
    proc.send_signal(signal.SIGCONT)
    proc.kill()
    proc.wait()


def _flood(pub, reader, send=None) -> int:
    """Publish (by `send()`, else a message object) until DDS refuses one (or MESSAGES went
    out); the number published."""
    deadline = time.monotonic() + 20.0
    while pub.get_subscription_count() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pub.get_subscription_count() == 1, 'the reader never matched'
    os.kill(reader.pid, signal.SIGSTOP)
    msg = Float64MultiArray(data=[0.0] * 100)
    for i in range(MESSAGES):
        if send is None:
            pub.publish(msg)
        else:
            send()
        if getattr(pub, 'refused', 0):
            return i + 1
    return MESSAGES


def test_a_refused_publication_is_counted_and_warned_not_raised(stopped_reader, capfd):
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        node = rclpy.create_node('tolerant_writer', context=ctx)
        pub = tolerant_publisher(node, Float64MultiArray, '/refusal_test', QOS)
        sent = _flood(pub, stopped_reader)
        assert pub.refused >= 1, f'{sent} messages published, none refused'
        pub.publish(Float64MultiArray(data=[1.0]))  # and it goes on publishing
        err = capfd.readouterr().err
        assert 'refused by DDS' in err and '/refusal_test' in err, err[-2000:]
    finally:
        rclpy.try_shutdown(context=ctx)


def test_pre_serialised_messages_keep_the_tolerance(stopped_reader):
    """The nodes' pre-serialised messages (equimus_ros.cdr's writers: the controller's
    /valve/command, the driver's /valve/applied) go through the tolerant publisher too: a
    refusal of their bytes is counted, not raised (a writer that wrote to the middleware
    directly raised here)."""
    from equimus_ros.arrays import float_array
    from equimus_ros.cdr import ArrayWriter

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        node = rclpy.create_node('tolerant_bytes_writer', context=ctx)
        pub = tolerant_publisher(node, Float64MultiArray, '/refusal_test', QOS)
        writer = ArrayWriter(pub, float_array([0.0] * 100, 'x'))
        assert writer.packed, 'the writer fell back to message objects'
        values = [0.5] * 100
        sent = _flood(pub, stopped_reader, lambda: writer.write(values))
        assert pub.refused >= 1, f'{sent} messages written, none refused'
    finally:
        rclpy.try_shutdown(context=ctx)


def test_rclpy_s_own_publisher_raises_there(stopped_reader):
    """The same flood through a plain rclpy publisher raises: the refusal is real."""
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        node = rclpy.create_node('plain_writer', context=ctx)
        pub = node.create_publisher(Float64MultiArray, '/refusal_test', QOS)
        with pytest.raises(RuntimeError) as info:
            _flood(pub, stopped_reader)
        assert is_dds_refusal(info.value), info.value
    finally:
        rclpy.try_shutdown(context=ctx)


def test_reliable_topics_get_the_tolerant_publisher_and_best_effort_ones_rclpy_s():
    """DDS can refuse only a reliable writer (it waits for acknowledgements); the sensor streams
    and /clock keep rclpy's own publisher, with nothing added to their per-message cost."""
    from rclpy.qos import ReliabilityPolicy

    from equimus_description.interface import CLOCK, SIM_JOINT_STATES, VALVE_COMMAND
    from equimus_ros.qos import TolerantPublisher, publisher, qos_for

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        node = rclpy.create_node('publisher_kinds', context=ctx)
        for topic in (VALVE_COMMAND, SIM_JOINT_STATES, CLOCK):
            pub = publisher(node, Float64MultiArray, topic)
            reliable = qos_for(topic).reliability == ReliabilityPolicy.RELIABLE
            assert isinstance(pub, TolerantPublisher) == reliable, topic.name
        assert isinstance(publisher(node, Float64MultiArray, VALVE_COMMAND), TolerantPublisher)
    finally:
        rclpy.try_shutdown(context=ctx)


def test_a_publication_after_the_context_was_shut_down_is_a_stop_not_an_error():
    """A Ctrl-C shuts the context down while a callback may still publish: dropped in silence
    (the events executor would log any raised error as FATAL with a traceback). A plain
    publisher of the same context still raises, so the failure is real."""
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('tolerant_after_shutdown', context=context)
    pub = tolerant_publisher(node, Float64MultiArray, '/tolerant_after_shutdown', QOS)
    plain = node.create_publisher(Float64MultiArray, '/tolerant_after_shutdown_plain', QOS)
    pub.publish(Float64MultiArray(data=[1.0]))
    rclpy.shutdown(context=context)
    pub.publish(Float64MultiArray(data=[2.0]))
    with pytest.raises(RuntimeError):  # InvalidHandle, or RCLError 'context is invalid'
        plain.publish(Float64MultiArray(data=[2.0]))
    node.destroy_node()
