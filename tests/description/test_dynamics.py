"""The analytic leg dynamics the LTV MPC linearises (equimus_description.dynamics): the batched
actuation Jacobian and its joint-angle derivatives, and the derivatives of θ̈, against finite
differences; its statics against equimus_description.statics."""

import numpy as np
import pytest

from equimus_description import kinematics as K
from equimus_description import statics
from equimus_description.dynamics import DynamicParams, LegDynamics
from equimus_description.leg import load_leg

RNG = np.random.default_rng(11)
POSES = np.column_stack([RNG.uniform(1.0, 2.0, 16), RNG.uniform(0.05, 1.25, 16)])


# muscles whose area changes with length (pressure stiffening), beyond what a fit finds
STIFFENING = {'actuators.maa.area_slope': -12.0, 'actuators.baa.area_slope': 4.0}
# and damped the more the higher their pressure
DAMPED = {**STIFFENING, 'actuators.maa.c_per_kpa': 0.6, 'actuators.baa.c_per_kpa': 1.9}


@pytest.fixture(scope='module', params=['default', 'fit', 'stiffening', 'pressure-damped'])
def leg(request, repo_dir):
    if request.param == 'default':
        return load_leg()
    if request.param == 'stiffening':
        return load_leg(overrides=STIFFENING)
    if request.param == 'pressure-damped':
        return load_leg(overrides=DAMPED)
    return load_leg(overrides=repo_dir / 'config' / 'leg_fit.yaml')


@pytest.fixture(scope='module')
def dyn(leg):
    return LegDynamics(DynamicParams.from_leg(leg))


def test_batched_actuation_matches_the_pose_by_pose_one():
    lengths, J, H = K.actuation_derivatives_batch(POSES)
    for i, q in enumerate(POSES):
        l1, J1, H1 = K.actuation_derivatives(q)
        np.testing.assert_allclose(lengths[i], l1, rtol=1e-13)
        np.testing.assert_allclose(J[i], J1, atol=1e-13)
        np.testing.assert_allclose(H[i], H1, atol=1e-12)
    # leading axes are a batch of any shape
    l2, J2, H2 = K.actuation_derivatives_batch(POSES.reshape(4, 4, 2))
    np.testing.assert_array_equal(J2.reshape(16, 2, 2), J)


def test_batched_jacobian_and_its_angle_derivatives_match_finite_differences():
    h = 1e-6
    lengths, J, H = K.actuation_derivatives_batch(POSES)
    for i in range(2):
        dq = np.zeros(2)
        dq[i] = h
        lp, Jp, _ = K.actuation_derivatives_batch(POSES + dq)
        lm, Jm, _ = K.actuation_derivatives_batch(POSES - dq)
        np.testing.assert_allclose(J[:, :, i], (lp - lm) / (2 * h), atol=1e-8)
        np.testing.assert_allclose(H[:, :, :, i], (Jp - Jm) / (2 * h), atol=1e-7)
    assert np.all(J[:, 0, 1] == 0.0) and np.all(H[:, 0, 1, :] == 0.0)  # the MAA spans the hip
    assert np.abs(H).max() > 0.05  # the transmission is far from a constant ratio


def test_statics_of_the_dynamics_match_the_static_model(leg, dyn):
    sp = statics.StaticParams.from_leg(leg)
    P = dyn.holding_pressures(POSES)
    for i, q in enumerate(POSES):
        _, dU = statics.gravity_generalized(q, sp)
        np.testing.assert_allclose(dyn.gravity_torque(q), sp.g * dU, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(P[i], statics.holding_pressures(q, sp), rtol=1e-9, atol=1e-9)
        # at rest under the holding pressures nothing accelerates
        np.testing.assert_allclose(dyn.acceleration(q, np.zeros(2), P[i]), 0.0, atol=1e-8)


def test_mass_matrix_is_symmetric_positive_definite(dyn):
    M = dyn.mass_matrix(POSES)
    np.testing.assert_array_equal(M, np.swapaxes(M, -1, -2))
    assert np.all(np.linalg.eigvalsh(M) > 0)


def test_linearisation_matches_finite_differences(dyn):
    """∂θ̈/∂θ (through ∂M/∂θ, ∂c/∂θ, the gravity Hessian and ∂J_A/∂θ), ∂θ̈/∂θ̇, ∂θ̈/∂P."""
    n = len(POSES)
    qd = RNG.uniform(-3.0, 3.0, (n, 2))
    p = RNG.uniform(0.0, 50.0, (n, 2))
    d = dyn.derivatives(POSES, qd, p)
    np.testing.assert_allclose(d.acc, dyn.acceleration(POSES, qd, p))
    for j in range(2):
        for name, h, fd in (
            ('d_q', 1e-6, lambda e: dyn.acceleration(POSES + e, qd, p)),
            ('d_qd', 1e-5, lambda e: dyn.acceleration(POSES, qd + e, p)),
            ('d_p', 1e-4, lambda e: dyn.acceleration(POSES, qd, p + e)),
        ):
            e = np.zeros(2)
            e[j] = h
            num = (fd(e) - fd(-e)) / (2 * h)
            got = getattr(d, name)[:, :, j]
            scale = np.abs(num).max()
            np.testing.assert_allclose(got, num, atol=1e-6 * scale, err_msg=f'{name}[:, :, {j}]')


def test_dropping_the_jacobian_derivative_is_visibly_wrong(dyn, monkeypatch):
    """The ∂J_A/∂θ·T stiffness (seeds/002) is a large part of ∂θ̈/∂θ at high pressure."""
    n = len(POSES)
    qd, p = np.zeros((n, 2)), np.full((n, 2), 40.0)
    exact = dyn.derivatives(POSES, qd, p).d_q
    import equimus_description.dynamics as dm

    def no_hessian(q, g):
        lengths, J, H = K.actuation_derivatives_batch(q, g)
        return lengths, J, np.zeros_like(H)

    monkeypatch.setattr(dm, 'actuation_derivatives_batch', no_hessian)
    crude = dyn.derivatives(POSES, qd, p).d_q
    rel = np.linalg.norm(crude - exact, axis=(1, 2)) / np.linalg.norm(exact, axis=(1, 2))
    assert np.median(rel) > 0.1, rel
