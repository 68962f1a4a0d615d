"""Static model of the leg: pressures that hold a pose, and the pose that given pressures reach.

Potential energy of the leg (planar y points along gravity):
    V(θ) = −g Σ m_i y_i(θ) + Σ_a ½ k_a (l_a − l0_a)² − Σ_a S_a P_a (l_a + ½ s_a (l_a − l0_a)²)
(the last term is the work of the pressure force S·P, which LENGTHENS the actuator: on the real
rig more P1 raises θ1 and more P2 lowers θ2, and the static data only fit with this sign. The
pressure force is one-sided, P ≥ 0; the elastic force k(l − l0) pulls the actuator back.)
Equilibrium ∂V/∂θ = 0 gives  J_Aᵀ S P = J_Aᵀ k (l − l0) − g Σ m_i ∂y_i/∂θ,
with S the area at length l, S(l) = S (1 + s (l − l0)) (s the description's area_slope, 0 for
the paper's constant area). It is linear in P (feedforward) and is solved for θ by minimising V
within the joint
limits (inverse statics), so equilibria on a joint stop come out as they do on the rig.

Masses follow the 3-2-1 actuator of the EquiMus paper: m/6 on the fixed anchor (no torque),
2m/3 at the midpoint and m/6 on the moving anchor, i.e. an effective m/2 at the moving anchor.
No ROS, no MuJoCo.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from equimus_description.kinematics import (
    PlanarGeometry,
    actuation_derivatives,
    actuation_lengths_jacobian,
)

G = 9.81
P_MAX_KPA = 50.0


@dataclass(frozen=True)
class StaticParams:
    """Everything the static model needs (SI units; pressures handled in kPa at the API)."""

    geometry: PlanarGeometry = field(default_factory=PlanarGeometry)
    m_thigh: float = 0.086
    m_calf: float = 0.1033
    # centre of mass of each link: (distance along the link axis, offset perpendicular to it,
    # positive towards increasing angle), from the authors' mesh inertia.
    com_thigh: tuple = (0.12665, -0.00125)
    com_calf: tuple = (0.13903, 0.00370)
    m_act: tuple = (0.1865, 0.2727)  # actuator masses [maa, baa]
    k: tuple = (203.94877985761158, 105.07337552294058)  # N/m (Table V, static)
    S: tuple = (0.0004108979203914209, 0.0003244353052769064)  # m² (Table V, static)
    l0: tuple = (0.1642, 0.2579)  # m (Table V, static)
    area_slope: tuple = (0.0, 0.0)  # 1/m: S(l) = S·(1 + area_slope·(l − l0))
    # joint limits (rad) in paper angles: reference MJCF hip ±60°, knee [−90°, +30°] about 90°.
    theta_min: tuple = (np.pi / 6, 0.0)
    theta_max: tuple = (5 * np.pi / 6, 2 * np.pi / 3)
    g: float = G
    # +1: pressure lengthens the actuator (what the real static data show, and the equimus_sim
    # MuJoCo model's convention); −1: pressure pulls (shortens), for other actuators.
    pressure_sign: float = 1.0

    @classmethod
    def from_leg(cls, leg, pressure_sign: float = 1.0) -> StaticParams:
        """From an equimus_sim LegDescription (the plant model), so feedforward matches it.

        Body-frame COMs at the build pose are turned into (along, perpendicular) link
        coordinates; planar x = world y, planar y = −world z (config/leg.yaml). The default
        sign +1 (pressure lengthens) is the rig's and equimus_sim's convention.
        """
        hip, knee = leg.joints['hip'], leg.joints['knee']

        def link_com(body, phi):
            c = leg.bodies[body].com
            v = np.array([c[1], -c[2]])
            return (float(v @ _u(phi)), float(v @ _up(phi)))

        acts = [leg.actuators[n] for n in ('maa', 'baa')]
        return cls(
            geometry=leg.geometry,
            m_thigh=leg.bodies['thigh'].mass,
            m_calf=leg.bodies['calf'].mass,
            com_thigh=link_com('thigh', hip.ref),
            com_calf=link_com('calf', hip.ref + knee.ref),
            m_act=tuple(a.m for a in acts),
            k=tuple(a.k for a in acts),
            S=tuple(a.area for a in acts),
            l0=tuple(a.l0 for a in acts),
            area_slope=tuple(a.area_slope for a in acts),
            theta_min=(hip.range[0], knee.range[0]),
            theta_max=(hip.range[1], knee.range[1]),
            g=leg.gravity,
            pressure_sign=pressure_sign,
        )

    def with_identified(self, k=None, S=None, l0=None) -> StaticParams:
        return replace(
            self,
            k=self.k if k is None else tuple(k),
            S=self.S if S is None else tuple(S),
            l0=self.l0 if l0 is None else tuple(l0),
        )


def _u(phi):
    return np.array([np.cos(phi), np.sin(phi)])


def _up(phi):
    return np.array([-np.sin(phi), np.cos(phi)])


def gravity_generalized(q, p: StaticParams):
    """(y-weighted height U, ∂U/∂θ) where U = Σ m_i y_i; gravity torque is +g ∂U/∂θ."""
    U, dU1, dU2 = _gravity_floats(q, p)
    return U, np.array([dU1, dU2])


def _gravity_floats(q, p: StaticParams) -> tuple[float, float, float]:
    """`gravity_generalized` as (U, ∂U/∂θ1, ∂U/∂θ2) plain floats (every control cycle).

    Only y components are needed: with u(φ) = (cos φ, sin φ) and u⊥(φ) = (−sin φ, cos φ),
    y of u is sin φ and y of u⊥ is cos φ."""
    g = p.geometry
    t1, t2 = float(q[0]), float(q[1])
    a12 = t1 + t2
    s1, c1 = math.sin(t1), math.cos(t1)
    s12, c12 = math.sin(a12), math.cos(a12)
    sC, cC = math.sin(t1 - g.beta1), math.cos(t1 - g.beta1)
    sD, cD = math.sin(a12 + g.beta2), math.cos(a12 + g.beta2)
    (ht, vt), (hc, vc) = p.com_thigh, p.com_calf
    y_thigh, dy_thigh = ht * s1 + vt * c1, ht * c1 - vt * s1  # thigh COM, ∂/∂θ1
    y_cc, dy_cc = hc * s12 + vc * c12, hc * c12 - vc * s12  # calf COM from the knee
    y_knee, dy_knee = g.a1 * s1, g.a1 * c1
    y_C, dy_C = g.b1 * sC, g.b1 * cC  # anchor C on the thigh
    y_Dc, dy_Dc = g.b2 * sD, g.b2 * cD  # anchor D from the knee
    ma, mb = 0.5 * p.m_act[0], 0.5 * p.m_act[1]  # effective m/2 each
    U = p.m_thigh * y_thigh + p.m_calf * (y_knee + y_cc) + ma * y_C + mb * (y_knee + y_Dc)
    dU1 = p.m_thigh * dy_thigh + p.m_calf * (dy_knee + dy_cc) + ma * dy_C + mb * (dy_knee + dy_Dc)
    dU2 = p.m_calf * dy_cc + mb * dy_Dc
    return U, dU1, dU2


def potential(q, pressures_kpa, p: StaticParams) -> float:
    """V(θ) in J for pressures in kPa (see module docstring)."""
    lengths, _, _ = actuation_derivatives(q, p.geometry)
    U, _ = gravity_generalized(q, p)
    k, l0, S = np.asarray(p.k), np.asarray(p.l0), np.asarray(p.S)
    P = np.asarray(pressures_kpa, float) * 1e3
    ext = lengths - l0
    work = S * P * (lengths + 0.5 * np.asarray(p.area_slope) * ext**2)
    return float(-p.g * U + 0.5 * np.sum(k * ext**2) - p.pressure_sign * np.sum(work))


def potential_gradient(q, pressures_kpa, p: StaticParams) -> np.ndarray:
    """∂V/∂θ = −τ_net (N·m): the joint torque the pressures leave unbalanced, negated."""
    lengths, J, _ = actuation_derivatives(q, p.geometry)
    _, dU = gravity_generalized(q, p)
    k, l0, S = np.asarray(p.k), np.asarray(p.l0), np.asarray(p.S)
    P = np.asarray(pressures_kpa, float) * 1e3
    area = S * (1.0 + np.asarray(p.area_slope) * (lengths - l0))
    return -p.g * dU + J.T @ (k * (lengths - l0) - p.pressure_sign * area * P)


def holding_forces(q, p: StaticParams) -> np.ndarray:
    """Lengthening actuator forces F (N) that hold pose q: J_Aᵀ F = J_Aᵀ k(l−l0) − g ∂U/∂θ."""
    return np.array(holding_forces_floats(q, p))


def holding_forces_floats(q, p: StaticParams) -> tuple[float, float]:
    """`holding_forces` in plain floats (every control cycle: numpy's overhead on 2-vectors and
    a 2×2 solve is most of the cost). The 2×2 system by Cramer's rule; a singular J_A (no pose
    in the joint limits has one) raises ZeroDivisionError as numpy's solve raised LinAlgError."""
    return _holding(q, p)[0]


