"""Muscles damped more the higher their pressure (actuators.*.c_per_kpa): at a held pressure P
the MuJoCo leg moves as one whose constant damping is c + c_per_kpa·P, in both variants and
with the valves inside MuJoCo, and 0 builds the model it built before the parameter existed."""

import copy

import mujoco
import numpy as np
import pytest

from equimus_description.leg import from_dict, load_leg
from equimus_sim.leg_model import LegModel
from equimus_sim.mjcf_builder import build_mjcf

C_PER_KPA = {'maa': 0.6, 'baa': 1.5}  # N·s/m per kPa (the knee's fit: 1.9)
P = np.array([20.0, 30.0])  # kPa, held
Q0 = (1.5, 0.9)  # off the poses these pressures hold: the leg moves


def _legs(c0: float = 4.0):
    """(the pressure-damped leg, the same with the damping at P made constant, undamped)."""
    base = {f'actuators.{a}.c': c0 for a in C_PER_KPA}
    damped = {**base, **{f'actuators.{a}.c_per_kpa': v for a, v in C_PER_KPA.items()}}
    pairs = zip(C_PER_KPA.items(), P, strict=True)
    constant = {f'actuators.{a}.c': c0 + v * p for (a, v), p in pairs}
    return load_leg(overrides=damped), load_leg(overrides=constant), load_leg(overrides=base)


def _motion(leg, variant: str, valve_tau=None, seconds: float = 0.4) -> np.ndarray:
    if valve_tau is None:
        lm = LegModel(leg, variant=variant)
        m, d = lm.model, mujoco.MjData(lm.model)
        lm.reset(d, Q0)
        lm.set_pressures(d, P)
    else:  # the valves inside MuJoCo: ctrl and the actuator state are kPa, settled at P
        lm = LegModel(leg, variant=variant)
        m = mujoco.MjModel.from_xml_string(build_mjcf(leg, variant, valve_tau=valve_tau))
        d = mujoco.MjData(m)
        lm.reset(d, Q0)
        for i, idx in enumerate(lm.ctrl_idx):
            d.ctrl[idx] = d.act[m.actuator_actadr[idx]] = P[i]
    out = []
    for _ in range(int(round(seconds / m.opt.timestep))):
        mujoco.mj_step(m, d)
        out.append(lm.joint_angles(d))
    return np.array(out)


def test_zero_builds_the_model_without_the_parameter():
    leg = load_leg()
    raw = copy.deepcopy(dict(leg.raw))
    for a in raw['actuators'].values():
        a.pop('c_per_kpa', None)
    bare = from_dict(raw)
    for variant in ('equimus', 'pure'):
        for tau in (None, 0.2):
            assert build_mjcf(leg, variant, valve_tau=tau) == build_mjcf(
                bare, variant, valve_tau=tau
            )


@pytest.mark.parametrize(
    ('variant', 'valve_tau'), [('equimus', None), ('pure', None), ('equimus', 0.05)]
)
def test_the_damping_at_a_held_pressure_is_c_plus_c_per_kpa_times_it(variant, valve_tau):
    damped, constant, undamped = _legs()
    got = _motion(damped, variant, valve_tau)
    want = _motion(constant, variant, valve_tau)
    assert np.abs(got - want).max() < 2e-4, np.abs(got - want).max()
    # and the pressure's damping is visible: without it the leg moves otherwise
    assert np.abs(_motion(undamped, variant, valve_tau) - want).max() > 20 * 2e-4


def test_a_negative_value_is_refused():
    with pytest.raises(ValueError, match='c_per_kpa'):
        load_leg(overrides={'actuators.baa.c_per_kpa': -0.1})


def test_models_whose_damping_does_not_depend_on_pressure_refuse_it():
    from equimus_identification.crosscheck import _spec
    from equimus_sim.lagrangian import LagrangianLeg

    leg = load_leg(overrides={'actuators.baa.c_per_kpa': 1.0})
    with pytest.raises(ValueError, match=r"actuators \['baa'\].*does not depend on pressure"):
        LagrangianLeg(leg)
    with pytest.raises(ValueError, match=r"actuators \['baa'\].*cross-check"):
        _spec(leg, 0.002)
    LagrangianLeg(load_leg())  # and take a leg without one
