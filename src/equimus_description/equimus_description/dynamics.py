"""Joint-space dynamics of the 2-joint leg with its exact actuation model and first derivatives
(no ROS, no MuJoCo).

    M(θ) θ̈ + c(θ, θ̇) = g ∂U/∂θ − D θ̇ − J_A(θ)ᵀ T,   T = k (l − l0) + c_a(P) l̇ − σ S(l) P
    S(l) = S (1 + s (l − l0))   (s: the description's area_slope; 0 = a constant area)
    c_a(P) = c_a + c_p P       (c_p: the description's c_per_kpa; 0 = a constant damping)

The actuator tensions T act through the exact transmission l(θ), J_A = ∂l/∂θ (equimus_description
.kinematics), not a constant ratio (seeds/002): the stiffness the linearisation sees contains
∂J_A/∂θ·T, the term a constant ratio drops, and it is large where the leg is bent or the
pressures are high. Inertia: the links' masses and moments about their centres of mass, the
joints' armature, and each actuator a uniform rod between a fixed base anchor and its moving tip
(kinetic energy m/6·|v_tip|², gravity m/2 at the tip: the 3-2-1 actuator of the EquiMus paper and
equimus_sim.lagrangian). Every moving point is P·u(θ1 + φ) + Q·u(θ1 + θ2 + ψ), so M, c and the
gravity torque collapse to a few constants computed once (phasor sums over the points):

    M = [[A + B + 2E cos γ, B + E cos γ], [B + E cos γ, B]] + diag(armature),  γ = θ2 + δ
    c = E sin γ · (−(2θ̇1 + θ̇2) θ̇2, θ̇1²)

Everything is evaluated on arrays of states (leading axes = a batch, e.g. the nodes of a
predicted trajectory) with analytic derivatives ∂θ̈/∂θ (through ∂M/∂θ, ∂c/∂θ, the gravity
Hessian and the actuation Hessian ∂J_A/∂θ), ∂θ̈/∂θ̇ and ∂θ̈/∂P.

Not modelled: the joints' dry friction (MuJoCo frictionloss, 0 in the description's default) and
the joint stops; equimus_sim's loop closures are stiff soft constraints whose compliance is not
in this model: over 0.3 s of free motion it stays within 1 mrad of the MuJoCo leg
(tests/control/test_ltv_mpc.py checks < 2 mrad).
"""

from __future__ import annotations

import cmath
import math
from dataclasses import dataclass

import numpy as np

from equimus_description.kinematics import actuation_derivatives_batch
from equimus_description.statics import StaticParams


@dataclass(frozen=True)
class DynamicParams:
    """What the dynamics add to the static model: moments of inertia (kg·m², about each link's
    centre of mass, for rotation in the leg's plane), the actuators' damping c_a (N·s/m) and its
    growth with pressure c_p (N·s/m per kPa), the joints' damping (N·m·s/rad) and armature
    (kg·m²)."""

    statics: StaticParams
    inertia: tuple[float, float] = (5.4567e-4, 6.52333e-4)  # thigh, calf
    c: tuple[float, float] = (12.48, 24.79)
    damping: tuple[float, float] = (0.524, 0.062)
    armature: tuple[float, float] = (0.0, 0.0)
    c_per_kpa: tuple[float, float] = (0.0, 0.0)

    @classmethod
    def from_leg(cls, leg, pressure_sign: float = 1.0) -> DynamicParams:
        """From a LegDescription (the 2-joint leg: joints hip, knee; actuators maa, baa). The
        moment for planar rotation is ixx: the hinges are along the body frames' x axis."""
        hip, knee = leg.joints['hip'], leg.joints['knee']
        acts = [leg.actuators[n] for n in ('maa', 'baa')]
        return cls(
            statics=StaticParams.from_leg(leg, pressure_sign),
            inertia=(float(leg.bodies['thigh'].inertia[0]), float(leg.bodies['calf'].inertia[0])),
            c=(float(acts[0].c), float(acts[1].c)),
            damping=(float(hip.damping), float(knee.damping)),
            armature=(float(hip.armature), float(knee.armature)),
            c_per_kpa=(float(acts[0].c_per_kpa), float(acts[1].c_per_kpa)),
        )


@dataclass(frozen=True)
class Derivatives:
    """θ̈ and its first derivatives at a batch of states: acc (..., 2); d_q, d_qd, d_p
    (..., 2, 2) with d_x[..., i, j] = ∂θ̈_i/∂x_j (P in kPa)."""

    acc: np.ndarray
    d_q: np.ndarray
    d_qd: np.ndarray
    d_p: np.ndarray


