"""Analytic Lagrangian model of a planar musculoskeletal leg with massive linear elastic actuators.

The ground truth for the MuJoCo models (paper Sec. III, IV-B): the skeleton is a planar tree of
rigid bodies on parallel hinges (generalised coordinates: the hinge angles θ), each actuator a
uniform rod between its anchors A and B with

    kinetic energy      T = m/6 (v_A·v_B + v_A² + v_B²)            (Eq. 4)
    gravity             V_g = ½ m g k·(r_A + r_B)                   (Eq. 2)
    elastic             V_e = ½ k (l − l0)²                         (Eq. 10)
    virtual work        δW = (F − c l̇) δl                           (Eq. 11; F = S·P > 0 extends)

plus the rigid links' energies and viscous joint damping. The Euler–Lagrange equations give
M(θ) θ̈ + b(θ, θ̇) = Q(θ, θ̇, F), integrated with scipy's solve_ivp at tight tolerances.
Note: Eq. 4 is used as written; it is not rewritten as the 3-2-1 point masses.

Planar frame: X = world y, Y = −world z (gravity along +Y); a hinge about world −x turns
counter-clockwise in (X, Y). Nothing here depends on MuJoCo.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp
from scipy.optimize import least_squares

from equimus_description.leg import (
    LegDescription,
    load_leg,
    require_constant_area,
    require_constant_damping,
    world_points_at_build,
)


def _planar(p):
    return np.array([p[1], -p[2]])


def _rot(phi):
    c, s = np.cos(phi), np.sin(phi)
    return np.array([[c, -s], [s, c]])


def _perp(v):
    return np.array([-v[1], v[0]])


@dataclass
class _Point:
    body: int  # index into the body list
    p0: np.ndarray  # planar position at the build pose


class LagrangianLeg:
    """Equations of motion of the description's skeleton + actuators, in the hinge angles."""

    def __init__(self, leg: LegDescription | None = None):
        self.leg = leg if leg is not None else load_leg()
        leg = self.leg
        require_constant_area(leg, 'the Lagrangian ground truth')
        require_constant_damping(leg, 'the Lagrangian ground truth')
        self.g = leg.gravity
        names = list(leg.bodies)
        self.body_names = names
        self.joint_names = list(leg.joints)
        self.n = len(self.joint_names)
        bi = {n: i for i, n in enumerate(names)}
        origins = world_points_at_build(leg)
        self.o0 = np.array([_planar(origins[n]) for n in names])
        # parent body index, joint index, sign of the planar rotation per body (root: -1)
        self.parent = np.full(len(names), -1)
        self.joint_of = np.full(len(names), -1)
        self.sign = np.zeros(len(names))
        self.ref = np.array([j.ref for j in leg.joints.values()])
        for k, j in enumerate(leg.joints.values()):
            c = bi[j.child]
            self.parent[c] = bi[j.parent]
            self.joint_of[c] = k
            if abs(abs(j.axis[0]) - 1.0) > 1e-9:
                raise ValueError(f'joint {j.name}: the planar model needs hinge axes along world x')
            self.sign[c] = -np.sign(j.axis[0])  # about −x: counter-clockwise in (X, Y)
        # joints on the path root → body, per body
        self.path = []
        for i in range(len(names)):
            p, js = i, []
            while self.parent[p] >= 0:
                js.append(p)
                p = self.parent[p]
            self.path.append(js[::-1])
        self.mass = np.array([leg.bodies[n].mass for n in names])
        self.com = [_Point(i, _planar(origins[n] + leg.bodies[n].com)) for i, n in enumerate(names)]
        self.ixx = np.array([leg.bodies[n].inertia[0] for n in names])
        self.acts = []
        for a in leg.actuators.values():
            A = _Point(bi[a.base.body], _planar(origins[a.base.body] + a.base.pos))
            B = _Point(bi[a.tip.body], _planar(origins[a.tip.body] + a.tip.pos))
            self.acts.append((a, A, B))
        self.damping = np.array([j.damping for j in leg.joints.values()])

    # ----- kinematics -----
    def _frames(self, q, qd):
        """Per body: rotation angle, origin, origin velocity, angular velocity (planar)."""
        nb = len(self.body_names)
        th = np.zeros(nb)
        o = self.o0.copy()
        vo = np.zeros((nb, 2))
        w = np.zeros(nb)
        for i in range(nb):
            p = self.parent[i]
            if p < 0:
                continue
            k = self.joint_of[i]
            o[i] = o[p] + _rot(th[p]) @ (self.o0[i] - self.o0[p])
            vo[i] = vo[p] + w[p] * _perp(o[i] - o[p])
            th[i] = th[p] + self.sign[i] * (q[k] - self.ref[k])
            w[i] = w[p] + self.sign[i] * qd[k]
        return th, o, vo, w

    def _point(self, pt: _Point, frames, qd):
        """Position r, Jacobian J (2×n), bias h = J̇ θ̇ and velocity v of a body-fixed point."""
        th, o, vo, w = frames
        b = pt.body
        r = o[b] + _rot(th[b]) @ (pt.p0 - self.o0[b])
        J = np.zeros((2, self.n))
        h = np.zeros(2)
        v = vo[b] + w[b] * _perp(r - o[b])
        for c in self.path[b]:
            k = self.joint_of[c]
            J[:, k] = self.sign[c] * _perp(r - o[c])
            h += self.sign[c] * qd[k] * _perp(v - vo[c])
        return r, J, h, v

    def actuator_lengths(self, q) -> np.ndarray:
        fr = self._frames(np.asarray(q, float), np.zeros(self.n))
        z = np.zeros(self.n)
        return np.array(
            [
                np.linalg.norm(self._point(B, fr, z)[0] - self._point(A, fr, z)[0])
                for _, A, B in self.acts
            ]
        )

    # ----- dynamics -----
    def terms(self, q, qd, forces):
        """(M, b, Q): M θ̈ + b = Q, Q holding gravity, springs, dampers and actuator forces."""
        q = np.asarray(q, float)
        qd = np.asarray(qd, float)
        fr = self._frames(q, qd)
        n = self.n
        M = np.zeros((n, n))
        b = np.zeros(n)
        Q = -self.damping * qd
        gvec = np.array([0.0, self.g])
        for i in range(len(self.body_names)):
            if self.parent[i] < 0:
                continue
            _, J, h, _ = self._point(self.com[i], fr, qd)
            M += self.mass[i] * J.T @ J
            b += self.mass[i] * J.T @ h
            Jw = np.zeros(n)
            for c in self.path[i]:
                Jw[self.joint_of[c]] += self.sign[c]
            M += self.ixx[i] * np.outer(Jw, Jw)
            Q += self.mass[i] * J.T @ gvec
        for (a, A, B), F in zip(self.acts, forces, strict=True):  # one force per actuator
            rA, JA, hA, _ = self._point(A, fr, qd)
            rB, JB, hB, _ = self._point(B, fr, qd)
            m = a.m
            M += m / 3 * (JA.T @ JA + JB.T @ JB) + m / 6 * (JA.T @ JB + JB.T @ JA)
            b += m / 3 * (JA.T @ hA + JB.T @ hB) + m / 6 * (JA.T @ hB + JB.T @ hA)
            Q += 0.5 * m * (JA + JB).T @ gvec
            r = rB - rA
            L = np.linalg.norm(r)
            dl = (r / L) @ (JB - JA)  # ∂l/∂θ
            tension = a.k * (L - a.l0) + a.c * (dl @ qd) - F
            Q -= dl * tension
        return M, b, Q

    def accel(self, q, qd, forces) -> np.ndarray:
        M, b, Q = self.terms(q, qd, forces)
        return np.linalg.solve(M, Q - b)

    def energy(self, q, qd) -> float:
        """Total mechanical energy T + V_g + V_e (for checks: dissipation only lowers it)."""
        q = np.asarray(q, float)
        qd = np.asarray(qd, float)
        M, _, _ = self.terms(q, qd, np.zeros(len(self.acts)))
        fr = self._frames(q, qd)
        V = 0.0
        for i in range(len(self.body_names)):
            if self.parent[i] >= 0:
                V -= self.mass[i] * self.g * self._point(self.com[i], fr, qd)[0][1]
        for a, A, B in self.acts:
            rA, rB = self._point(A, fr, qd)[0], self._point(B, fr, qd)[0]
            V -= 0.5 * a.m * self.g * (rA[1] + rB[1])
            V += 0.5 * a.k * (np.linalg.norm(rB - rA) - a.l0) ** 2
        return 0.5 * qd @ M @ qd + V

    def simulate(
        self, q0, forces, t_eval, qd0=None, rtol=1e-10, atol=1e-12, method='DOP853', events=None
    ):
        """Integrate from (q0, qd0) under constant forces F (N, > 0 extends).

        Returns solve_ivp's result; .y[:n] are the angles at t_eval."""
        n = self.n
        F = np.asarray(forces, float)
        y0 = np.concatenate(
            [np.asarray(q0, float), np.zeros(n) if qd0 is None else np.asarray(qd0, float)]
        )

        def rhs(_t, y):
            return np.concatenate([y[n:], self.accel(y[:n], y[n:], F)])

        t_eval = np.asarray(t_eval, float)
        return solve_ivp(
            rhs,
            (float(t_eval[0]), float(t_eval[-1])),
            y0,
            method=method,
            t_eval=t_eval,
            rtol=rtol,
            atol=atol,
            events=events,
        )

    # ----- statics -----
    def static_residual(self, q, forces) -> np.ndarray:
        M, b, Q = self.terms(q, np.zeros(self.n), forces)
        return Q

    def balancing_forces(self, q) -> np.ndarray:
        """Actuator forces F = f(θ) that hold the leg still at θ (least squares if not square)."""
        q = np.asarray(q, float)
        Q0 = self.static_residual(q, np.zeros(len(self.acts)))
        # Q is affine in F: Q(F) = Q0 − D F with D = ∂Q/∂F (unit forces).
        unit = np.eye(len(self.acts))
        D = np.column_stack([Q0 - self.static_residual(q, unit[i]) for i in range(len(self.acts))])
        return np.linalg.lstsq(D, Q0, rcond=None)[0]

    def static_equilibrium(self, forces, q0=None, tol=1e-12) -> np.ndarray:
        """θ with zero generalised force under constant F.

        Newton-type root from q0 (default: the reference pose)."""
        q0 = self.ref.copy() if q0 is None else np.asarray(q0, float)
        sol = least_squares(
            lambda q: self.static_residual(q, forces), q0, xtol=tol, ftol=tol, gtol=tol
        )
        if np.max(np.abs(sol.fun)) > 1e-9:
            raise RuntimeError(
                f'no static equilibrium found for F = {forces} from {q0} '
                f'(residual {np.max(np.abs(sol.fun)):.2e} N·m)'
            )
        return sol.x

    def stiffness_matrix(self, q, forces, h=1e-6) -> np.ndarray:
        """−∂Q/∂θ at rest; positive definite at a stable equilibrium."""
        q = np.asarray(q, float)
        K = np.zeros((self.n, self.n))
        for i in range(self.n):
            dq = np.zeros(self.n)
            dq[i] = h
            K[:, i] = -(
                self.static_residual(q + dq, forces) - self.static_residual(q - dq, forces)
            ) / (2 * h)
        return K
