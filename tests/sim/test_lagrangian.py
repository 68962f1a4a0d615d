"""The analytic Lagrangian model: energy bookkeeping, Eq. 4 kinetic energy, statics, massless
limit."""

import mujoco
import numpy as np
import pytest

from equimus_description import kinematics as K
from equimus_description.leg import load_leg
from equimus_sim.lagrangian import LagrangianLeg
from equimus_sim.leg_model import LegModel

LEG = load_leg()
LAG = LagrangianLeg(LEG)
RNG = np.random.default_rng(11)
STATES = [
    (np.array([RNG.uniform(0.6, 2.0), RNG.uniform(0.1, 1.5)]), RNG.normal(0, 2, 2))
    for _ in range(6)
]


def test_lengths_match_kinematics():
    for q, _ in STATES:
        np.testing.assert_allclose(
            LAG.actuator_lengths(q), K.actuator_lengths(q, LEG.geometry), atol=1e-9
        )


@pytest.mark.parametrize('q, qd', STATES)
def test_kinetic_energy_is_eq4_plus_rigid_links(q, qd):
    """½ θ̇ᵀMθ̇ against an independent sum: links (COM + rotation) and m/6 (vA·vB + vA² + vB²)."""
    M, _, _ = LAG.terms(q, qd, [0.0, 0.0])
    h = 1e-7
    g = LEG.geometry

    def pts(qq):
        return K.link_points(qq, g)

    vp = {k: (pts(q + h * qd)[k] - pts(q - h * qd)[k]) / (2 * h) for k in ('C', 'D')}
    T = 0.0
    for name, a in LEG.actuators.items():
        vB = vp['C'] if name == 'maa' else vp['D']  # the base anchor A is fixed
        T += a.m / 6 * (vB @ vB)
    # thigh and calf: COM from the YAML's (y, −z) in the link frame, rotated with the link.
    for body, origin in (
        ('thigh', lambda qq: np.zeros(2)),
        ('calf', lambda qq: pts(qq)['knee']),
    ):
        b = LEG.bodies[body]
        c0 = np.array([b.com[1], -b.com[2]])

        def com(qq, body=body, origin=origin, c0=c0):
            ang = qq[0] - np.pi / 2 if body == 'thigh' else qq[0] + qq[1] - np.pi
            R = np.array([[np.cos(ang), -np.sin(ang)], [np.sin(ang), np.cos(ang)]])
            return origin(qq) + R @ c0

        v = (com(q + h * qd) - com(q - h * qd)) / (2 * h)
        w = qd[0] if body == 'thigh' else qd[0] + qd[1]
        T += 0.5 * b.mass * v @ v + 0.5 * b.inertia[0] * w**2
    assert 0.5 * qd @ M @ qd == pytest.approx(T, rel=1e-7)


def test_energy_is_conserved_without_damping():
    cons = LagrangianLeg(
        LEG.with_overrides(
            {
                'actuators.maa.c': 0.0,
                'actuators.baa.c': 0.0,
                'joints.hip.damping': 0.0,
                'joints.knee.damping': 0.0,
            }
        )
    )
    q0, qd0 = np.array([1.1, 0.9]), np.array([1.5, -2.0])
    t = np.linspace(0, 1.0, 201)
    sol = cons.simulate(q0, [0.0, 0.0], t, qd0=qd0)
    E = [cons.energy(y[:2], y[2:]) for y in sol.y.T]
    assert np.ptp(E) < 1e-8 * abs(E[0]) + 1e-9, np.ptp(E)
    # and the motion is not trivial
    assert np.ptp(sol.y[1]) > 0.1


def test_damping_only_removes_energy():
    q0, qd0 = np.array([1.1, 0.9]), np.array([1.5, -2.0])
    t = np.linspace(0, 0.5, 101)
    sol = LAG.simulate(q0, [0.0, 0.0], t, qd0=qd0)
    E = np.array([LAG.energy(y[:2], y[2:]) for y in sol.y.T])
    assert np.all(np.diff(E) <= 1e-9) and E[-1] < E[0] - 0.01


def test_pressure_forces_enter_as_jacobian_transpose():
    # F = S·P extends the actuator: it is a negative tension, τ = −J_Aᵀ(−F) = J_Aᵀ F.
    for q, _ in STATES:
        F = np.array([12.0, 7.0])
        dQ = LAG.static_residual(q, F) - LAG.static_residual(q, [0.0, 0.0])
        np.testing.assert_allclose(dQ, K.joint_torques(q, -F, LEG.geometry), atol=1e-12)


def test_statics_balancing_forces_and_equilibrium():
    q = np.array([1.2, 1.6])
    F = LAG.balancing_forces(q)
    assert np.max(np.abs(LAG.static_residual(q, F))) < 1e-12
    qe = LAG.static_equilibrium(F, q0=q + 0.05)
    np.testing.assert_allclose(qe, q, atol=1e-9)
    assert np.all(np.linalg.eigvals(LAG.stiffness_matrix(q, F)).real > 0)
    # settling the dynamics ends at the same pose
    sol = LAG.simulate(q + np.array([0.1, -0.1]), F, np.linspace(0, 8, 3))
    np.testing.assert_allclose(sol.y[:2, -1], q, atol=1e-6)


def test_massless_limit_matches_pure_mujoco():
    """With (almost) massless actuators the Lagrangian model must equal MuJoCo's tendon baseline:
    this checks the rigid-link part of the ground truth independently of the 3-2-1 unit."""
    leg = LEG.with_overrides({'actuators.maa.m': 1e-7, 'actuators.baa.m': 1e-7})
    lag = LagrangianLeg(leg)
    lm = LegModel(leg, 'pure')
    d = mujoco.MjData(lm.model)
    q0 = np.array([1.2, 1.5])
    F = np.array([8.0, 3.0])
    lm.reset(d, q0)
    lm.set_forces(d, F)
    n = 1000
    traj = [lm.joint_angles(d)]
    for _ in range(n):
        mujoco.mj_step(lm.model, d)
        traj.append(lm.joint_angles(d))
    sol = lag.simulate(q0, F, np.arange(n + 1) * leg.timestep)
    err = np.array(traj) - sol.y[:2].T
    motion = np.ptp(sol.y[:2], axis=1)
    assert motion[0] > 0.05  # it moved
    # Agreement to 0.2 % of each joint's motion. Measured 0.04 % / 0.055 % at dt 1 ms, halving with
    # dt (MuJoCo's first-order integration error), so a model mismatch would stand out.
    assert np.all(np.max(np.abs(err), axis=0) < 0.002 * motion), (
        np.max(np.abs(err), axis=0),
        motion,
    )
