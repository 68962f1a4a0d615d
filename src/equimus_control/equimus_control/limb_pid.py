"""PID and static feedforward for any limb of the description: N joints, M muscles (no ROS).

The same law as pid.PIDController (which keeps the 2-joint leg's closed forms in plain floats),
written on arrays with the general kinematics of equimus_description.limb:

    τ_P = A(θ) P,   A = σ J_A(θ)ᵀ diag(S)          (torque of the pressures; J_A is M × N)
    P_ff = the pressures that hold the reference pose (bounded least squares)
    P    = argmin ‖A (P − P_ff) − τ_fb‖² + ε²‖P − P_ff‖²   on 0 ≤ P ≤ p_max

The small ε term makes P unique when there are more muscles than joints (the redundancy goes to
the feedforward's co-contraction). Anti-windup as in PIDController.step_numpy.
"""

from __future__ import annotations

import numpy as np

from equimus_description.limb import PlanarLimb

from .controller import ControlOutput, Estimate, Reference
from .pid import PIDGains, anti_windup, check_joint_count


class LimbStaticFeedforward:
    """Open loop: the pressures that best hold the reference pose."""

    def __init__(self, limb: PlanarLimb, pressure_sign: float = 1.0) -> None:
        self.limb, self.sign = limb, pressure_sign

    def reset(self) -> None:
        pass

    def step(self, state: Estimate, ref: Reference, dt: float, p_max: float) -> ControlOutput:
        P, residual = self.limb.holding_pressures(ref.q, p_max, self.sign)
        sat = np.isclose(P, 0.0) | np.isclose(P, p_max)
        return ControlOutput(P, sat & (np.abs(residual).max() > 1e-6), {'feedforward': P.copy()})


class LimbPIDController:
    """Joint-space PID → torque → M pressures, for the limb of `limb`'s description."""

    def __init__(
        self, limb: PlanarLimb, gains: PIDGains | None = None, pressure_sign: float = 1.0
    ) -> None:
        self.limb, self.sign = limb, pressure_sign
        self.g = gains if gains is not None else PIDGains()
        check_joint_count(self.g, limb.n)
        self.reset()

    def reset(self) -> None:
        self.integral = np.zeros(self.limb.n)

    def set_gains(self, gains: PIDGains) -> None:
        check_joint_count(gains, self.limb.n)
        self.g = gains
        i_max = np.asarray(gains.i_max)
        self.integral = np.clip(self.integral, -i_max, i_max)

    def step(self, state: Estimate, ref: Reference, dt: float, p_max: float) -> ControlOutput:
        q, qd = np.asarray(state.q, float), np.asarray(state.qd, float)
        q_ref, qd_ref = np.asarray(ref.q, float), np.asarray(ref.qd, float)
        if self.g.lead > 0.0:
            q_ref, qd_ref = ref.at(self.g.lead), ref.velocity_at(self.g.lead)
        kp, ki, kd = (np.asarray(v, float) for v in (self.g.kp, self.g.ki, self.g.kd))
        e = q_ref - q
        p_ff, _ = self.limb.holding_pressures(q_ref, p_max, self.sign)
        tau = kp * e + kd * (qd_ref - qd) + self.integral
        A = self.limb.pressure_torque_matrix(q, self.sign)
        P, terr = self.limb.solve_pressures(A, A @ p_ff + tau, p_max, prefer=p_ff)
        sat = np.isclose(P, 0.0) | np.isclose(P, p_max)
        i_max = np.broadcast_to(np.asarray(self.g.i_max, float), e.shape)
        self.integral = np.array(
            [
                anti_windup(float(i), float(t), float(k * x), self.g.k_aw, dt, float(m))
                for i, t, k, x, m in zip(
                    self.integral, terr, np.broadcast_to(ki, e.shape), e, i_max, strict=True
                )
            ]
        )
        return ControlOutput(P, sat, {'torque_error': terr, 'feedforward': p_ff})
