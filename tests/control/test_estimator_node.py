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


class _Probe:
    """An estimator process (`max_hold` as given) and a node that sends it pose triples and
    keeps what it publishes."""

    def __init__(self, max_hold: float) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import PoseStamped
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import JointState

        from equimus_ros.qos import DIAG_QOS

        self.proc = subprocess.Popen(
            [
                sys.executable,
                '-m',
                'equimus_control.estimator_node',
                '--ros-args',
                '-p',
                f'max_hold:={max_hold}',
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        rclpy.init()
        self.node = rclpy.create_node('estimator_probe')
        self.states: list = []
        self.diags: list = []
        self.node.create_subscription(
            JointState, '/joint_states', self.states.append, qos_profile_sensor_data
        )
        self.node.create_subscription(
            DiagnosticArray,
            '/diagnostics',
            lambda m: self.diags.extend(s for s in m.status if s.name.startswith('estimator')),
            DIAG_QOS,
        )
        self.msg_type = PoseStamped
        self.pubs = {
            b: self.node.create_publisher(PoseStamped, f'/mocap/{b}/pose', qos_profile_sensor_data)
            for b in ('base', 'thigh', 'calf')
        }
        self.frame = 0

    def send(self, q1: float, q2: float, lost: bool = False) -> None:
        self.frame += 1
        sec, ns = divmod(self.frame * 8_333_333, 1_000_000_000)
        quats = {
            'base': (0.0, 0.0, 0.0, 1.0),
            'thigh': _quat_about_minus_x(q1 - math.pi / 2),
            'calf': _quat_about_minus_x(q1 + q2 - math.pi),
        }
        for b, pub in self.pubs.items():
            m = self.msg_type()
            m.header.stamp.sec, m.header.stamp.nanosec = sec, ns
            m.header.frame_id = 'mocap'
            x, y, z, w = quats[b]
            if lost and b == 'calf':
                x = y = z = w = math.nan
                m.pose.position.x = m.pose.position.y = m.pose.position.z = math.nan
            m.pose.orientation.x, m.pose.orientation.y = x, y
            m.pose.orientation.z, m.pose.orientation.w = z, w
            pub.publish(m)
        rclpy.spin_once(self.node, timeout_sec=0.005)

    def spin(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            rclpy.spin_once(self.node, timeout_sec=0.01)

    def until_state(self, q1: float, q2: float) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not self.states:
            self.send(q1, q2)
            time.sleep(0.008)
        assert self.states, 'estimator published nothing'

    def close(self) -> str:
        self.node.destroy_node()
        rclpy.try_shutdown()
        self.proc.send_signal(signal.SIGINT)
        return self.proc.communicate(timeout=15)[0]


def test_estimator_node_angles_hold_and_invalid():
    probe = _Probe(max_hold=0.05)
    try:
        probe.until_state(1.4, 0.8)
        for _ in range(30):
            probe.send(1.4, 0.8)
        probe.spin(0.5)
        last = probe.states[-1]
        assert list(last.name) == ['hip', 'knee']
        assert np.allclose(last.position, [1.4, 0.8], atol=1e-6)
        n0 = len(probe.states)
        for _ in range(12):  # 100 ms of lost calf tracking
            probe.send(1.4, 0.8, lost=True)
        probe.spin(0.5)
        lost = probe.states[n0:]
        assert lost, 'nothing published while tracking was lost'
        held = [s for s in lost if np.all(np.isfinite(s.position))]
        invalid = [s for s in lost if np.all(np.isnan(s.position))]
        assert held and np.allclose(held[0].position, [1.4, 0.8]) and held[0].velocity[0] == 0.0
        assert invalid and lost[-1] in invalid
        levels = {d.level for d in probe.diags}
        assert bytes([2]) in levels or 2 in levels, levels  # ERROR reported
    finally:
        out = probe.close()
    assert 'Traceback' not in out, out


def _level(status) -> int:
    return status.level[0] if isinstance(status.level, bytes) else int(status.level)


def test_frames_that_stop_coming_make_the_diagnostics_stale():
    """A stream that stops leaves no last frame to say so: the estimator's /diagnostics must go
    from "valid" to ERROR stale once no frame has come for longer than max_hold, not go on
    repeating the last frame's status (seen in a kill soak: "valid" for 35 s without frames)."""
    probe = _Probe(max_hold=0.2)
    try:
        probe.until_state(1.4, 0.8)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
            d.message == 'valid' and _level(d) == 0 for d in probe.diags
        ):
            probe.send(1.4, 0.8)
            time.sleep(0.008)
        assert any(d.message == 'valid' for d in probe.diags), [d.message for d in probe.diags]
        n0 = len(probe.diags)
        probe.spin(2.5)  # nothing sent: the once-a-second report comes at least twice
        after = probe.diags[n0:]
        assert after, 'no /diagnostics after the frames stopped'
        last = after[-1]
        values = {kv.key: kv.value for kv in last.values}
        assert _level(last) == 2 and last.message.startswith('stale: no mocap frame for'), [
            (d.message, d.level) for d in after
        ]
        assert float(values['last_frame_age_s']) > 0.2, values
        assert 'natnet_bridge' in last.message
    finally:
        out = probe.close()
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
