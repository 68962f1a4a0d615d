"""The controller says once that its commands follow a reference (controller_node.FOLLOWING):
`equimus adapt`'s phases arm on that line. Over real rclpy/DDS, states, a reference and its
preview from a probe node. Before it has a reference, or while a reference node publishes a
preview it has not yet received, the controller holds the leg where it is (a run on the emulated
rig armed then held the vented pose for 2 s of its 8 s, 2026-11-29), so it must stay silent."""

from __future__ import annotations

import threading
import time

import numpy as np
import rclpy
from rcl_interfaces.msg import Log
from rclpy.executors import SingleThreadedExecutor
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from equimus_control.controller_node import FOLLOWING, ControllerNode
from equimus_description.interface import (
    JOINT_STATES,
    JOINTS,
    REFERENCE,
    REFERENCE_PREVIEW,
    preview_columns,
)
from equimus_ros.arrays import table_array
from equimus_ros.qos import publisher

STATE = [1.30, 0.90]
TARGET = [1.40, 0.85]


def _stamped(msg: JointState, t: float) -> JointState:
    msg.header.stamp.sec, nanosec = divmod(int(t * 1e9), 1_000_000_000)
    msg.header.stamp.nanosec = nanosec
    return msg


def test_the_controller_says_it_follows_only_with_a_reference_and_its_preview():
    rclpy.init(args=['--ros-args', '-p', 'controller:stale_timeout:=5.0'])
    try:
        controller = ControllerNode()
        probe = rclpy.create_node('following_probe')
        said: list[str] = []
        probe.create_subscription(
            Log, '/rosout', lambda m: said.append(m.msg) if m.name == 'controller' else None, 100
        )
        states = publisher(probe, JointState, JOINT_STATES)
        ex = SingleThreadedExecutor()
        for n in (controller, probe):
            ex.add_node(n)
        spinning = threading.Event()
        spinning.set()

        def spin_until_stopped() -> None:
            # Stopped by the flag and joined before the executor is shut down: shutting it down
            # under a running spin() can trigger its destroyed guard condition in that thread.
            while spinning.is_set():
                ex.spin_once(timeout_sec=0.05)

        spin = threading.Thread(target=spin_until_stopped, daemon=True)
        spin.start()

        def run(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                msg = JointState(name=list(JOINTS), position=STATE, velocity=[0.0, 0.0])
                states.publish(_stamped(msg, time.time()))
                time.sleep(1 / 120)

        run(1.0)  # states, no reference: holding the leg where it is
        assert controller.cycles > 0 and not controller.following
        previews = publisher(probe, Float64MultiArray, REFERENCE_PREVIEW)
        reference = publisher(probe, JointState, REFERENCE)
        deadline = time.monotonic() + 10.0
        while controller.count_publishers(REFERENCE_PREVIEW.name) == 0:
            assert time.monotonic() < deadline, 'the preview publisher was never discovered'
            time.sleep(0.05)
        ref = JointState(name=list(JOINTS), position=TARGET, velocity=[0.0, 0.0])
        reference.publish(_stamped(ref, time.time()))
        run(1.0)  # a reference, but a preview is published and none has arrived
        assert controller.step.ref_stamp is not None and not controller.following
        now = time.time()
        times = now + np.arange(0.0, 3.0, 0.05)
        rows = [[t, *TARGET, 0.0, 0.0] for t in times]
        previews.publish(table_array(rows, 'point', preview_columns(tuple(JOINTS))))
        end = time.monotonic() + 5.0
        while not controller.following and time.monotonic() < end:
            run(0.1)
        assert controller.following
        run(0.3)  # the log line reaches /rosout
        lines = [m for m in said if FOLLOWING in m]
        assert lines == [f'{FOLLOWING} (with its preview)'], said
        run(0.5)
        assert [m for m in said if FOLLOWING in m] == lines  # said once
        spinning.clear()
        spin.join(5.0)
        ex.shutdown()
        for n in (controller, probe):
            n.destroy_node()
    finally:
        rclpy.try_shutdown()
