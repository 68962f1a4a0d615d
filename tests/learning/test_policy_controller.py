"""A learned policy as `controller:=policy`: the .npz format, the controller, and the sim graph.

The policy file is made by the test itself with `equimus_learning.train.distil_pid` (NumPy only,
seconds), so none of this needs the RL libraries.
"""

import json

import numpy as np
import pytest

from equimus_control.controller import Estimate, Reference
from equimus_control.controllers import controller_kind
from equimus_control.policy import (
    MLP,
    OBS_SIZE,
    PolicyConfig,
    PolicyController,
    load_policy,
    save_mlp,
)
from equimus_description.config import ConfigError
from equimus_description.leg import load_leg
from equimus_description.statics import StaticParams


@pytest.fixture(scope='module')
def policy_file(tmp_path_factory):
    from equimus_learning.train import DistilConfig, distil_pid

    path = tmp_path_factory.mktemp('policy') / 'distilled.npz'
    save_mlp(path, distil_pid(DistilConfig(episodes=9)), algo='distil')
    return path


def test_npz_round_trip_and_controller_output(tmp_path):
    rng = np.random.default_rng(0)
    mlp = MLP(
        (rng.normal(size=(OBS_SIZE, 8)), rng.normal(size=(8, 2))),
        (rng.normal(size=8), rng.normal(size=2)),
        'relu',
        rng.normal(size=OBS_SIZE),
        rng.uniform(0.5, 2, OBS_SIZE),
    )
    save_mlp(tmp_path / 'p.npz', mlp)
    back = load_policy(tmp_path / 'p.npz')
    x = rng.normal(size=(5, OBS_SIZE))
    assert np.allclose(back(x), mlp(x))
    clipped = MLP(mlp.weights, mlp.biases, 'relu', mlp.obs_mean, mlp.obs_std, output='clip')
    save_mlp(tmp_path / 'c.npz', clipped)
    y = load_policy(tmp_path / 'c.npz')(x * 5)
    assert np.allclose(y, clipped(x * 5)) and np.any(np.abs(y) == 1.0)  # clipped, not squashed
    ctrl = PolicyController(back)
    est, ref = Estimate(np.array([1.4, 0.8]), np.zeros(2), 0.0), Reference(np.ones(2), np.zeros(2))
    out = ctrl.step(est, ref, 1 / 120, 30.0)
    assert np.all(out.pressures >= 0) and np.all(out.pressures <= 30.0)
    assert np.allclose(ctrl.u_prev, out.pressures)  # the next observation carries it
    ctrl.reset()
    assert ctrl.u_prev is None


def test_bad_policy_files_say_what_to_do(tmp_path):
    params = StaticParams.from_leg(load_leg())
    kind = controller_kind('policy')
    with pytest.raises(ConfigError, match='needs policy_file'):
        kind.build(PolicyConfig(''), params, load_leg(), lambda: None)
    with pytest.raises(ConfigError, match='does not exist'):
        kind.build(PolicyConfig(str(tmp_path / 'none.npz')), params, load_leg(), lambda: None)
    np.savez(tmp_path / 'other.npz', W0=np.zeros((3, 2)), b0=np.zeros(2), obs_layout=['a', 'b'])
    with pytest.raises(ConfigError, match='observation layout'):
        load_policy(tmp_path / 'other.npz')
    (tmp_path / 'p.zip').write_bytes(b'PK')
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match='rl extra'):
            load_policy(tmp_path / 'p.zip')


