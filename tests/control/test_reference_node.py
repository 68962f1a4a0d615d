"""The reference node over real rclpy: its parameters come from control.yaml, the leg's parameter
set shapes the triangle, the sine's amplitude and frequency follow `ros2 param set` without a
phase jump, and the trajectory's shape is read-only."""

import math
import threading

import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy')


@pytest.fixture
def reference(repo_dir, request):
    from rclpy.executors import SingleThreadedExecutor

    from equimus_control.reference_node import ReferenceNode

    rclpy.init(
        args=[
            '--ros-args',
            '--params-file',
            str(repo_dir / 'config' / 'control.yaml'),
            *request.param,
        ]
    )
    node = ReferenceNode()
    client = rclpy.create_node('reference_param_client')
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    yield node, client
    executor.shutdown()
    client.destroy_node()
    node.destroy_node()
    rclpy.try_shutdown()


@pytest.mark.parametrize('reference', [['-p', 'reference:trajectory:=sine']], indirect=True)
def test_sine_amplitude_and_frequency_apply_at_run_time_with_a_continuous_phase(reference):
    from paramclient import set_parameters

    node, client = reference
    assert node.traj.frequency == 0.25 and tuple(node.traj.amplitude) == (0.1, 0.15)
    t = 3.7
    before = node.traj(t)[0]
    node.t0_ns = node.get_clock().now().nanoseconds - int(t * 1e9)
    (ok,) = set_parameters(client, 'reference', sine_frequency=0.5)
    assert ok.successful, ok.reason
    assert node.traj.frequency == 0.5
    # the phase is continuous: the new sine has the old one's angle at the switch time t_a,
    # which lies between the request and its answer
    t_answer = node._elapsed()
    w_old, w_new = 2 * math.pi * 0.25, 2 * math.pi * 0.5
    phase = np.asarray(node.traj.phase)
    t_a = phase[0] / (w_old - w_new)
    assert t - 0.01 <= t_a <= t_answer + 0.01, (t, t_a, t_answer)
    assert phase[1] - phase[0] == pytest.approx(math.pi / 2)
    assert np.allclose(
        node.traj(t_a)[0], [1.5 + 0.1 * math.sin(w_old * t_a), 0.6 + 0.15 * math.cos(w_old * t_a)]
    )
    assert np.all(np.abs(node.traj(t_answer)[0] - before) < 0.15)
    (ok,) = set_parameters(client, 'reference', sine_amplitude=[0.2, 0.05])
    assert ok.successful and tuple(node.traj.amplitude) == (0.2, 0.05)
    (big,) = set_parameters(client, 'reference', sine_amplitude=[2.0, 0.05])
    assert not big.successful and 'sine_amplitude' in big.reason
    (ro,) = set_parameters(client, 'reference', sine_center=[1.0, 1.0])
    assert not ro.successful and 'read-only' in ro.reason
    assert tuple(node.traj.amplitude) == (0.2, 0.05)


@pytest.mark.parametrize(
    'reference', [['-p', 'reference:leg_parameter_set:=table_v_static']], indirect=True
)
def test_the_triangle_follows_the_leg_parameter_set(reference):
    from paramclient import set_parameters

    from equimus_control.reference_node import ReferenceParams

    node, client = reference
    as_is = ReferenceParams().trajectory_fn().poses
    assert node.params.config.leg_parameter_set == 'table_v_static'
    assert np.abs(np.asarray(node.traj.poses) - as_is).max() > 0.02
    # the sine's runtime parameters would change nothing on the triangle: refused, with the reason
    (ignored,) = set_parameters(client, 'reference', sine_frequency=0.5)
    assert not ignored.successful and 'trajectory:=sine' in ignored.reason, ignored.reason


