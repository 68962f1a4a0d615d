"""equimus_ros.executors: the composed graph's executor, on real rclpy. The C++ events executor
where this rclpy has it (unless EQUIMUS_EVENTS_EXECUTOR=0), and either executor runs a node's
timer and delivers a subscription as the graph needs (spin_once from a thread of its own), and
spin_until_shutdown spins either without polling."""

import inspect
import threading
import time

import pytest
from std_msgs.msg import Int32

from equimus_ros.executors import (
    EVENTS_EXECUTOR_ENV,
    events_executor_available,
    info_callback,
    single_thread_executor,
    spin_until_shutdown,
    timer_callback,
)


@pytest.mark.parametrize('env', ['1', '0'])
def test_executor_choice_runs_timers_and_subscriptions(ros_node, monkeypatch, env):
    from rclpy.executors import SingleThreadedExecutor

    monkeypatch.setenv(EVENTS_EXECUTOR_ENV, env)
    executor = single_thread_executor()
    if env == '0' or not events_executor_available():
        assert isinstance(executor, SingleThreadedExecutor)
    else:
        assert not isinstance(executor, SingleThreadedExecutor)
        assert type(executor).__name__ == 'EventsExecutor'
    ticks, got = [], []
    ros_node.create_timer(0.01, lambda: ticks.append(1))
    ros_node.create_subscription(Int32, '/executor_test', lambda m: got.append(m.data), 10)
    pub = ros_node.create_publisher(Int32, '/executor_test', 10)
    executor.add_node(ros_node)
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.05)

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        end = time.monotonic() + 10.0
        n = 0
        while time.monotonic() < end and (len(ticks) < 10 or len(got) < 5):
            pub.publish(Int32(data=n))
            n += 1
            time.sleep(0.02)
    finally:
        stop.set()
        spinner.join(timeout=2.0)
        executor.remove_node(ros_node)
        executor.shutdown()
    assert len(ticks) >= 10, len(ticks)
    assert len(got) >= 5 and got == sorted(got), got


@pytest.mark.parametrize('env', ['1', '0'])
def test_spin_until_shutdown_sleeps_between_events_and_stops(ros_node, monkeypatch, env):
    """The way every multi-node process spins (equimus_ros.main.spin_all): timers run at their
    rate, and the spinning thread sleeps while nothing is due. rclpy 9.1.2's EventsExecutor.spin()
    polls instead, a core at 100 % (this test's bound is half a core), so it is never used."""
    monkeypatch.setenv(EVENTS_EXECUTOR_ENV, env)
    executor = single_thread_executor()
    ticks: list[float] = []
    ros_node.create_timer(0.01, lambda: ticks.append(time.monotonic()))
    executor.add_node(ros_node)
    stop = threading.Event()
    used: list[float] = []

    def spin() -> None:
        cpu0, wall0 = time.thread_time(), time.monotonic()
        spin_until_shutdown(executor, ros_node.context, stop.is_set)
        used.append((time.thread_time() - cpu0) / (time.monotonic() - wall0))

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        time.sleep(1.5)
    finally:
        stop.set()
        spinner.join(timeout=5.0)
        executor.remove_node(ros_node)
        executor.shutdown()
    assert not spinner.is_alive(), 'spin_until_shutdown did not return after stop()'
    assert len(ticks) >= 50, len(ticks)  # 100 Hz for 1.5 s, on a loaded machine
    assert used and used[0] < 0.5, f'the spinning thread used {used[0]:.0%} of a core'


@pytest.mark.parametrize('env', ['1', '0'])
def test_a_timer_callback_ticks_and_its_signature_is_not_worked_out_each_time(
    ros_node, monkeypatch, env
):
    """Both executors ask inspect.signature of a timer's callback at every tick: a
    timer_callback answers with the signature it carries (no parameter, so no TimerInfo), the
    same object each time, and the bound method behind it is called with no argument."""
    monkeypatch.setenv(EVENTS_EXECUTOR_ENV, env)

    class Ticker:
        def __init__(self) -> None:
            self.ticks = 0

        def tick(self) -> None:
            self.ticks += 1

    ticker = Ticker()
    callback = timer_callback(ticker.tick)
    assert inspect.signature(callback) is inspect.signature(callback)
    assert not inspect.signature(callback).parameters
    asked = []
    real_signature = inspect.signature

    def counting(obj, *args, **kwargs):
        asked.append(obj)
        return real_signature(obj, *args, **kwargs)

    monkeypatch.setattr(inspect, 'signature', counting)
    executor = single_thread_executor()
    ros_node.create_timer(0.01, callback)
    executor.add_node(ros_node)
    try:
        end = time.monotonic() + 10.0
        while time.monotonic() < end and ticker.ticks < 10:
            executor.spin_once(timeout_sec=0.05)
    finally:
        executor.remove_node(ros_node)
        executor.shutdown()
    assert ticker.ticks >= 10, ticker.ticks
    assert asked and all(obj is callback for obj in asked), asked[:3]


@pytest.mark.parametrize('env', ['1', '0'])
def test_an_info_callback_gets_the_message_and_its_publisher_gid_on_either_executor(
    ros_node, monkeypatch, env
):
    """rclpy's Python executor calls a two-argument subscription callback with the message and
    its MessageInfo, rclpy 9.1.2's events executor with one (message, info) tuple: an
    info_callback gets the two apart either way, the gid that of the publisher."""
    monkeypatch.setenv(EVENTS_EXECUTOR_ENV, env)
    got = []
    callback = info_callback(lambda msg, info: got.append((msg.data, info)))
    assert list(inspect.signature(callback).parameters) == ['msg', 'info']
    executor = single_thread_executor()
    sub = ros_node.create_subscription(Int32, '/info_callback_test', callback, 10)
    assert sub._callback_type.name == 'WithMessageInfo'
    pub = ros_node.create_publisher(Int32, '/info_callback_test', 10)
    executor.add_node(ros_node)
    try:
        end = time.monotonic() + 10.0
        k = 0
        while time.monotonic() < end and len(got) < 3:
            pub.publish(Int32(data=k))
            k += 1
            executor.spin_once(timeout_sec=0.05)
    finally:
        executor.remove_node(ros_node)
        executor.shutdown()
    assert len(got) >= 3, got
    gids = {bytes(info['publisher_gid']['data']) for _, info in got}
    infos = ros_node.get_publishers_info_by_topic('/info_callback_test')
    assert gids == {bytes(i.endpoint_gid) for i in infos}, (gids, infos)
    assert [d for d, _ in got] == sorted(d for d, _ in got)