def test_policy_tracks_in_the_offline_closed_loop(policy_file):
    """The same ControlStep + SimulatedDriver harness as the control benchmark."""
    from equimus_control.closed_loop import run
    from equimus_control.reference import Waypoints, triangle_poses
    from equimus_description.statics import holding_pressures
    from equimus_hw.valve.stage import SimulatedDriver
    from equimus_sim.mocap import MocapConfig, VirtualMocap
    from equimus_sim.simulator import make_simulator

    params = StaticParams.from_leg(load_leg())
    ref = Waypoints(triangle_poses(params), move=0.5, hold=1.5)
    q0 = ref(0.0)[0]
    p0 = np.clip(holding_pressures(q0, params), 0, 50)
    sim = make_simulator(timestep=1 / 1200, initial_q=q0, initial_pressures=tuple(p0))
    mocap = VirtualMocap(MocapConfig(position_noise=0.0003, orientation_noise=0.002, seed=7))
    ctrl = PolicyController(load_policy(policy_file))
    r = run(sim, mocap, ctrl, ref, 6.0, actuation=SimulatedDriver())
    rmse = r.rmse(skip=0.5)
    print(f'distilled policy, offline loop: RMSE {rmse}')
    assert not r.vented.any()
    assert np.all(rmse < np.array([0.07, 0.12])), rmse  # measured 0.028, 0.053


@pytest.mark.slow
def test_policy_drives_the_sim_graph(policy_file, tmp_path):
    """`controller:=policy policy_file:=…` through the real graph (DDS, valve driver, recorder)."""
    pytest.importorskip('rclpy')
    from equimus_bringup import main_job
    from equimus_record import bag

    rc = main_job.main(
        [
            '--out',
            str(tmp_path),
            '--mode',
            'sim',
            '--controller',
            'policy',
            '--duration',
            '8',
            '--video',
            '--set',
            f'policy_file:={policy_file}',
        ]
    )
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    # make run VIDEO=1: the run as an mp4 beside tracking.png, 30 frames per sim second
    import imageio_ffmpeg

    video = run_dir / 'video.mp4'
    reader = imageio_ffmpeg.read_frames(str(video))
    meta = next(reader)
    assert meta['size'] == (640, 480) and sum(1 for _ in reader) in range(225, 245)
    log = (run_dir / 'graph.log').read_text()
    assert rc == 0, log[-3000:]
    assert 'policy controller ready' in log, log[-3000:]
    counts = bag.topic_counts(run_dir / 'bag')
    assert 105 < counts['/valve/command'][2] < 135, counts['/valve/command']
    summary = json.loads((run_dir / 'summary.json').read_text())
    print('distilled policy in the sim graph:', summary['rmse'])
    # measured 0.036, 0.069 (the PID in the same graph: 0.042, 0.074 over 15 s)
    assert summary['rmse']['hip'] < 0.08 and summary['rmse']['knee'] < 0.15, summary
    assert summary['pressure_min'] >= 0.0 and summary['pressure_max'] <= 50.0


def test_controller_node_without_a_policy_file_exits_2_with_the_fix():
    """The node reports the missing file as a parameter error (exit 2, no traceback)."""
    import subprocess
    import sys

    pytest.importorskip('rclpy')
    proc = subprocess.run(
        [
            sys.executable,
            '-m',
            'equimus_control.controller_node',
            '--ros-args',
            '-p',
            'controller:=policy',
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert 'policy_file' in out and 'Traceback' not in out, out


@pytest.mark.parametrize('mode', ['sim', 'hardware'])
def test_policy_file_argument_reaches_the_controller_in_both_graphs(mode, tmp_path, monkeypatch):
    from equimus_bringup.graph import describe_graph

    monkeypatch.chdir(tmp_path)

    def controller_parameters(overrides):
        # The sim graph is composed by default: the controller is a node of sim_graph.
        specs = {s.name: s for s in describe_graph(mode, overrides)}
        if 'controller' in specs:
            return specs['controller'].parameters
        return specs['sim_graph'].node_parameters['controller']

    params = controller_parameters({'controller': 'policy', 'policy_file': 'p.npz'})
    assert params['controller'] == 'policy'
    assert params['policy_file'] == str(tmp_path / 'p.npz')  # absolute: nodes may run elsewhere
    assert 'policy_file' not in controller_parameters({})
