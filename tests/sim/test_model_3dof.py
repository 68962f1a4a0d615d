"""Morphology generalisation (paper Sec. IV-C3): a 3-DOF leg with mono- and bi-articular actuators,
one of them spanning two moving links, built from a description, simulated, and compared with the
general Lagrangian model under a multi-pulse actuation sequence."""

import mujoco
import numpy as np

from equimus_description.leg import from_dict
from equimus_sim.lagrangian import LagrangianLeg
from equimus_sim.leg_model import LegModel

PAPER_3DOF_RMSE = (0.0035, 0.0066, 0.0041)


def rod(mass, length):
    return {
        'mass': mass,
        'com': [0.0, 0.0, -length / 2],
        'inertia': [mass * length**2 / 12, mass * length**2 / 12, 1e-6, 0, 0, 0],
    }


def three_dof():
    return {
        'name': 'leg3',
        'bodies': {
            'base': {
                'pos': [0, 0, 1.0],
                'mass': 0.2,
                'com': [0, 0, 0],
                'inertia': [1e-4, 1e-4, 1e-4, 0, 0, 0],
            },
            'thigh': {'pos': [0, 0, 0], **rod(0.09, 0.25)},
            'calf': {'pos': [0, 0, -0.25], **rod(0.10, 0.22)},
            'foot': {'pos': [0, 0, -0.22], **rod(0.08, 0.12)},
        },
        'joints': {
            'hip': {
                'parent': 'base',
                'child': 'thigh',
                'axis': [-1, 0, 0],
                'ref': np.pi / 2,
                'damping': 0.05,
                'range': [np.pi / 2 - 2.5, np.pi / 2 + 2.5],
            },
            'knee': {
                'parent': 'thigh',
                'child': 'calf',
                'axis': [-1, 0, 0],
                'ref': 0.0,
                'damping': 0.03,
                'range': [-2.5, 2.5],
            },
            # opposite axis sign on purpose: the builder and the Lagrangian must both handle it
            'ankle': {
                'parent': 'calf',
                'child': 'foot',
                'axis': [1, 0, 0],
                'ref': 0.0,
                'damping': 0.04,
                'range': [-2.5, 2.5],
            },
        },
        'actuators': {
            'hip_mono': {
                'base': {'body': 'base', 'pos': [0, 0.06, 0]},
                'tip': {'body': 'thigh', 'pos': [0, 0.02, -0.18]},
                'm': 0.12,
                'k': 250.0,
                'c': 6.0,
                'l0': 0.17,
                'area': 4e-4,
            },
            'hip_knee': {
                'base': {'body': 'base', 'pos': [0, -0.08, 0]},
                'tip': {'body': 'calf', 'pos': [0, -0.03, -0.08]},
                'm': 0.2,
                'k': 150.0,
                'c': 8.0,
                'l0': 0.31,
                'area': 4e-4,
            },
            'knee_ankle': {
                'base': {'body': 'thigh', 'pos': [0, 0.03, -0.12]},
                'tip': {'body': 'foot', 'pos': [0, 0.02, -0.1]},
                'm': 0.08,
                'k': 200.0,
                'c': 4.0,
                'l0': 0.43,
                'area': 4e-4,
            },
        },
        'sim': {'timestep': 0.001, 'integrator': 'implicitfast', 'gravity': 9.81},
    }


PULSES = [
    (0.4, [6.0, 0.0, 0.0]),
    (0.4, [0.0, 10.0, 0.0]),
    (0.4, [0.0, 0.0, 8.0]),
    (0.4, [0.0, 0.0, 0.0]),
    (0.6, [5.0, 5.0, 5.0]),
]


def test_three_dof_builds_simulates_and_matches_lagrangian():
    leg = from_dict(three_dof())
    lm = LegModel(leg)
    m = lm.model
    assert m.nu == 6 and m.neq == 6 and lm.joint_names == ['hip', 'knee', 'ankle']
    d = mujoco.MjData(m)
    q0 = np.array([np.pi / 2 + 0.2, -0.2, 0.2])
    lm.reset(d, q0)
    assert np.max(lm.loop_residuals(d)) < 1e-12
    lag = LagrangianLeg(leg)
    np.testing.assert_allclose(lm.actuator_lengths(d), lag.actuator_lengths(q0), atol=1e-12)

    mj, ref = [lm.joint_angles(d)], [q0]
    state = np.concatenate([q0, np.zeros(3)])
    worst_loop = 0.0
    for dur, F in PULSES:
        n = int(round(dur / leg.timestep))
        lm.set_forces(d, F)
        for _ in range(n):
            mujoco.mj_step(m, d)
            mj.append(lm.joint_angles(d))
            worst_loop = max(worst_loop, np.max(lm.loop_residuals(d)))
        sol = lag.simulate(state[:3], F, np.arange(n + 1) * leg.timestep, qd0=state[3:])
        ref.extend(sol.y[:3, 1:].T)
        state = sol.y[:, -1]
    mj, ref = np.array(mj), np.array(ref)
    assert np.all(np.isfinite(mj))
    assert worst_loop < 2e-4, worst_loop  # soft equality (solref 2 ms) under fast motion
    assert np.all(np.ptp(ref, axis=0) > 0.05)  # every joint moved
    rmse = np.sqrt(np.mean((mj - ref) ** 2, axis=0))
    assert np.all(rmse < np.array(PAPER_3DOF_RMSE)), rmse


def test_three_dof_pure_variant_builds():
    lm = LegModel(from_dict(three_dof()), 'pure')
    assert lm.model.ntendon == 3 and lm.model.neq == 0 and lm.model.nu == 3
    d = mujoco.MjData(lm.model)
    lm.reset(d)
    lm.set_forces(d, [3.0, 3.0, 3.0])
    for _ in range(500):
        mujoco.mj_step(lm.model, d)
    assert np.all(np.isfinite(d.qpos))
