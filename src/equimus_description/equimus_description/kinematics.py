"""Planar kinematics of the 2-DOF leg and its two elastic actuators (no ROS, no MuJoCo).

Conventions follow the EquiMus paper and ../shared/spec/leg.md: origin at the hip, planar x along
the base, θ1 = hip angle (thigh relative to base), θ2 = knee angle (calf relative to thigh). The
hanging leg (θ1 = θ2 = π/2) points along planar +y, which is the direction of gravity.

The actuation map l(θ) gives the two actuator lengths; its Jacobian J_A = ∂l/∂θ maps joint
velocities to actuator velocities and, transposed, actuator forces to joint torques
(τ = −J_Aᵀ F for muscles that pull). Derivatives are analytic so the controller's impedance
transfer (which needs ∂J_A/∂θ) costs no finite differencing on the hot path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

import numpy as np

ACTUATORS = ('maa', 'baa')
JOINTS = ('hip', 'knee')


@dataclass(frozen=True)
class PlanarGeometry:
    """Link lengths and actuator anchor geometry (metres, radians)."""

    a1: float = 0.25  # thigh length, hip → knee
    a2: float = 0.25  # calf length, knee → foot
    b1: float = 0.21213  # MAA attachment distance on the thigh, from the hip
    beta1: float = np.deg2rad(8.13)  # MAA attachment angle behind the thigh axis
    d1: float = 0.06  # MAA base anchor at (+d1, 0)
    b2: float = 0.10  # BAA attachment distance on the calf, from the knee
    beta2: float = np.deg2rad(30.0)  # BAA attachment angle ahead of the calf axis
    d2: float = 0.10  # BAA base anchor at (−d2, 0)

    @classmethod
    def from_mapping(cls, values: Mapping[str, float]) -> PlanarGeometry:
        """Build from a dict (e.g. YAML); angles may be given in degrees as `beta1_deg`."""
        kwargs = {}
        for f in fields(cls):
            if f.name in values:
                kwargs[f.name] = float(values[f.name])
            elif f'{f.name}_deg' in values:
                kwargs[f.name] = float(np.deg2rad(values[f'{f.name}_deg']))
        return cls(**kwargs)


def _u(phi):
    return np.array([np.cos(phi), np.sin(phi)])


def _up(phi):
    return np.array([-np.sin(phi), np.cos(phi)])


def base_anchors(g: PlanarGeometry) -> np.ndarray:
    """Base-side anchor points of [MAA, BAA] in the planar hip frame, shape (2, 2)."""
    return np.array([[g.d1, 0.0], [-g.d2, 0.0]])


def link_points(q, g: PlanarGeometry) -> dict:
    """Hip, knee, foot and the moving actuator anchors C (thigh) and D (calf), planar."""
    t1, t2 = float(q[0]), float(q[1])
    knee = g.a1 * _u(t1)
    return {
        'hip': np.zeros(2),
        'knee': knee,
        'foot': knee + g.a2 * _u(t1 + t2),
        'C': g.b1 * _u(t1 - g.beta1),
        'D': knee + g.b2 * _u(t1 + t2 + g.beta2),
    }


def _anchor_derivatives(q, g: PlanarGeometry):
    """Moving anchors p_i, their first (∂p/∂θ) and second (∂²p/∂θ²) derivatives, as float pairs.

    Plain floats, not numpy: this runs twice per control cycle, where numpy's per-call overhead
    on 2-vectors cost more than the arithmetic (docs/benchmarks.md, control section)."""
    t1, t2 = float(q[0]), float(q[1])
    c1, s1 = math.cos(t1 - g.beta1), math.sin(t1 - g.beta1)
    ck, sk = math.cos(t1), math.sin(t1)
    c2, s2 = math.cos(t1 + t2 + g.beta2), math.sin(t1 + t2 + g.beta2)
    z = (0.0, 0.0)
    C = (g.b1 * c1, g.b1 * s1)
    dC = [(-g.b1 * s1, g.b1 * c1), z]
    ddC = [[(-C[0], -C[1]), z], [z, z]]
    D = (g.a1 * ck + g.b2 * c2, g.a1 * sk + g.b2 * s2)
    d2 = (-g.b2 * s2, g.b2 * c2)
    dD = [(-g.a1 * sk + d2[0], g.a1 * ck + d2[1]), d2]
    u2 = (-g.b2 * c2, -g.b2 * s2)
    ddD = [[(-g.a1 * ck + u2[0], -g.a1 * sk + u2[1]), u2], [u2, u2]]
    return (C, dC, ddC), (D, dD, ddD)


def actuator_lengths(q, g: PlanarGeometry = PlanarGeometry()) -> np.ndarray:
    """l(θ): lengths of [MAA, BAA] in metres."""
    A = base_anchors(g)
    pts = link_points(q, g)
    return np.array([np.linalg.norm(pts['C'] - A[0]), np.linalg.norm(pts['D'] - A[1])])


def actuation_jacobian(q, g: PlanarGeometry = PlanarGeometry()) -> np.ndarray:
    """J_A = ∂l/∂θ, shape (2 actuators, 2 joints)."""
    return actuation_derivatives(q, g)[1]


def _dot2(a, b) -> float:
    return a[0] * b[0] + a[1] * b[1]


def actuation_derivatives(q, g: PlanarGeometry = PlanarGeometry()):
    """(l, J_A, H) with H[a, i, j] = ∂²l_a/∂θ_i∂θ_j, all analytic."""
    bases = ((g.d1, 0.0), (-g.d2, 0.0))
    lengths, J, H = (
        [0.0, 0.0],
        [[0.0, 0.0], [0.0, 0.0]],
        [[[0.0] * 2 for _ in range(2)] for _ in range(2)],
    )
    for a, (p, dp, ddp) in enumerate(_anchor_derivatives(q, g)):
        r = (p[0] - bases[a][0], p[1] - bases[a][1])
        la = math.hypot(r[0], r[1])
        lengths[a] = la
        Ja = J[a]
        for i in range(2):
            Ja[i] = _dot2(r, dp[i]) / la
        for i in range(2):
            for j in range(2):
                H[a][i][j] = (_dot2(dp[i], dp[j]) + _dot2(r, ddp[i][j]) - Ja[i] * Ja[j]) / la
    return np.array(lengths), np.array(J), np.array(H)


def actuation_lengths_jacobian(
    q, g: PlanarGeometry = PlanarGeometry()
) -> tuple[tuple[float, float], tuple[float, float], tuple[float, float]]:
    """(l, J_A rows) of `actuation_derivatives` in plain floats, without the second derivatives
    (the controller's per-cycle need, twice a cycle): `_anchor_derivatives`' first derivatives
    written out, the same operations in the same order, so the same bits."""
    t1, t2 = float(q[0]), float(q[1])
    c1, s1 = math.cos(t1 - g.beta1), math.sin(t1 - g.beta1)
    ck, sk = math.cos(t1), math.sin(t1)
    c2, s2 = math.cos(t1 + t2 + g.beta2), math.sin(t1 + t2 + g.beta2)
    b1, a1, b2 = g.b1, g.a1, g.b2
    # MAA: anchor C on the thigh (moves with θ1 only), base anchor (d1, 0)
    r0, r1 = b1 * c1 - g.d1, b1 * s1 - 0.0
    l0 = math.hypot(r0, r1)
    J0 = ((r0 * (-b1 * s1) + r1 * (b1 * c1)) / l0, (r0 * 0.0 + r1 * 0.0) / l0)
    # BAA: anchor D on the calf, base anchor (−d2, 0)
    d20, d21 = -b2 * s2, b2 * c2
    r0, r1 = (a1 * ck + b2 * c2) - -g.d2, (a1 * sk + b2 * s2) - 0.0
    l1 = math.hypot(r0, r1)
    J1 = ((r0 * (-a1 * sk + d20) + r1 * (a1 * ck + d21)) / l1, (r0 * d20 + r1 * d21) / l1)
    return (l0, l1), J0, J1


def jacobian_rate(q, qd, g: PlanarGeometry = PlanarGeometry()) -> np.ndarray:
    """dJ_A/dt = Σ_j ∂J_A/∂θ_j · θ̇_j."""
    _, _, H = actuation_derivatives(q, g)
    return H @ np.asarray(qd, dtype=float)


def joint_torques(q, forces, g: PlanarGeometry = PlanarGeometry()) -> np.ndarray:
    """τ = −J_Aᵀ F: joint torques of actuator tensions F (N, positive = pulling)."""
    return -actuation_jacobian(q, g).T @ np.asarray(forces, dtype=float)


def actuation_derivatives_batch(q, g: PlanarGeometry = PlanarGeometry()):
    """`actuation_derivatives` of many poses at once: q (..., 2) → l (..., 2), J_A (..., 2, 2),
    H (..., 2, 2, 2) with H[..., a, i, j] = ∂²l_a/∂θ_i∂θ_j.

    Component formulas on arrays, for a planner that linearises along a whole predicted
    trajectory in one call (per pose, the float version's call overhead would dominate). The
    MAA spans the hip only: its θ2 entries are exact zeros."""
    q = np.asarray(q, float)
    t1, t2 = q[..., 0], q[..., 1]
    c1, s1 = np.cos(t1 - g.beta1), np.sin(t1 - g.beta1)
    ck, sk = np.cos(t1), np.sin(t1)
    c2, s2 = np.cos(t1 + t2 + g.beta2), np.sin(t1 + t2 + g.beta2)
    lengths = np.empty(t1.shape + (2,))
    J = np.zeros(t1.shape + (2, 2))
    H = np.zeros(t1.shape + (2, 2, 2))
    # MAA: r = C − (d1, 0), C = b1·u(θ1 − β1); ∂C/∂θ1 = b1·u⊥, ∂²C/∂θ1² = −b1·u
    rx, ry = g.b1 * c1 - g.d1, g.b1 * s1
    la = np.sqrt(rx * rx + ry * ry)
    j0 = g.b1 * (-rx * s1 + ry * c1) / la
    lengths[..., 0] = la
    J[..., 0, 0] = j0
    H[..., 0, 0, 0] = (g.b1 * g.b1 - g.b1 * (rx * c1 + ry * s1) - j0 * j0) / la
    # BAA: r = D − (−d2, 0), D = a1·u(θ1) + b2·u(θ1 + θ2 + β2)
    ex, ey = -g.b2 * s2, g.b2 * c2  # ∂D/∂θ2
    px, py = -g.a1 * sk + ex, g.a1 * ck + ey  # ∂D/∂θ1
    rx, ry = g.a1 * ck + g.b2 * c2 + g.d2, g.a1 * sk + g.b2 * s2
    lb = np.sqrt(rx * rx + ry * ry)
    ja, jb = (rx * px + ry * py) / lb, (rx * ex + ry * ey) / lb
    # ∂²D/∂θ2² = ∂²D/∂θ1∂θ2 = −(D − knee) = (−b2 c2, −b2 s2); ∂²D/∂θ1² = −D
    r_dd2 = -(rx * g.b2 * c2 + ry * g.b2 * s2)
    r_dd1 = r_dd2 - g.a1 * (rx * ck + ry * sk)
    e2 = ex * ex + ey * ey
    lengths[..., 1] = lb
    J[..., 1, 0], J[..., 1, 1] = ja, jb
    H[..., 1, 0, 0] = (px * px + py * py + r_dd1 - ja * ja) / lb
    h01 = (px * ex + py * ey + r_dd2 - ja * jb) / lb
    H[..., 1, 0, 1] = h01
    H[..., 1, 1, 0] = h01
    H[..., 1, 1, 1] = (e2 + r_dd2 - jb * jb) / lb
    return lengths, J, H
