"""The estimator node over DDS: angles from PoseStamped triples, held then invalid (NaN) when a
body loses tracking, diagnostics levels follow."""

import math
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy')


def _quat_about_minus_x(a):
    return (-math.sin(a / 2), 0.0, 0.0, math.cos(a / 2))


def test_estimator_node_angles_hold_and_invalid():
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import PoseStamped
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import JointState

    from equimus_ros.qos import DIAG_QOS

    proc = subprocess.Popen(
        [
            sys.executable,
            '-m',
            'equimus_control.estimator_node',
            '--ros-args',
            '-p',
            'max_hold:=0.05',
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    rclpy.init()
    node = rclpy.create_node('estimator_probe')
    states, diags = [], []
    node.create_subscription(
        JointState, '/joint_states', lambda m: states.append(m), qos_profile_sensor_data
    )
    node.create_subscription(
        DiagnosticArray,
        '/diagnostics',
        lambda m: diags.extend(s for s in m.status if s.name.startswith('estimator')),
        DIAG_QOS,
    )
    pubs = {
        b: node.create_publisher(PoseStamped, f'/mocap/{b}/pose', qos_profile_sensor_data)
        for b in ('base', 'thigh', 'calf')
    }
    frame = [0]

    def send(q1, q2, lost=False):
        frame[0] += 1
        sec, ns = divmod(frame[0] * 8_333_333, 1_000_000_000)
        quats = {
            'base': (0.0, 0.0, 0.0, 1.0),
            'thigh': _quat_about_minus_x(q1 - math.pi / 2),
            'calf': _quat_about_minus_x(q1 + q2 - math.pi),
        }
        for b, pub in pubs.items():
            m = PoseStamped()
            m.header.stamp.sec, m.header.stamp.nanosec = sec, ns
            m.header.frame_id = 'mocap'
            x, y, z, w = quats[b]
            if lost and b == 'calf':
                x = y = z = w = math.nan
                m.pose.position.x = m.pose.position.y = m.pose.position.z = math.nan
            m.pose.orientation.x, m.pose.orientation.y = x, y
            m.pose.orientation.z, m.pose.orientation.w = z, w
            pub.publish(m)
        rclpy.spin_once(node, timeout_sec=0.005)

    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not states:
            send(1.4, 0.8)
            time.sleep(0.008)
        assert states, 'estimator published nothing'
        for _ in range(30):
            send(1.4, 0.8)
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.01)
        last = states[-1]
        assert list(last.name) == ['hip', 'knee']
        assert np.allclose(last.position, [1.4, 0.8], atol=1e-6)
        n0 = len(states)
        for _ in range(12):  # 100 ms of lost calf tracking
            send(1.4, 0.8, lost=True)
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.01)
        lost = states[n0:]
        assert lost, 'nothing published while tracking was lost'
        held = [s for s in lost if np.all(np.isfinite(s.position))]
        invalid = [s for s in lost if np.all(np.isnan(s.position))]
        assert held and np.allclose(held[0].position, [1.4, 0.8]) and held[0].velocity[0] == 0.0
        assert invalid and lost[-1] in invalid
        levels = {d.level for d in diags}
        assert bytes([2]) in levels or 2 in levels, levels  # ERROR reported
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=15)[0]
    assert 'Traceback' not in out, out


def test_estimator_parameters_from_the_config_file_runtime_set_and_read_only(repo_dir):
    """control.yaml reaches the node; a filter setting set over DDS reaches the estimator; the
    hinge calibration is read-only; a NaN or out-of-range setting is refused with its reason."""
    from paramclient import get_parameters, set_parameters

    from equimus_control.estimator_node import EstimatorNode

    rclpy.init(
        args=[
            '--ros-args',
            '--params-file',
            str(repo_dir / 'config' / 'control.yaml'),
            '-p',
            'estimator:sigma_acc:=12.5',
        ]
    )
    est = EstimatorNode()
    client = rclpy.create_node('estimator_param_client')
    from rclpy.executors import SingleThreadedExecutor

    executor = SingleThreadedExecutor()
    executor.add_node(est)
    import threading

    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        assert est.est.cfg.sigma_acc == 12.5 and est.sync_window == 0.05
        assert get_parameters(client, 'estimator', 'sigma_acc', 'hip_offset') == [
            12.5,
            pytest.approx(math.pi / 2),
        ]
        (ok,) = set_parameters(client, 'estimator', sigma_meas=0.004)
        assert ok.successful, ok.reason
        assert est.est.cfg.sigma_meas == 0.004 and est.est.cfg.sigma_acc == 12.5
        (ok,) = set_parameters(client, 'estimator', sync_window=0.02)
        assert ok.successful and est.sync_window == 0.02
        (ro,) = set_parameters(client, 'estimator', hip_offset=1.0)
        assert not ro.successful and 'read-only' in ro.reason
        (nan,) = set_parameters(client, 'estimator', sigma_acc=math.nan)
        assert not nan.successful and 'sigma_acc' in nan.reason
        (neg,) = set_parameters(client, 'estimator', max_hold=-1.0)
        assert not neg.successful and 'max_hold' in neg.reason
        assert est.est.cfg.hip.offset == pytest.approx(math.pi / 2)
        assert est.est.cfg.sigma_acc == 12.5 and est.est.cfg.max_hold == 0.1
    finally:
        executor.shutdown()
        client.destroy_node()
        est.destroy_node()
        rclpy.try_shutdown()


def test_an_invalid_hinge_axis_stops_the_node_with_the_reason():
    proc = subprocess.run(
        [
            sys.executable,
            '-m',
            'equimus_control.estimator_node',
            '--ros-args',
            '-p',
            'knee_axis_child:=[0.0, 0.0, 0.0]',
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert 'knee_axis_child=[0.0, 0.0, 0.0]: must be a non-zero 3-vector' in proc.stderr
    assert 'Traceback' not in proc.stderr


def test_a_fused_frame_with_a_body_the_estimator_does_not_use_goes_on_at_once():
    """The fused loop hands the estimator whole frames; a rigid body it does not use (Motive may
    stream more, e.g. a wand) must not hold the frame back until the sync window closes."""
    from equimus_control.estimator_node import EstimatorNode

    rclpy.init()
    try:
        got = []
        node = EstimatorNode(subscribe=False, downstream=lambda ns, q, v: got.append((ns, q, v)))
        level = ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))
        frame = [('wand', level), ('base', level), ('thigh', level), ('calf', level)]
        node.on_frame(1_000_000_000, frame)
        assert [g[0] for g in got] == [1_000_000_000]
        assert len(got[0][1]) == len(got[0][2]) == 2
        node.on_frame(1_000_000_000, frame)  # the same stamp again: already done
        assert len(got) == 1
        node.destroy_node()
    finally:
        rclpy.shutdown()
