"""The composed graph's in-process hand-off (sim_graph.InProcessBus) with real rclpy publishers
and the real bag writer process: what two threads publish while the frames advance is written in
the order it was published, its log times never going back (an unindexed MCAP, as a full disk
leaves it, is read in file order and refused otherwise)."""

import sys
import threading
import types

from mcap.reader import make_reader
from rclpy.serialization import serialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from equimus_bringup.bag_process import BagWriterProcess
from equimus_bringup.sim_graph import InProcessBus

FRAME_NS = 8_333_333
FRAMES = 6000


def test_two_threads_publishing_across_frames_are_logged_in_order(ros_node, tmp_path):
    writer = BagWriterProcess(tmp_path / 'bag')
    failures: list[BaseException] = []
    recorder = types.SimpleNamespace(
        writer=writer, exclude=set(), subs={}, error='', stop_recording=failures.append
    )
    frames_pub = ros_node.create_publisher(JointState, '/bus_test/frames', 10)
    timer_pub = ros_node.create_publisher(Float64MultiArray, '/bus_test/timer', 10)
    bus = InProcessBus(recorder)
    bus.attach([ros_node])
    state = serialize_message(JointState(name=['a'], position=[1.0]))
    stop = threading.Event()
    sent = [0]

    def timer_thread() -> None:  # what the executor thread's timers do (diagnostics, rates)
        while not stop.is_set():
            timer_pub.publish(Float64MultiArray(data=[float(sent[0])]))
            sent[0] += 1

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the two threads take turns as often as they can
    other = threading.Thread(target=timer_thread)
    other.start()
    try:
        for k in range(1, FRAMES + 1):
            bus.frame(k * FRAME_NS)
            frames_pub.publish(state)
    finally:
        stop.set()
        other.join()
        sys.setswitchinterval(interval)
    bus.flush()
    writer.close()
    assert not failures
    (mcap,) = (tmp_path / 'bag').glob('*.mcap')
    with mcap.open('rb') as f:
        logged = [
            (channel.topic, message.log_time)
            for _, channel, message in make_reader(f).iter_messages(log_time_order=False)
        ]
    times = [t for _, t in logged]
    back = [(i, times[i - 1], times[i]) for i in range(1, len(times)) if times[i] < times[i - 1]]
    assert not back, f'{len(back)} log times went back, first {back[:3]}'
    assert [t for topic, t in logged if topic == '/bus_test/frames'] == [
        k * FRAME_NS for k in range(1, FRAMES + 1)
    ]
    assert sum(topic == '/bus_test/timer' for topic, _ in logged) == sent[0] > 100


def test_a_route_queues_for_the_bag_alone_until_someone_else_listens(ros_node, tmp_path):
    """A message nobody in or outside the process listens to only goes into the bag's queue (the
    short path); a subscriber outside the process switches its route to DDS at the next check,
    one in the process is served on each publication; every message is recorded and counted."""
    import time

    import rclpy

    writer = BagWriterProcess(tmp_path / 'bag')
    recorder = types.SimpleNamespace(
        writer=writer, exclude=set(), subs={}, error='', stop_recording=lambda exc: None
    )
    pub = ros_node.create_publisher(JointState, '/bus_test/state', 10)
    bus = InProcessBus(recorder, outside_check_period=0.01)
    bus.attach([ros_node])
    local: list[float] = []
    bus.subscribe('/bus_test/state', lambda msg: local.append(msg.position[0]))
    heard: list[float] = []
    outside = rclpy.create_node('bus_test_outside')
    sent = 0
    try:

        def frame_and_publish(k: int) -> None:
            nonlocal sent
            bus.frame(k * FRAME_NS)
            pub.publish(JointState(name=['a'], position=[float(k)]))
            sent += 1

        frame_and_publish(1)
        assert local == [1.0]  # served in the process, on the full path
        bus.subscribers['/bus_test/state'].clear()
        bus.rewire()
        frame_and_publish(2)
        assert local == [1.0]
        assert pub.publish.__qualname__.startswith('_queue')  # nobody listens: queued only
        outside.create_subscription(
            JointState, '/bus_test/state', lambda msg: heard.append(msg.position[0]), 10
        )
        k, deadline = 2, time.monotonic() + 20.0
        while not heard and time.monotonic() < deadline:
            time.sleep(0.02)  # past outside_check_period: the next frame looks again
            k += 1
            frame_and_publish(k)
            rclpy.spin_once(outside, timeout_sec=0.05)
        assert heard, 'the outside subscriber never got a message'
        assert pub.publish.__qualname__.startswith('_Route')
        bus.flush()
        assert bus.handed_off == sent
    finally:
        outside.destroy_node()
        writer.close()
    (mcap,) = (tmp_path / 'bag').glob('*.mcap')
    with mcap.open('rb') as f:
        recorded = [
            message.log_time
            for _, channel, message in make_reader(f).iter_messages(log_time_order=False)
            if channel.topic == '/bus_test/state'
        ]
    assert recorded == [k * FRAME_NS for k in range(1, sent + 1)]
