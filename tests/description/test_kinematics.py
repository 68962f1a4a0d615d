"""The analytic actuation map against geometry facts and finite differences."""

import numpy as np
import pytest

from equimus_description import kinematics as K

G = K.PlanarGeometry()
RNG = np.random.default_rng(3)
POSES = [
    np.array([RNG.uniform(np.pi / 6, 2 * np.pi / 3), RNG.uniform(0, np.pi / 2)]) for _ in range(20)
]


def test_lengths_at_hanging_pose_match_hand_computation():
    # θ = (90°, 90°): C = b1·(cos 81.87°, sin 81.87°); D = (0, a1) + b2·(cos 210°, sin 210°).
    c = 0.21213 * np.array([np.cos(np.deg2rad(81.87)), np.sin(np.deg2rad(81.87))])
    d = np.array([0.0, 0.25]) + 0.10 * np.array([np.cos(np.deg2rad(210)), np.sin(np.deg2rad(210))])
    want = [np.hypot(c[0] - 0.06, c[1]), np.hypot(d[0] + 0.10, d[1])]
    np.testing.assert_allclose(K.actuator_lengths([np.pi / 2, np.pi / 2]), want, rtol=1e-12)
    # The MAA at rest length (0.174 m) is near the hanging pose: sanity of units and anchors.
    assert 0.15 < want[0] < 0.22 and 0.15 < want[1] < 0.25


def test_maa_spans_hip_only():
    for q in POSES:
        assert K.actuation_jacobian(q, G)[0, 1] == 0.0


@pytest.mark.parametrize('q', POSES)
def test_jacobian_and_hessian_match_finite_differences(q):
    h = 1e-6
    lengths, J, H = K.actuation_derivatives(q, G)
    np.testing.assert_allclose(lengths, K.actuator_lengths(q, G), rtol=1e-14)
    for i in range(2):
        dq = np.zeros(2)
        dq[i] = h
        np.testing.assert_allclose(
            J[:, i],
            (K.actuator_lengths(q + dq, G) - K.actuator_lengths(q - dq, G)) / (2 * h),
            atol=1e-8,
        )
        Jp = K.actuation_jacobian(q + dq, G)
        Jm = K.actuation_jacobian(q - dq, G)
        np.testing.assert_allclose(H[:, :, i], (Jp - Jm) / (2 * h), atol=1e-6)
    # Second derivatives commute.
    np.testing.assert_allclose(H, np.swapaxes(H, 1, 2), atol=1e-12)


def test_virtual_work_torques():
    q = POSES[0]
    F = np.array([30.0, 20.0])
    tau = K.joint_torques(q, F, G)
    h = 1e-6
    for i in range(2):
        dq = np.zeros(2)
        dq[i] = h
        dl = K.actuator_lengths(q + dq, G) - K.actuator_lengths(q - dq, G)
        # Work done by pulling forces: −F·dl = τ·dθ
        assert tau[i] == pytest.approx(-(F @ dl) / (2 * h), rel=1e-6)


def test_from_mapping_accepts_degrees():
    g = K.PlanarGeometry.from_mapping({'a1': 0.3, 'beta2_deg': 45})
    assert g.a1 == 0.3 and g.beta2 == pytest.approx(np.pi / 4) and g.b1 == G.b1
