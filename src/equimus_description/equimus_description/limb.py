"""Kinematics and statics of any limb in the description: a tree of parallel hinges, M muscles.

The general counterpart of kinematics.py / statics.py (which hold the 2-joint EquiMus leg's
closed forms, fast on the control path): for N joints and M actuators attached to any two
bodies, from the LegDescription alone (no ROS, no MuJoCo).

Planar frame as in the paper and equimus_sim.lagrangian: X = world y, Y = −world z (gravity
along +Y); a hinge about world −x turns counter-clockwise in (X, Y), one about +x clockwise.
Generalised coordinates are the hinge angles θ (qpos; θ = ref at the build pose).

    l(θ)    actuator lengths (M)               J_A = ∂l/∂θ (M × N)
    Q_g(θ)  generalised gravity force (N): links plus each actuator's mass, m/2 at either anchor
            (the 3-2-1 unit's m/6 + 2m/3 + m/6, paper Eq. 2)
    holding forces: lengthening forces F (N, F = S·P) with J_Aᵀ F = J_Aᵀ k (l − l0) − Q_g
"""

from __future__ import annotations

import numpy as np

from .leg import LegDescription, require_constant_area, world_points_at_build


class PlanarLimbError(ValueError):
    """The description is not a planar limb (a hinge axis not along world x)."""


def _planar(p) -> np.ndarray:
    return np.array([p[1], -p[2]])


def _perp(v: np.ndarray) -> np.ndarray:
    return np.array([-v[1], v[0]])


def _rot(phi: float) -> np.ndarray:
    c, s = np.cos(phi), np.sin(phi)
    return np.array([[c, -s], [s, c]])


