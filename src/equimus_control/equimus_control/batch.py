"""The PID law of `pid.PIDController` for N legs at once, on arrays of shape (n, 2) (no ROS).

The batched training environment (equimus_learning.vector) runs thousands of legs per second;
a residual policy there needs its base controller for all of them each period, and a Python
loop over `PIDController.step` (tens of µs each) would cost as much as the physics. This module
is the same law written on arrays: the actuation Jacobian, the holding pressures, the exact
box-constrained least squares (the same active-set enumeration, the same tie-breaking order)
and the anti-windup. tests/control/test_batch.py checks it against `PIDController` cycle by
cycle.
"""

from __future__ import annotations

import itertools

import numpy as np

from equimus_description.kinematics import PlanarGeometry
from equimus_description.statics import StaticParams

from .pid import PIDGains


def lengths_jacobian(q: np.ndarray, g: PlanarGeometry) -> tuple[np.ndarray, np.ndarray]:
    """Actuator lengths (n, 2) and J_A = ∂l/∂θ (n, 2 actuators, 2 joints) for poses q (n, 2)."""
    t1, t2 = q[:, 0], q[:, 1]
    c1, s1 = np.cos(t1 - g.beta1), np.sin(t1 - g.beta1)
    ck, sk = np.cos(t1), np.sin(t1)
    c2, s2 = np.cos(t1 + t2 + g.beta2), np.sin(t1 + t2 + g.beta2)
    # moving anchors C (thigh) and D (calf), their derivatives by θ1 and θ2
    r_c = np.stack([g.b1 * c1 - g.d1, g.b1 * s1], -1)
    dc1 = np.stack([-g.b1 * s1, g.b1 * c1], -1)
    r_d = np.stack([g.a1 * ck + g.b2 * c2 + g.d2, g.a1 * sk + g.b2 * s2], -1)
    dd2 = np.stack([-g.b2 * s2, g.b2 * c2], -1)
    dd1 = np.stack([-g.a1 * sk, g.a1 * ck], -1) + dd2
    l_c = np.hypot(r_c[:, 0], r_c[:, 1])
    l_d = np.hypot(r_d[:, 0], r_d[:, 1])
    J = np.empty((len(q), 2, 2))
    J[:, 0, 0] = np.sum(r_c * dc1, -1) / l_c
    J[:, 0, 1] = 0.0
    J[:, 1, 0] = np.sum(r_d * dd1, -1) / l_d
    J[:, 1, 1] = np.sum(r_d * dd2, -1) / l_d
    return np.stack([l_c, l_d], -1), J


def gravity_gradient(q: np.ndarray, p: StaticParams) -> np.ndarray:
    """∂U/∂θ (n, 2) of `statics.gravity_generalized` (gravity torque is +g ∂U/∂θ)."""
    g = p.geometry
    t1, t2 = q[:, 0], q[:, 1]
    a12 = t1 + t2
    s1, c1 = np.sin(t1), np.cos(t1)
    s12, c12 = np.sin(a12), np.cos(a12)
    cC = np.cos(t1 - g.beta1)
    cD = np.cos(a12 + g.beta2)
    (ht, vt), (hc, vc) = p.com_thigh, p.com_calf
    dy_thigh = ht * c1 - vt * s1
    dy_cc = hc * c12 - vc * s12
    dy_knee = g.a1 * c1
    dy_C = g.b1 * cC
    dy_Dc = g.b2 * cD
    ma, mb = 0.5 * p.m_act[0], 0.5 * p.m_act[1]
    dU1 = p.m_thigh * dy_thigh + p.m_calf * (dy_knee + dy_cc) + ma * dy_C + mb * (dy_knee + dy_Dc)
    dU2 = p.m_calf * dy_cc + mb * dy_Dc
    return np.stack([dU1, dU2], -1)


def holding_pressures(q: np.ndarray, p: StaticParams) -> np.ndarray:
    """`statics.holding_pressures` (unclipped, kPa) for poses q (n, 2)."""
    lengths, J = lengths_jacobian(q, p.geometry)
    b = p.g * gravity_gradient(q, p)
    j00, j01, j10, j11 = J[:, 0, 0], J[:, 0, 1], J[:, 1, 0], J[:, 1, 1]
    det = j00 * j11 - j10 * j01
    x0 = (b[:, 0] * j11 - j10 * b[:, 1]) / det
    x1 = (j00 * b[:, 1] - j01 * b[:, 0]) / det
    f0 = p.k[0] * (lengths[:, 0] - p.l0[0]) - x0
    f1 = p.k[1] * (lengths[:, 1] - p.l0[1]) - x1
    s = p.pressure_sign
    return np.stack([s * f0 / p.S[0] / 1e3, s * f1 / p.S[1] / 1e3], -1)


def pressure_torque(q: np.ndarray, p: StaticParams) -> np.ndarray:
    """A(θ) (n, 2 joints, 2 valves), τ = A P (N·m per kPa): `pid.pressure_torque_matrix`."""
    _, J = lengths_jacobian(q, p.geometry)
    S = np.asarray(p.S, float) * 1e3
    return p.pressure_sign * np.swapaxes(J, 1, 2) * S[None, None, :]


