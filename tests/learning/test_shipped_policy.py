"""The shipped tracking policy (config/policy_track.npz, `make policy`): a small file that loads
where the controller node loads it, observes the reference's preview as it was taught by the
LTV MPC, and in the closed loop (ControlStep, the valve driver's safety filter, the reference
sending its preview as the reference node does) tracks at most 0.7 × tuned PID's summed RMSE."""

import os
import pathlib

import numpy as np
import pytest

from equimus_control.controllers import controller_kind
from equimus_control.policy import PREVIEW_LAYOUT, PolicyConfig, PolicyController
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


def test_the_file_is_small_and_was_taught_by_the_ltv_mpc(controller):
    assert os.path.getsize(POLICY) < 1_000_000
    io = controller.mlp.io
    assert io.base == 'none' and io.layout == PREVIEW_LAYOUT and io.min_regulated_kpa == 6.0
    with np.load(POLICY) as f:
        assert str(f['meta_algo']) == 'dagger' and str(f['meta_expert']) == 'ltv_mpc'


@pytest.mark.parametrize('task', ['triangle', 'steps'])
def test_it_beats_tuned_pid_in_the_closed_loop_within_the_valve_limits(controller, task):
    """The control benchmark's harness, 8 s from rest at 0 kPa as the sim graph starts, the same
    mocap noise for both controllers."""
    from equimus_control.closed_loop import run
    from equimus_control.pid import PIDController
    from equimus_control.reference import PREVIEW_S, Waypoints, triangle_poses
    from equimus_hw.valve.stage import SimulatedDriver
    from equimus_learning.tune import read_gains
    from equimus_sim.mocap import MocapConfig, VirtualMocap
    from equimus_sim.simulator import make_simulator

    params = StaticParams.from_leg(load_leg())
    poses = triangle_poses(params) if task == 'triangle' else [[1.4, 0.8], [1.6, 0.5], [1.45, 0.55]]
    ref = Waypoints(poses, move=0.5, hold=1.5)
    pid = PIDController(params, read_gains(str(REPO / 'config/tuned_pid.yaml')))
    summed = {}
    for name, ctrl in (('policy', controller), ('tuned PID', pid)):
        sim = make_simulator(timestep=1 / 600, initial_pressures=(0.0, 0.0))
        ctrl.reset()
        r = run(
            sim,
            VirtualMocap(MocapConfig(seed=7)),
            ctrl,
            ref,
            8.0,
            actuation=SimulatedDriver(),
            preview_s=PREVIEW_S,
        )
        assert not r.vented.any()
        assert np.all((r.u >= 0.0) & (r.u <= 50.0))
        summed[name] = float(np.sum(r.rmse(skip=0.5)))
    print(f'{task}, closed loop, summed RMSE: {summed}')
    assert summed['policy'] <= 0.7 * summed['tuned PID'], summed