class PlanarLimb:
    """l(θ), J_A(θ), Q_g(θ) and the holding forces/pressures of a description's limb."""

    def __init__(self, leg: LegDescription) -> None:
        self.leg = leg
        self.joint_names = list(leg.joints)
        self.actuator_names = list(leg.actuators)
        self.n = len(self.joint_names)
        self.m = len(self.actuator_names)
        self.g = leg.gravity
        names = list(leg.bodies)
        bi = {b: i for i, b in enumerate(names)}
        origins = world_points_at_build(leg)
        self._o0 = np.array([_planar(origins[b]) for b in names])
        self._parent = np.full(len(names), -1)
        self._joint = np.full(len(names), -1)
        self._sign = np.zeros(len(names))
        self.ref = np.array([j.ref for j in leg.joints.values()])
        self.lower = np.array([j.range[0] for j in leg.joints.values()])
        self.upper = np.array([j.range[1] for j in leg.joints.values()])
        for k, j in enumerate(leg.joints.values()):
            if abs(abs(j.axis[0]) - 1.0) > 1e-9:
                raise PlanarLimbError(
                    f'joints.{j.name}.axis: {j.axis.tolist()} is not along world x; the planar '
                    'limb model (kinematics, statics, controllers) needs parallel hinges about x'
                )
            c = bi[j.child]
            self._parent[c] = bi[j.parent]
            self._joint[c] = k
            self._sign[c] = -np.sign(j.axis[0])
        # bodies whose joints move a body: the path root -> body, per body
        self._path = []
        for i in range(len(names)):
            p, path = i, []
            while self._parent[p] >= 0:
                path.append(p)
                p = self._parent[p]
            self._path.append(path[::-1])
        self._mass = np.array([leg.bodies[b].mass for b in names])
        self._com = [(i, _planar(origins[b] + leg.bodies[b].com)) for i, b in enumerate(names)]
        self._anchors = [
            (
                (bi[a.base.body], _planar(origins[a.base.body] + a.base.pos)),
                (bi[a.tip.body], _planar(origins[a.tip.body] + a.tip.pos)),
            )
            for a in leg.actuators.values()
        ]
        acts = list(leg.actuators.values())
        require_constant_area(leg, 'the general limb statics')
        self.k = np.array([a.k for a in acts])
        self.l0 = np.array([a.l0 for a in acts])
        self.area = np.array([a.area for a in acts])
        self.m_act = np.array([a.m for a in acts])
        self.p_max = np.array([a.pressure_max_kpa for a in acts])

    def _frames(self, q) -> tuple[np.ndarray, np.ndarray]:
        """Rotation angle and origin of every body at θ (parents come first in the tree order)."""
        th = np.zeros(len(self._o0))
        o = self._o0.copy()
        for i in range(len(o)):
            p = self._parent[i]
            if p < 0:
                continue
            k = self._joint[i]
            o[i] = o[p] + _rot(th[p]) @ (self._o0[i] - self._o0[p])
            th[i] = th[p] + self._sign[i] * (q[k] - self.ref[k])
        return th, o

    def _point(self, frames, body: int, p0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Position r and Jacobian ∂r/∂θ (2 × N) of a point fixed to `body`."""
        th, o = frames
        r = o[body] + _rot(th[body]) @ (p0 - self._o0[body])
        J = np.zeros((2, self.n))
        for c in self._path[body]:
            J[:, self._joint[c]] = self._sign[c] * _perp(r - o[c])
        return r, J

    def point(self, q, body: str, pos_build) -> np.ndarray:
        """Planar position at θ of the point that is at world `pos_build` at the build pose."""
        i = list(self.leg.bodies).index(body)
        return self._point(self._frames(np.asarray(q, float)), i, _planar(pos_build))[0]

    def lengths_jacobian(self, q) -> tuple[np.ndarray, np.ndarray]:
        """(l, J_A): actuator lengths (M, m) and ∂l/∂θ (M × N, m/rad)."""
        fr = self._frames(np.asarray(q, float))
        lengths = np.zeros(self.m)
        J = np.zeros((self.m, self.n))
        for a, ((ba, pa), (bb, pb)) in enumerate(self._anchors):
            rA, JA = self._point(fr, ba, pa)
            rB, JB = self._point(fr, bb, pb)
            d = rB - rA
            lengths[a] = np.linalg.norm(d)
            J[a] = (d / lengths[a]) @ (JB - JA)
        return lengths, J

    def actuator_lengths(self, q) -> np.ndarray:
        return self.lengths_jacobian(q)[0]

    def actuation_jacobian(self, q) -> np.ndarray:
        return self.lengths_jacobian(q)[1]

    def gravity_force(self, q) -> np.ndarray:
        """Q_g (N·m per joint): generalised force of gravity on links and actuator masses."""
        fr = self._frames(np.asarray(q, float))
        gvec = np.array([0.0, self.g])
        Q = np.zeros(self.n)
        for i, p0 in self._com:
            if self._parent[i] >= 0:
                Q += self._mass[i] * self._point(fr, i, p0)[1].T @ gvec
        for m, ((ba, pa), (bb, pb)) in zip(self.m_act, self._anchors, strict=True):
            Q += 0.5 * m * (self._point(fr, ba, pa)[1] + self._point(fr, bb, pb)[1]).T @ gvec
        return Q

    def static_torque(self, q, forces) -> np.ndarray:
        """Net generalised force at rest under lengthening forces F (N): zero at equilibrium."""
        lengths, J = self.lengths_jacobian(q)
        return self.gravity_force(q) - J.T @ (self.k * (lengths - self.l0) - np.asarray(forces))

    def pressure_torque_matrix(self, q, pressure_sign: float = 1.0) -> np.ndarray:
        """A(θ) (N·m per kPa, N × M): joint torques τ = A P of the pressure forces."""
        return pressure_sign * self.actuation_jacobian(q).T * (self.area * 1e3)[None, :]

    def holding_pressures(
        self, q, p_max=None, pressure_sign: float = 1.0, prefer=None, weight: float = 1e-6
    ) -> tuple[np.ndarray, np.ndarray]:
        """Pressures (kPa) in [0, p_max] that best hold pose θ, and the torque left unbalanced.

        Box-bounded least squares on σ J_Aᵀ S P = J_Aᵀ k (l − l0) − Q_g; with more muscles than
        joints the redundancy is resolved towards `prefer` (default: the middle of the range)
        with a small `weight`, so the answer is unique."""
        lengths, J = self.lengths_jacobian(q)
        A = pressure_sign * J.T * (self.area * 1e3)[None, :]
        b = J.T @ (self.k * (lengths - self.l0)) - self.gravity_force(q)
        return self.solve_pressures(A, b, p_max, prefer, weight)

    def solve_pressures(
        self, A, b, p_max=None, prefer=None, weight: float = 1e-6
    ) -> tuple[np.ndarray, np.ndarray]:
        """min ‖A P − b‖² + weight² ‖P − prefer‖² on 0 ≤ P ≤ p_max: (P, A P − b)."""
        from scipy.optimize import lsq_linear  # here: see statics.equilibrium

        hi = self.p_max if p_max is None else np.broadcast_to(np.asarray(p_max, float), (self.m,))
        prefer = 0.5 * hi if prefer is None else np.asarray(prefer, float)
        scale = max(float(np.max(np.abs(A))), 1e-12)
        A_aug = np.vstack([A, weight * scale * np.eye(self.m)])
        b_aug = np.concatenate([b, weight * scale * prefer])
        P = lsq_linear(A_aug, b_aug, bounds=(np.zeros(self.m), hi), method='bvls').x
        P = np.clip(P, 0.0, hi)
        return P, A @ P - b