def test_an_unknown_parameter_set_or_trajectory_stops_the_node_with_the_reason():
    import subprocess
    import sys

    for arg, text in (
        ('leg_parameter_set:=nope', "no parameter set 'nope'"),
        ('trajectory:=zigzag', "trajectory='zigzag': use triangle, step"),
    ):
        proc = subprocess.run(
            [sys.executable, '-m', 'equimus_control.reference_node', '--ros-args', '-p', arg],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert text in proc.stderr and 'Traceback' not in proc.stderr


@pytest.mark.parametrize('reference', [['-p', 'reference:trajectory:=triangle']], indirect=True)
def test_the_preview_is_the_trajectorys_future_as_a_controller_reads_it(reference):
    """/reference/preview over DDS, read as the controller node reads it: rows (t, angles,
    velocities) of the trajectory, 1/60 s apart over 0.45 s from the time its tick's reference
    carries, at ~10 Hz; a row of the wrong width is refused with a warning."""
    import time

    from std_msgs.msg import Float64MultiArray

    from equimus_control.controller_node import ControllerNode
    from equimus_control.reference import PREVIEW_SPACING_S
    from equimus_description.interface import PREVIEW_COLUMNS, REFERENCE_PREVIEW
    from equimus_ros.qos import subscription

    node, client = reference
    got: list[Float64MultiArray] = []
    subscription(client, Float64MultiArray, REFERENCE_PREVIEW, got.append)
    end = time.monotonic() + 10.0
    while len(got) < 5 and time.monotonic() < end:
        rclpy.spin_once(client, timeout_sec=0.1)
    assert len(got) >= 5, len(got)
    msg = got[-1]
    assert [d.label for d in msg.layout.dim] == ['point', ','.join(PREVIEW_COLUMNS)]
    rows = np.reshape(msg.data, (-1, len(PREVIEW_COLUMNS)))
    assert len(rows) == 28  # 0.45 s at 1/60 s, both ends
    np.testing.assert_allclose(np.diff(rows[:, 0]), PREVIEW_SPACING_S, atol=1e-6)
    t0 = node.t0_ns * 1e-9
    for row in rows:
        q, qd = node.traj(row[0] - t0)
        np.testing.assert_allclose(row[1:3], q, atol=1e-6)  # 1e-6 s of float time
        np.testing.assert_allclose(row[3:5], qd, atol=1e-5)
    starts = [m.data[0] for m in got]
    assert 1 / 20 < float(np.median(np.diff(starts))) < 1 / 5  # every 12th tick of 120 Hz
    # the controller node's handler gives its ControlStep that future on the same clock
    holder = _Holder()
    ControllerNode._on_preview(holder, msg)
    preview = holder.step.preview
    assert preview is not None and holder.warnings == []
    q_mid, _ = preview.sample(rows[0, 0] + 0.1)
    np.testing.assert_allclose(q_mid, node.traj(rows[0, 0] - t0 + 0.1)[0], atol=2e-4)
    bad = Float64MultiArray(layout=msg.layout, data=list(msg.data[:-1]))
    ControllerNode._on_preview(holder, bad)
    assert holder.step.preview is preview and len(holder.warnings) == 1


class _Holder:
    """What ControllerNode._on_preview touches: its lock, its ControlStep, its logger and
    `on_preview` (the composed sim graph's direct call)."""

    def __init__(self):
        from equimus_control.pid import PIDController
        from equimus_control.step import ControlStep
        from equimus_description.leg import load_leg
        from equimus_description.statics import StaticParams

        self._lock = threading.Lock()
        self.step = ControlStep(PIDController(StaticParams.from_leg(load_leg())))
        self.warnings: list[str] = []

    def on_preview(self, rows):
        from equimus_control.controller_node import ControllerNode

        ControllerNode.on_preview(self, rows)

    def get_logger(self):
        return self

    def warning(self, text, **_):
        self.warnings.append(text)


def test_waypoints_without_a_segment_length_are_refused_at_configuration():
    """move:=0 hold:=0 would divide by zero at the first tick: refused with one line (exit 2)."""
    from equimus_control.reference_node import ReferenceParams
    from equimus_description.config import ConfigError

    with pytest.raises(ConfigError, match='move=0, hold=0'):
        ReferenceParams(move=0.0, hold=0.0)
    assert ReferenceParams(trajectory='sine', move=0.0, hold=0.0).hold == 0.0  # sine: unused