_PATTERNS = [pat for pat in itertools.product((0, 1, 2), repeat=2) if pat != (0, 0)]


def box_lsq(
    A: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`pid.box_lsq_floats` for n problems: exact min ‖A x − b‖² on the box [lo, hi] (n, 2),
    the same active sets visited in the same order (so ties resolve alike). Returns (x, sat)."""
    n = len(b)
    a00, a01, a10, a11 = A[:, 0, 0], A[:, 0, 1], A[:, 1, 0], A[:, 1, 1]
    b0, b1 = b[:, 0], b[:, 1]
    det = a00 * a11 - a01 * a10
    with np.errstate(divide='ignore', invalid='ignore'):
        x0 = (b0 * a11 - a01 * b1) / det
        x1 = (a00 * b1 - a10 * b0) / det
    inside = (det != 0.0) & (lo[:, 0] <= x0) & (x0 <= hi[:, 0])
    inside &= (lo[:, 1] <= x1) & (x1 <= hi[:, 1])
    best = np.zeros((n, 2))
    best_cost = np.full(n, np.inf)
    cols = (np.stack([a00, a10], -1), np.stack([a01, a11], -1))
    for pattern in _PATTERNS:
        xb = np.stack([lo[:, i] if pattern[i] == 1 else hi[:, i] for i in range(2)], -1).astype(
            float
        )
        ok = np.ones(n, bool)
        free = [i for i in range(2) if pattern[i] == 0]
        if free:
            i, j = free[0], 1 - free[0]
            a, c = cols[i], cols[j]
            den = a[:, 0] ** 2 + a[:, 1] ** 2
            with np.errstate(divide='ignore', invalid='ignore'):
                rest0, rest1 = b0 - c[:, 0] * xb[:, j], b1 - c[:, 1] * xb[:, j]
                xi = (a[:, 0] * rest0 + a[:, 1] * rest1) / den
            ok = (den > 0) & (xi >= lo[:, i] - 1e-12) & (xi <= hi[:, i] + 1e-12)
            xb[:, i] = np.where(ok, xi, xb[:, i])
        r0 = a00 * xb[:, 0] + a01 * xb[:, 1] - b0
        r1 = a10 * xb[:, 0] + a11 * xb[:, 1] - b1
        cost = r0 * r0 + r1 * r1
        better = ok & (cost < best_cost - 1e-15)
        best = np.where(better[:, None], xb, best)
        best_cost = np.where(better, cost, best_cost)
    x = np.where(inside[:, None], np.stack([x0, x1], -1), best)

    def close(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.abs(u - v) <= 1e-8 + 1e-5 * np.abs(v)

    sat = ~inside[:, None] & (close(x, lo) | close(x, hi))
    return x, sat


def anti_windup(
    integral: np.ndarray, terr: np.ndarray, push: np.ndarray, k_aw: float, dt, i_max: np.ndarray
) -> np.ndarray:
    """`pid.anti_windup` element-wise: conditional integration + back-calculation."""
    s_err, s_int = np.sign(terr), np.sign(integral)
    short = (np.abs(terr) > 1e-9) & (s_err != np.sign(push))
    di = np.where(short, 0.0, push)
    bleed = np.where(
        short & (s_err == -s_int), np.minimum(k_aw * np.abs(terr) * dt, np.abs(integral)), 0.0
    )
    return np.clip(integral + (dt * di - s_int * bleed), -i_max, i_max)


class BatchPID:
    """`PIDController` for n legs: `step` takes and returns arrays of shape (n, 2)."""

    def __init__(self, params: StaticParams, gains: PIDGains | None = None, n: int = 1) -> None:
        self.params = params
        self.g = gains if gains is not None else PIDGains()
        g = self.g
        self.kp, self.ki, self.kd = (np.asarray(v, float) for v in (g.kp, g.ki, g.kd))
        self.i_max = np.asarray(self.g.i_max, float)
        self.integral = np.zeros((n, 2))  # integral torque (N·m)

    def reset(self, ids: np.ndarray | slice | None = None) -> None:
        self.integral[slice(None) if ids is None else ids] = 0.0

    def step(
        self,
        q: np.ndarray,
        qd: np.ndarray,
        q_ref: np.ndarray,
        qd_ref: np.ndarray,
        dt,
        p_max: float,
        rows: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(pressures (n, 2) kPa within [0, p_max], saturated mask); advances the integrals.
        `rows`: the legs the arrays are of (default: all n)."""
        r = slice(None) if rows is None else rows
        integral = self.integral[r]
        e = q_ref - q
        f = np.clip(holding_pressures(q_ref, self.params), 0.0, p_max)
        tau = self.kp * e + self.kd * (qd_ref - qd) + integral
        A = pressure_torque(q, self.params)
        target = np.einsum('nja,na->nj', A, f) + tau
        lo = np.zeros_like(f)
        hi = np.full_like(f, float(p_max))
        P, sat = box_lsq(A, target, lo, hi)
        P = np.clip(P, 0.0, p_max)
        terr = np.einsum('nja,na->nj', A, P) - target
        self.integral[r] = anti_windup(
            integral, terr, self.ki * e, self.g.k_aw, np.reshape(dt, (-1, 1)), self.i_max
        )
        return P, sat
