"""The 3-DOF limb of config/limb_3dof.yaml under the general PID (equimus_control.limb_pid) in
the plain closed loop: real MuJoCo with the valve lag, virtual mocap of the description's four
bodies, the estimator on the description's three hinges, the one ControlStep with its guards."""

import pathlib

import numpy as np
import pytest

from equimus_control.closed_loop import run
from equimus_control.controller import Estimate, Reference
from equimus_control.estimation import EstimatorConfig, hinges_from_description
from equimus_control.limb_pid import LimbPIDController
from equimus_control.pid import PIDController, PIDGains, check_joint_count
from equimus_control.step import ControlStep
from equimus_control.supervisor import SafetyConfig
from equimus_description.config import ConfigError
from equimus_description.leg import load_leg
from equimus_description.limb import PlanarLimb
from equimus_description.statics import StaticParams, holding_pressures
from equimus_sim.mocap import MocapConfig, VirtualMocap
from equimus_sim.simulator import make_simulator

LIMB = pathlib.Path(__file__).resolve().parents[2] / 'config' / 'limb_3dof.yaml'
GAINS = PIDGains(
    kp=(3.0, 1.5, 0.5), ki=(4.0, 2.0, 0.5), kd=(0.15, 0.06, 0.02), i_max=(0.5, 0.3, 0.1)
)
SAFETY = SafetyConfig(safe_min=(0.6, -0.1, 0.2), safe_max=(2.5, 2.0, 2.9))
POSES = (np.array([1.5, 0.6, 1.6]), np.array([1.65, 0.4, 1.3]))


def test_three_joints_tracked_in_closed_loop():
    leg = load_leg(LIMB)
    sim = make_simulator(LIMB, initial_pressures=[10.0, 10.0, 10.0])
    bodies, joints = hinges_from_description(leg)
    assert bodies == ['base', 'thigh', 'calf', 'foot']

    def reference(t):
        return (POSES[0] if t < 4.0 else POSES[1]), np.zeros(3)

    r = run(
        sim,
        VirtualMocap(MocapConfig(), bodies=bodies),
        LimbPIDController(PlanarLimb(leg), GAINS),
        reference,
        8.0,
        est_cfg=EstimatorConfig(joints=joints),
        safety=SAFETY,
        bodies=bodies,
    )
    assert not r.vented.any()
    assert np.abs(r.q_est - r.q).max() < 0.01  # the estimator follows all three hinges
    for lo, hi in ((3.0, 3.99), (7.0, 8.0)):  # settled on each pose
        m = (r.t > lo) & (r.t <= hi)
        err = np.abs(r.q[m] - r.q_ref[m]).max(axis=0)
        assert np.all(err < 0.02), (lo, err)
    assert r.u.shape[1] == 3 and np.all((r.u >= 0) & (r.u <= 50))
    # every muscle works: the commands differ between the two poses
    assert np.all(np.abs(r.u[r.t > 7].mean(0) - r.u[(r.t > 3) & (r.t < 4)].mean(0)) > 0.1)


def test_gains_and_guards_must_match_the_joint_count():
    limb = PlanarLimb(load_leg(LIMB))
    with pytest.raises(ConfigError, match='3 joints'):
        LimbPIDController(limb, PIDGains())  # the 2-joint defaults
    with pytest.raises(ConfigError, match='3 joints'):
        ControlStep(LimbPIDController(limb, GAINS), SafetyConfig(), n_joints=3, n_valves=3)
    with pytest.raises(ConfigError, match='2 joints'):
        PIDController(StaticParams(), GAINS)
    with pytest.raises(ConfigError, match='as many as kp'):
        PIDGains(kp=(1.0, 1.0, 1.0))


def test_limb_pid_on_the_two_joint_leg_agrees_with_the_closed_form_pid():
    """The general law on the 2-joint leg gives the closed-form PID's pressures (where neither
    the feedforward nor the command saturates: at a bound the two resolve the feedforward
    differently, clip vs bounded least squares)."""
    leg = load_leg()
    general = LimbPIDController(PlanarLimb(leg), PIDGains())
    closed = PIDController(StaticParams.from_leg(leg), PIDGains())
    rng = np.random.default_rng(0)
    compared = 0
    for _ in range(40):
        q = np.array([rng.uniform(1.2, 1.9), rng.uniform(0.3, 1.2)])
        ref = Reference(q + rng.uniform(-0.05, 0.05, 2), np.zeros(2), 0.0)
        est = Estimate(q, rng.uniform(-0.2, 0.2, 2), 0.0)
        a = general.step(est, ref, 1 / 120, 50.0)
        b = closed.step(est, ref, 1 / 120, 50.0)
        hold = holding_pressures(ref.q, closed.params)
        if b.saturated.any() or np.any(hold < 0) or np.any(hold > 50):
            general.reset()
            closed.reset()
            continue
        compared += 1
        np.testing.assert_allclose(a.pressures, b.pressures, atol=0.05)
    assert compared >= 10


def test_controllers_that_need_the_two_joint_leg_say_so():
    from equimus_control.controllers import build_limb_controller, controller_kind, is_rig_leg

    leg = load_leg(LIMB)
    assert not is_rig_leg(leg) and is_rig_leg(load_leg())
    for name in ('mpc', 'sampling', 'policy'):
        with pytest.raises(ConfigError, match=r'needs the 2-joint EquiMus leg.*pid or open_loop'):
            build_limb_controller(name, controller_kind(name).config(), leg, 1.0)
    ff = build_limb_controller('open_loop', None, leg, 1.0)
    ref = Reference(POSES[0], np.zeros(3), 0.0)
    out = ff.step(Estimate(POSES[0], np.zeros(3), 0.0), ref, 1 / 120, 50.0)
    np.testing.assert_allclose(out.pressures, PlanarLimb(leg).holding_pressures(POSES[0])[0])


def test_the_rig_board_refuses_another_limb():
    from equimus_hw.valve.config import DriverConfig
    from equimus_hw.valve.driver_node import _channels

    assert _channels(DriverConfig(board='sim', leg_description=str(LIMB))) == ('maa', 'baa', 'faa')
    assert _channels(DriverConfig(board='serial')) == ('maa', 'baa')
    with pytest.raises(ConfigError, match='board:=sim only'):
        _channels(DriverConfig(board='serial', leg_description=str(LIMB)))


def test_a_running_node_refuses_a_guard_or_gain_with_the_wrong_joint_count():
    """What the controller node binds: `ros2 param set` builds the new config with
    dataclasses.replace, which now runs the joint-count check too."""
    import dataclasses

    from equimus_control.supervisor import check_joints
    from equimus_description.config import with_check

    safety = with_check(SafetyConfig(), lambda c: check_joints(c, 2))
    assert isinstance(safety, SafetyConfig)
    assert dataclasses.replace(safety, safe_min=(0.5, 0.0)).safe_min == (0.5, 0.0)
    with pytest.raises(ConfigError, match='2 joints'):
        dataclasses.replace(safety, safe_min=(0.5, 0.0, 0.1), safe_max=(2.0, 2.0, 2.0))
    gains = with_check(GAINS, lambda c: check_joint_count(c, 3))
    with pytest.raises(ConfigError, match='3 joints'):
        dataclasses.replace(gains, kp=(1.0, 1.0), ki=(1.0, 1.0), kd=(0.1, 0.1), i_max=(1, 1))
    with pytest.raises(ConfigError, match='3 joints'):
        with_check(PIDGains(), lambda c: check_joint_count(c, 3))
