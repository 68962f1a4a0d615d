"""The shipped tracking policy (config/policy_track.npz, `make policy`): a small file that loads
where the controller node loads it, is the residual on the tuned PID it was trained on, and runs
in the closed loop through the ControlStep and the valve driver's safety filter."""

import os
import pathlib

import numpy as np
import pytest

from equimus_control.controllers import controller_kind
from equimus_control.policy import RESIDUAL_LAYOUT, PolicyConfig, PolicyController
from equimus_description.leg import load_leg
from equimus_description.statics import StaticParams

# the checkout's root: `colcon test` runs each package's tests from its own folder
REPO = pathlib.Path(__file__).resolve().parents[2]

POLICY = str(REPO / 'config/policy_track.npz')


@pytest.fixture(scope='module')
def controller() -> PolicyController:
    leg = load_leg()
    ctrl = controller_kind('policy').build(
        PolicyConfig(POLICY), StaticParams.from_leg(leg), leg, lambda: None
    )
    assert isinstance(ctrl, PolicyController)
    return ctrl


def test_the_file_is_small_and_is_a_residual_on_the_tuned_pid(controller):
    from equimus_learning.tune import read_gains

    assert os.path.getsize(POLICY) < 1_000_000
    io = controller.mlp.io
    assert io.base == 'pid' and io.layout == RESIDUAL_LAYOUT
    tuned = read_gains(str(REPO / 'config/tuned_pid.yaml'))
    assert (io.gains.kp, io.gains.ki, io.gains.kd) == (tuned.kp, tuned.ki, tuned.kd)
    with np.load(POLICY) as f:
        assert str(f['meta_algo']) == 'ppo' and int(f['meta_steps']) > 1_000_000


@pytest.mark.parametrize('task', ['triangle', 'steps'])
def test_it_tracks_in_the_closed_loop_within_the_valve_limits(controller, task):
    """The control benchmark's harness (ControlStep + SimulatedDriver), 6 s from rest at 0 kPa
    as the sim graph starts; the residual moves the command away from the PID's."""
    from equimus_control.closed_loop import run
    from equimus_control.reference import Waypoints, triangle_poses
    from equimus_hw.valve.stage import SimulatedDriver
    from equimus_sim.mocap import MocapConfig, VirtualMocap
    from equimus_sim.simulator import make_simulator

    params = StaticParams.from_leg(load_leg())
    poses = triangle_poses(params) if task == 'triangle' else [[1.4, 0.8], [1.6, 0.5], [1.45, 0.55]]
    ref = Waypoints(poses, move=0.5, hold=1.5)
    sim = make_simulator(timestep=1 / 600, initial_pressures=(0.0, 0.0))
    mocap = VirtualMocap(MocapConfig(seed=7))
    controller.reset()
    r = run(sim, mocap, controller, ref, 6.0, actuation=SimulatedDriver())
    rmse = r.rmse(skip=1.0)
    print(f'shipped policy, {task}, closed loop: RMSE {rmse}')
    assert not r.vented.any()
    assert np.all((r.u >= 0.0) & (r.u <= 50.0))
    assert np.all(rmse < 0.05), rmse