def _holding(q, p: StaticParams) -> tuple[tuple[float, float], tuple[float, float]]:
    """(holding forces, actuator lengths) in plain floats."""
    lengths, (j00, j01), (j10, j11) = actuation_lengths_jacobian(q, p.geometry)
    _, dU1, dU2 = _gravity_floats(q, p)
    # J_Aᵀ x = g dU, J_Aᵀ = [[j00, j10], [j01, j11]]
    b0, b1 = p.g * dU1, p.g * dU2
    det = j00 * j11 - j10 * j01
    x0 = (b0 * j11 - j10 * b1) / det
    x1 = (j00 * b1 - j01 * b0) / det
    (k0, k1), (l00, l01) = p.k, p.l0
    return (k0 * (lengths[0] - l00) - x0, k1 * (lengths[1] - l01) - x1), lengths


def holding_pressures_floats(q, p: StaticParams) -> tuple[float, float]:
    """`holding_pressures` (unclipped) in plain floats: P = F / S(l)."""
    (f0, f1), lengths = _holding(q, p)
    s = p.pressure_sign
    (s0, s1), (a0, a1), (l00, l01) = p.S, p.area_slope, p.l0
    area0 = s0 * (1.0 + a0 * (lengths[0] - l00))
    area1 = s1 * (1.0 + a1 * (lengths[1] - l01))
    return s * f0 / area0 / 1e3, s * f1 / area1 / 1e3


