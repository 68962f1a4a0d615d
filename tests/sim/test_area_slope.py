"""Muscles whose effective area changes with length (actuators.*.area_slope): the MuJoCo leg
applies S(l)·P at the actuator's current length, in both variants and with the valves inside
MuJoCo, its rest poses are the analytic statics' with the same S(l), and a slope of 0 builds
the model it built before the parameter existed."""

import copy

import mujoco
import numpy as np
import pytest

from equimus_description import statics
from equimus_description.leg import from_dict, load_leg
from equimus_sim.leg_model import LegModel
from equimus_sim.mjcf_builder import build_mjcf

SLOPES = {'actuators.maa.area_slope': -12.0, 'actuators.baa.area_slope': 4.0}
POSES = [(1.3, 0.4), (1.6, 0.9), (1.45, 0.2)]


def test_a_zero_slope_builds_the_model_without_the_parameter():
    leg = load_leg()
    raw = copy.deepcopy(dict(leg.raw))
    for a in raw['actuators'].values():
        a.pop('area_slope', None)
    bare = from_dict(raw)
    for variant in ('equimus', 'pure'):
        for tau in (None, 0.2):
            assert build_mjcf(leg, variant, valve_tau=tau) == build_mjcf(
                bare, variant, valve_tau=tau
            )
    assert 'affine' not in build_mjcf(leg)


@pytest.mark.parametrize('variant', ['equimus', 'pure'])
def test_the_force_is_the_area_at_the_current_length_times_the_pressure(variant):
    leg = load_leg(overrides=SLOPES)
    lm = LegModel(leg, variant=variant)
    d = mujoco.MjData(lm.model)
    acts = list(leg.actuators.values())
    p = np.array([30.0, 20.0])
    for q in POSES:
        lm.reset(d, q)
        lm.set_pressures(d, p)
        mujoco.mj_forward(lm.model, d)
        lengths = lm.actuator_lengths(d)
        want = [a.force(pk, length) for a, pk, length in zip(acts, p, lengths, strict=True)]
        for i, idx in enumerate(lm.ctrl_idx):
            np.testing.assert_allclose(d.actuator_force[idx], want[i], rtol=1e-9)
        # and not the constant area's force: the slope is visible at these poses
        assert abs(want[0] - acts[0].force(p[0])) > 0.02 * acts[0].force(p[0])


def test_the_valves_inside_mujoco_apply_the_same_area():
    leg = load_leg(overrides=SLOPES)
    m = mujoco.MjModel.from_xml_string(build_mjcf(leg, valve_tau=0.05))
    plain = LegModel(leg)
    d = mujoco.MjData(m)
    d.qpos[:] = 0.0
    d.act[:] = d.ctrl[:] = 25.0  # the valve settled at its setpoint (kPa)
    mujoco.mj_forward(m, d)
    dp = mujoco.MjData(plain.model)
    plain.set_pressures(dp, [25.0, 25.0])
    mujoco.mj_forward(plain.model, dp)
    np.testing.assert_allclose(d.actuator_force, dp.actuator_force, rtol=1e-9)


def test_rest_poses_are_the_analytic_statics_with_the_same_area():
    leg = load_leg(overrides=SLOPES)
    lm = LegModel(leg)
    sp = statics.StaticParams.from_leg(leg)
    flat = statics.StaticParams.from_leg(load_leg())
    for p in ([10.0, 5.0], [30.0, 10.0], [45.0, 3.0]):  # off the knee's stop
        q_sim = lm.static_equilibrium(p)
        q_ana = statics.equilibrium(p, sp, q0=q_sim)
        assert np.abs(q_sim - q_ana).max() < 2e-4, (p, q_sim, q_ana)
        # the holding pressures of that pose are the ones applied
        np.testing.assert_allclose(statics.holding_pressures(q_sim, sp), p, atol=0.05)
        assert np.abs(statics.equilibrium(p, flat) - q_ana).max() > 0.01  # the slope matters


def test_models_with_a_constant_area_refuse_a_slope():
    from equimus_description.limb import PlanarLimb
    from equimus_sim.lagrangian import LagrangianLeg

    leg = load_leg(overrides=SLOPES)
    for model in (PlanarLimb, LagrangianLeg):
        with pytest.raises(ValueError, match=r"actuators \['maa', 'baa'\].*constant area"):
            model(leg)
    LagrangianLeg(load_leg())  # and take a leg without one


@pytest.mark.parametrize('name', ['maa', 'baa'])
def test_a_slope_whose_area_turns_negative_in_reach_is_refused(tmp_path, name):
    """A slope steep enough that 1 + s·(l − l0) < 0 at a length the leg reaches inside its joint
    ranges (here the longest: s < 0) is one located line naming the override file; the steepest
    slope that keeps it positive there loads. Lengths from the closed-form kinematics."""
    from equimus_description import kinematics as K
    from equimus_description.leg import AREA_CHECK_POINTS, LegDescriptionError

    leg = load_leg()
    axes = [np.linspace(*leg.joints[j].range, AREA_CHECK_POINTS) for j in ('hip', 'knee')]
    col = ['maa', 'baa'].index(name)
    longest = max(K.actuator_lengths((a, b), leg.geometry)[col] for a in axes[0] for b in axes[1])
    limit = -1.0 / float(longest - leg.actuators[name].l0)  # the slope: S(longest) = 0
    fit = tmp_path / 'fit.yaml'
    fit.write_text(f'parameters:\n  actuators.{name}.area_slope: {1.05 * limit!r}\n')
    with pytest.raises(LegDescriptionError) as e:
        load_leg(overrides=fit)
    text = str(e.value)
    assert text.startswith(f'{fit}:') and f'actuators.{name}.area_slope: ' in text, text
    assert 'zero or negative' in text and '\n' not in text, text
    fit.write_text(f'parameters:\n  actuators.{name}.area_slope: {0.95 * limit!r}\n')
    kept = load_leg(overrides=fit).actuators[name]
    assert kept.area_at(longest) > 0.0