class LegDynamics:
    """θ̈(θ, θ̇, P) of the leg, batched, with analytic first derivatives (see the module)."""

    def __init__(self, params: DynamicParams) -> None:
        self.params = params
        s = params.statics
        g = s.geometry
        ma, mb = s.m_act
        # points: (kinetic mass, gravity mass, P, φ, Q, ψ)
        points = [
            (s.m_thigh, s.m_thigh, *_polar(s.com_thigh), 0.0, 0.0),
            (s.m_calf, s.m_calf, g.a1, 0.0, *_polar(s.com_calf)),
            (ma / 3, ma / 2, g.b1, -g.beta1, 0.0, 0.0),
            (mb / 3, mb / 2, g.a1, 0.0, g.b2, g.beta2),
        ]
        self.A = sum(m * P * P for m, _, P, _, _, _ in points) + params.inertia[0]
        self.B = sum(m * Q * Q for m, _, _, _, Q, _ in points) + params.inertia[1]
        cross = sum(m * P * Q * cmath.exp(1j * (psi - phi)) for m, _, P, phi, Q, psi in points)
        self.E, self.delta = abs(cross), cmath.phase(cross)
        ga = sum(mg * P * cmath.exp(1j * phi) for _, mg, P, phi, _, _ in points)
        gb = sum(mg * Q * cmath.exp(1j * psi) for _, mg, _, _, Q, psi in points)
        self.Ga, self.phi_g = abs(ga), cmath.phase(ga)
        self.Gb, self.psi_g = abs(gb), cmath.phase(gb)
        self.g = s.g
        self.arm = params.armature
        self.damp = params.damping
        self.k = np.asarray(s.k, float)
        self.l0 = np.asarray(s.l0, float)
        self.ca = np.asarray(params.c, float)
        self.cp = np.asarray(params.c_per_kpa, float)
        self.SP = s.pressure_sign * np.asarray(s.S, float) * 1e3  # N per kPa at l0, signed
        self.slope = np.asarray(s.area_slope, float)
        self.geometry = g

    def mass_matrix(self, q) -> np.ndarray:
        """M(θ) (..., 2, 2)."""
        q = np.asarray(q, float)
        e = self.E * np.cos(q[..., 1] + self.delta)
        M = np.empty(q.shape[:-1] + (2, 2))
        M[..., 0, 0] = self.A + self.B + 2 * e + self.arm[0]
        M[..., 0, 1] = M[..., 1, 0] = self.B + e
        M[..., 1, 1] = self.B + self.arm[1]
        return M

    def gravity_torque(self, q) -> np.ndarray:
        """g ∂U/∂θ (N·m, ..., 2): the torque gravity applies (statics.gravity_generalized)."""
        q = np.asarray(q, float)
        cb = self.g * self.Gb * np.cos(q[..., 0] + q[..., 1] + self.psi_g)
        return np.stack([self.g * self.Ga * np.cos(q[..., 0] + self.phi_g) + cb, cb], -1)

    def holding_pressures(self, q) -> np.ndarray:
        """P (kPa, ..., 2) that hold poses q at rest: J_Aᵀ(k(l − l0) − σ S P) = g ∂U/∂θ
        (statics.holding_pressures on a batch; unclipped)."""
        q = np.asarray(q, float)
        lengths, J, _ = actuation_derivatives_batch(q, self.geometry)
        g = self.gravity_torque(q)
        ja, jb1, jb2 = J[..., 0, 0], J[..., 1, 0], J[..., 1, 1]
        # J_Aᵀ x = g∂U/∂θ with J_Aᵀ = [[ja, jb1], [0, jb2]]
        xb = g[..., 1] / jb2
        xa = (g[..., 0] - jb1 * xb) / ja
        f = self.k * (lengths - self.l0) - np.stack([xa, xb], -1)
        return f / (self.SP * (1.0 + self.slope * (lengths - self.l0)))

    def acceleration(self, q, qd, p) -> np.ndarray:
        return self.derivatives(q, qd, p).acc

    def derivatives(self, q, qd, p) -> Derivatives:
        """θ̈ and ∂θ̈/∂(θ, θ̇, P) at every state of the batch (q, qd rad, rad/s; p kPa).

        Written out component by component: on a few dozen states numpy's per-call overhead,
        not the arithmetic, is the cost, so every 2×2 product is spelled out."""
        q, qd, p = (np.asarray(v, float) for v in (q, qd, p))
        t1, t2 = q[..., 0], q[..., 1]
        w1, w2 = qd[..., 0], qd[..., 1]
        gam = t2 + self.delta
        es, ec = self.E * np.sin(gam), self.E * np.cos(gam)
        m11 = (self.A + self.B + self.arm[0]) + 2 * ec
        m12 = self.B + ec
        m22 = self.B + self.arm[1]
        inv = 1.0 / (m11 * m22 - m12 * m12)
        i11, i12, i22 = m22 * inv, -m12 * inv, m11 * inv
        a12 = t1 + t2 + self.psi_g
        gb_c, gb_s = self.g * self.Gb * np.cos(a12), self.g * self.Gb * np.sin(a12)
        a1 = t1 + self.phi_g
        ga_c, ga_s = self.g * self.Ga * np.cos(a1), self.g * self.Ga * np.sin(a1)
        # actuators through the exact transmission (the MAA spans the hip only)
        lengths, J, H = actuation_derivatives_batch(q, self.geometry)
        ja = J[..., 0, 0]
        jb1, jb2 = J[..., 1, 0], J[..., 1, 1]
        ha = H[..., 0, 0, 0]
        hb11, hb12, hb22 = H[..., 1, 0, 0], H[..., 1, 0, 1], H[..., 1, 1, 1]
        (k_a, k_b), (cp_a, cp_b) = self.k, self.cp
        # the muscles' damping at their pressures, c_a + c_p P
        c_a = self.ca[0] + cp_a * p[..., 0]
        c_b = self.ca[1] + cp_b * p[..., 1]
        ld_a, ld_b = ja * w1, jb1 * w1 + jb2 * w2  # l̇
        ext_a, ext_b = lengths[..., 0] - self.l0[0], lengths[..., 1] - self.l0[1]
        # σ S(l) per kPa, and the stiffness the pressure adds through S(l): k − σ S s P
        s_a = self.SP[0] * (1.0 + self.slope[0] * ext_a)
        s_b = self.SP[1] * (1.0 + self.slope[1] * ext_b)
        k_a = k_a - self.SP[0] * self.slope[0] * p[..., 0]
        k_b = k_b - self.SP[1] * self.slope[1] * p[..., 1]
        ta = self.k[0] * ext_a + c_a * ld_a - s_a * p[..., 0]
        tb = self.k[1] * ext_b + c_b * ld_b - s_b * p[..., 1]
        # right-hand side: gravity − Coriolis − joint damping − J_Aᵀ T
        cor = es * (2 * w1 + w2) * w2
        r1 = ga_c + gb_c + cor - self.damp[0] * w1 - ja * ta - jb1 * tb
        r2 = gb_c - es * w1 * w1 - self.damp[1] * w2 - jb2 * tb
        acc1 = i11 * r1 + i12 * r2
        acc2 = i12 * r1 + i22 * r2
        # ∂rhs/∂θ: −∂(J_Aᵀ T)/∂θ − gravity Hessian − ∂c/∂θ − ∂M/∂θ2·θ̈;
        # ∂(J_aᵀ T_a)/∂θ_j = H_a[:, j] T_a + J_a (k_a J_a[j] + c_a Σ_i H_a[i, j] θ̇_i)
        dta1 = k_a * ja + c_a * (ha * w1)
        dtb1 = k_b * jb1 + c_b * (hb11 * w1 + hb12 * w2)
        dtb2 = k_b * jb2 + c_b * (hb12 * w1 + hb22 * w2)
        g11 = ga_s + gb_s
        d11 = -(ha * ta + ja * dta1 + hb11 * tb + jb1 * dtb1) - g11
        d12 = -(hb12 * tb + jb1 * dtb2) - gb_s + ec * (2 * w1 + w2) * w2 + 2 * es * acc1 + es * acc2
        d21 = -(hb12 * tb + jb2 * dtb1) - gb_s
        d22 = -(hb22 * tb + jb2 * dtb2) - gb_s - ec * w1 * w1 + es * acc1
        # ∂rhs/∂θ̇: Coriolis, joint damping, actuator damping
        v11 = 2 * es * w2 - self.damp[0] - c_a * ja * ja - c_b * jb1 * jb1
        v12 = es * (2 * w1 + 2 * w2) - c_b * jb1 * jb2
        v21 = -2 * es * w1 - c_b * jb1 * jb2
        v22 = -self.damp[1] - c_b * jb2 * jb2
        # ∂rhs/∂P: (σ S(l) − c_p l̇) J_A, column per actuator
        u_a, u_b = s_a - cp_a * ld_a, s_b - cp_b * ld_b
        p11, p12, p22 = ja * u_a, jb1 * u_b, jb2 * u_b
        shape = t1.shape + (2, 2)
        d_q = np.empty(shape)
        d_q[..., 0, 0] = i11 * d11 + i12 * d21
        d_q[..., 0, 1] = i11 * d12 + i12 * d22
        d_q[..., 1, 0] = i12 * d11 + i22 * d21
        d_q[..., 1, 1] = i12 * d12 + i22 * d22
        d_qd = np.empty(shape)
        d_qd[..., 0, 0] = i11 * v11 + i12 * v21
        d_qd[..., 0, 1] = i11 * v12 + i12 * v22
        d_qd[..., 1, 0] = i12 * v11 + i22 * v21
        d_qd[..., 1, 1] = i12 * v12 + i22 * v22
        d_p = np.empty(shape)
        d_p[..., 0, 0] = i11 * p11
        d_p[..., 0, 1] = i11 * p12 + i12 * p22
        d_p[..., 1, 0] = i12 * p11
        d_p[..., 1, 1] = i12 * p12 + i22 * p22
        return Derivatives(acc=np.stack([acc1, acc2], -1), d_q=d_q, d_qd=d_qd, d_p=d_p)


def _polar(v) -> tuple[float, float]:
    """(length, angle) of a point given as (along, perpendicular) link coordinates."""
    return math.hypot(v[0], v[1]), math.atan2(v[1], v[0])
