"""Every safety guard trips: in plain Python and through the real controller node (rclpy/DDS)."""

import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from equimus_control.supervisor import SafetyConfig, Supervisor


def test_joint_limit_guard_trips_and_rearms_with_margin():
    s = Supervisor(SafetyConfig(safe_min=(0.6, 0.05), safe_max=(2.3, 2.0), rearm_margin=0.05))
    assert s.check_state([1.2, 1.0], 0.0)
    assert not s.check_state([2.35, 1.0], 0.01) and s.reason.startswith('joint_limit')
    assert not s.check_state([2.28, 1.0], 0.02)  # inside but within the re-arm margin
    assert s.check_state([2.2, 1.0], 0.03)
    assert not s.check_state([1.2, -0.2], 0.04) and s.trips['joint_limit'] == 2


def test_invalid_state_guard_trips():
    s = Supervisor()
    assert not s.check_state([math.nan, 1.0], 0.0) and s.reason.startswith('invalid')
    assert not s.check_state([1.0], 0.0)
    assert np.all(s.clip([math.inf, 3.0]) == 0.0)
    assert np.all(s.clip([70.0, -3.0]) == [50.0, 0.0])


def test_stale_guard_trips():
    s = Supervisor(SafetyConfig(stale_timeout=0.25))
    assert s.check_stale(0.0)  # never had a state
    s.check_state([1.2, 1.0], 1.0)
    assert not s.check_stale(1.2)
    assert s.check_stale(1.3) and s.reason.startswith('stale')


# ----- through the real node ---------------------------------------------------------------
rclpy = pytest.importorskip('rclpy')


@pytest.fixture
def controller_proc():
    env = dict(os.environ)
    proc = subprocess.Popen(
        [
            sys.executable,
            '-m',
            'equimus_control.controller_node',
            '--ros-args',
            '-p',
            'controller:=pid',
            '-p',
            'stale_timeout:=0.3',
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    yield proc
    proc.send_signal(2)
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    assert 'Traceback' not in out, out


def test_guards_trip_through_the_node(controller_proc):
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from equimus_ros.qos import COMMAND_QOS

    rclpy.init()
    node = rclpy.create_node('safety_probe')
    got = []
    node.create_subscription(
        Float64MultiArray,
        '/valve/command',
        lambda m: got.append((time.monotonic(), list(m.data))),
        COMMAND_QOS,
    )
    pub = node.create_publisher(JointState, '/joint_states', qos_profile_sensor_data)
    ref = node.create_publisher(JointState, '/reference/joint', COMMAND_QOS)

    last_sent = [0.0]

    def send(q, n=10):
        for _ in range(n):
            m = JointState(name=['hip', 'knee'], position=list(q), velocity=[0.0, 0.0])
            m.header.stamp = node.get_clock().now().to_msg()
            pub.publish(m)
            last_sent[0] = time.monotonic()
            rclpy.spin_once(node, timeout_sec=0.01)

    def spin(t):
        end = time.monotonic() + t
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.01)

    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # discovery + node start-up
            ref.publish(
                JointState(name=['hip', 'knee'], position=[1.45, 0.55], velocity=[0.0, 0.0])
            )
            send([1.45, 0.55], 3)
            if any(max(d) > 0.5 for _, d in got):
                break
        assert any(max(d) > 0.5 for _, d in got), f'controller never commanded pressure: {got[-3:]}'

        def feed_until(q, cond, what, timeout=10.0):
            """Keep sending state q until cond() holds: commands computed from states sent before
            (still queued on a loaded machine) may arrive first; only the outcome is judged."""
            end = time.monotonic() + timeout
            while not cond():
                assert time.monotonic() < end, f'{what}: {got[-5:]}'
                send(q, 3)

        def vented():
            return len(got) >= 5 and all(d == [0.0, 0.0] for _, d in got[-5:])

        def commanding():
            return bool(got) and max(got[-1][1]) > 0.5

        got.clear()
        feed_until([2.6, 1.2], vented, 'joint-limit guard never vented')
        feed_until([1.45, 0.55], commanding, 'never re-armed after the joint-limit trip')
        got.clear()
        feed_until([math.nan, math.nan], vented, 'invalid-state guard never vented')
        feed_until([1.45, 0.55], commanding, 'never re-armed after the invalid-state trip')
        got.clear()
        spin(1.0)  # silence → stale guard (timer)
        vents = [t for t, d in got if d == [0.0, 0.0]]
        assert vents, 'stale guard never vented'
        # The node saw the last state no earlier than it was sent, so the vent cannot come before
        # stale_timeout (0.3 s) after the send; the 0.05 s check timer and load set the upper bound.
        assert 0.29 < vents[0] - last_sent[0] < 0.9, vents[0] - last_sent[0]
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