def holding_pressures(q, p: StaticParams, clip: bool = False) -> np.ndarray:
    """Pressures (kPa) that hold pose q. Unclipped values < 0 mean the pose needs a pull."""
    P = np.array(holding_pressures_floats(q, p))
    return np.clip(P, 0.0, P_MAX_KPA) if clip else P


def equilibrium(pressures_kpa, p: StaticParams, q0: np.ndarray | None = None) -> np.ndarray:
    """Pose (θ1, θ2) reached at rest under the given pressures: minimum of V within the limits.

    Starts from q0 (or a few spread starts) so the stable equilibrium is found, not a saddle.
    """
    # Imported here: scipy.optimize costs a node process ~0.3 s to import, and the processes that
    # import this module (controller, graph, fused loop) mostly never solve an equilibrium.
    from scipy.optimize import minimize

    bounds = list(zip(p.theta_min, p.theta_max, strict=True))
    starts = (
        [np.asarray(q0, float)]
        if q0 is not None
        else [np.array([np.pi / 2, np.pi / 4]), np.array([1.2, 0.3]), np.array([1.8, 1.2])]
    )
    best = None
    for s in starts:
        r = minimize(
            potential,
            s,
            args=(pressures_kpa, p),
            jac=potential_gradient,
            method='L-BFGS-B',
            bounds=bounds,
            options={'ftol': 1e-14, 'gtol': 1e-10},
        )
        if best is None or r.fun < best.fun:
            best = r
    assert best is not None  # starts is never empty
    return best.x
