"""A controller that has never heard a joint state says why it vents in terms a user can act on:
nothing publishes /joint_states (start the estimator), or something does and its messages do
not arrive (what a restarted controller in a soak once logged for 50 s as only "no valid joint
state for inf s"). Over real rclpy/DDS, the controller in this process."""

from __future__ import annotations

import threading
import time

import rclpy
from rcl_interfaces.msg import Log
from rclpy.executors import SingleThreadedExecutor
from sensor_msgs.msg import JointState

from equimus_control.controller_node import ControllerNode
from equimus_description.interface import JOINT_STATES, JOINTS
from equimus_ros.qos import publisher

#: states the controller must have heard before they stop: on a loaded machine 0.8 s of them
#: (40 sent) once reached it only 10 times, so they are sent until it has heard this many
HEARD = 21
PUBLISH_MAX_S = 20.0  # s at most sending states before the test gives up on them arriving


def _venting_lines(publish_states: bool, silent_publisher: bool) -> tuple[list[str], int]:
    """The controller's venting lines on /rosout, and the states it heard. Without
    `publish_states`, over 1.5 s; with it, states are sent every 20 ms until the controller
    has heard HEARD of them, then no more: the state goes stale, and the lines are taken once
    a stale line has come after the last state (or 5 s later)."""
    rclpy.init(args=['--ros-args', '-p', 'controller:stale_timeout:=0.2'])
    try:
        probe = rclpy.create_node('unheard_probe')
        said: list[str] = []
        probe.create_subscription(
            Log, '/rosout', lambda m: said.append(m.msg) if m.name == 'controller' else None, 100
        )
        states = publisher(probe, JointState, JOINT_STATES) if silent_publisher else None
        controller = ControllerNode()
        ex = SingleThreadedExecutor()
        for n in (controller, probe):
            ex.add_node(n)
        done = threading.Event()

        # The spin ends between callbacks: Executor.shutdown from this thread once destroyed the
        # executor's guard condition under a callback still running (a thread's InvalidHandle).
        def spin() -> None:
            while not done.is_set():
                ex.spin_once(timeout_sec=0.05)

        spinner = threading.Thread(target=spin, daemon=True)
        spinner.start()
        t0 = time.monotonic()
        if publish_states and states is not None:
            while controller.states_heard < HEARD and time.monotonic() < t0 + PUBLISH_MAX_S:
                msg = JointState(name=list(JOINTS), position=[1.3, 0.9], velocity=[0.0, 0.0])
                msg.header.stamp = controller.get_clock().now().to_msg()
                states.publish(msg)
                time.sleep(0.02)
            stopped, known = time.monotonic(), len(said)
            while time.monotonic() < stopped + 5.0 and not any(
                line.startswith('venting: stale') for line in said[known:]
            ):
                time.sleep(0.02)
        else:
            time.sleep(1.5)
        done.set()
        spinner.join(timeout=5)
        ex.shutdown()
        heard = controller.states_heard
        controller.destroy_node()
        probe.destroy_node()
        return [s for s in said if s.startswith('venting')], heard
    finally:
        rclpy.shutdown()


def test_nothing_publishing_joint_states_is_named():
    lines, heard = _venting_lines(publish_states=False, silent_publisher=False)
    assert heard == 0
    assert lines and 'nothing publishes /joint_states yet: is the estimator running?' in lines[0]


def test_a_publisher_whose_states_never_arrive_is_named():
    lines, heard = _venting_lines(publish_states=False, silent_publisher=True)
    assert heard == 0
    assert lines and '/joint_states has 1 publisher(s) but none' in lines[0], lines


def test_states_that_arrive_are_counted_and_a_later_stale_line_is_plain():
    """Once states have arrived, a stale trip is only that (a line at the very start, before the
    first state, may still name the publishers)."""
    lines, heard = _venting_lines(publish_states=True, silent_publisher=True)
    assert heard >= HEARD, heard
    assert lines and lines[-1].startswith('venting: stale: no valid joint state for 0.'), lines
    assert 'publisher(s)' not in lines[-1] and 'nothing publishes' not in lines[-1], lines
