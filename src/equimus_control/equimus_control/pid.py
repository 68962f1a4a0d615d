"""Joint-space PID with static feedforward, mapped to the two valve pressures (no ROS).

Torque the pressures produce at pose θ: τ_P = σ J_A(θ)ᵀ S P  (σ = pressure_sign: +1 when
pressure lengthens the actuator, −1 when it pulls), i.e. τ_P = A(θ) P with A = σ J_Aᵀ diag(S).
Each cycle the PID asks for τ_fb on top of the static feedforward P_ff(θ_ref); the pressures are
the solution of the box-constrained least squares
        min ‖A (P − P_ff) − τ_fb‖²   subject to 0 ≤ P ≤ P_max,
solved exactly by enumerating the 3² active sets of the two-variable problem (microseconds,
no iterations). With two one-sided actuators for two joints the box is often active; the
controller then reports saturation and which torque it could not deliver, and the integrator
is protected by conditional integration with back-calculation plus a hard clamp.

`impedance_transfer` gives the actuator-space stiffness/damping that reproduce the joint-space
PD (seeds/002 Sec. II-D, eqs. 26–31), including the term from ∂J_A/∂θ, for a faster inner loop
(e.g. a valve driver) and for diagnostics.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from equimus_description.config import ConfigError, param, validate_fields
from equimus_description.kinematics import actuation_derivatives, actuation_lengths_jacobian
from equimus_description.statics import (
    StaticParams,
    holding_pressures,
    holding_pressures_floats,
)
from equimus_description.valve import HARD_MAX_KPA

from . import kernels
from .controller import ControlOutput, Estimate, Reference


def pressure_torque_matrix(q, params: StaticParams) -> np.ndarray:
    """A(θ) (N·m per kPa): joint torques τ = A P of the pressure forces."""
    _, J, _ = actuation_derivatives(q, params.geometry)
    return params.pressure_sign * J.T * (np.asarray(params.S) * 1e3)[None, :]


def _isclose(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-8 + 1e-5 * abs(b)  # numpy.isclose's default tolerances


def box_lsq(A: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """Exact min ‖A x − b‖² on a 2-D box, by active-set enumeration. Returns (x, saturated mask).

    Plain floats: it runs every control cycle, and on 2×2 problems numpy's call overhead was
    most of the controller's compute time."""
    (a00, a01), (a10, a11) = np.asarray(A, float).tolist()
    best, sat = box_lsq_floats(
        ((a00, a01), (a10, a11)),
        (float(b[0]), float(b[1])),
        (float(lo[0]), float(lo[1])),
        (float(hi[0]), float(hi[1])),
    )
    return np.array(best), np.array(sat)


#: Each variable free (0), at its lower (1) or upper (2) bound, in itertools.product's order,
#: both free left out (the unconstrained optimum is tried first): the order decides ties.
_BOX_PATTERNS = tuple(p for p in itertools.product((0, 1, 2), repeat=2) if p != (0, 0))


def box_lsq_floats(A, b, lo_f, hi_f) -> tuple[list[float], list[bool]]:
    """`box_lsq` on plain floats: A ((a00, a01), (a10, a11)), b, lo, hi pairs."""
    (a00, a01), (a10, a11) = A
    b0, b1 = b
    cols = ((a00, a10), (a01, a11))
    det = a00 * a11 - a01 * a10
    if det != 0.0:
        x = ((b0 * a11 - a01 * b1) / det, (a00 * b1 - a10 * b0) / det)
        if lo_f[0] <= x[0] <= hi_f[0] and lo_f[1] <= x[1] <= hi_f[1]:
            return [x[0], x[1]], [False, False]
    best: list[float] | None = None
    best_cost = math.inf
    for i_mode, j_mode in _BOX_PATTERNS:
        xb = [lo_f[0] if i_mode == 1 else hi_f[0], lo_f[1] if j_mode == 1 else hi_f[1]]
        free = 0 if i_mode == 0 else 1 if j_mode == 0 else -1
        if free >= 0:
            j = 1 - free
            a, c = cols[free], cols[j]
            den = a[0] * a[0] + a[1] * a[1]
            if den <= 0:
                continue
            xi = (a[0] * (b0 - c[0] * xb[j]) + a[1] * (b1 - c[1] * xb[j])) / den
            if xi < lo_f[free] - 1e-12 or xi > hi_f[free] + 1e-12:
                continue
            xb[free] = xi
        r0 = a00 * xb[0] + a01 * xb[1] - b0
        r1 = a10 * xb[0] + a11 * xb[1] - b1
        cost = r0 * r0 + r1 * r1
        if cost < best_cost - 1e-15:
            best, best_cost = xb, cost
    # a corner (both at a bound) always has a finite cost for finite A, b, lo, hi
    assert best is not None, 'box_lsq: non-finite problem data'
    sat = [_isclose(best[i], lo_f[i]) or _isclose(best[i], hi_f[i]) for i in range(2)]
    return best, sat


def pressures_for_torque(q, tau_extra, p_ff, params: StaticParams, p_max=HARD_MAX_KPA):
    """Pressures in [0, p_max] whose torque best matches A P_ff + τ_extra.

    Returns (P, saturated, τ_err)."""
    A = pressure_torque_matrix(q, params)
    p_ff = np.asarray(p_ff, float)
    target = A @ p_ff + np.asarray(tau_extra, float)
    lo, hi = np.zeros(2), np.full(2, float(p_max))
    P, sat = box_lsq(A, target, lo, hi)
    P = np.clip(P, lo, hi)
    return P, sat, A @ P - target


@dataclass(frozen=True)
class PIDGains:
    """PID gains in joint-torque units; all of them may change while the controller runs."""

    kp: tuple[float, float] = param(
        (3.0, 1.5), 'N·m/rad, proportional gain [hip, knee]', range=(0.0, 1e3), runtime=True
    )
    ki: tuple[float, float] = param(
        (4.0, 2.0), 'N·m/(rad·s), integral gain [hip, knee]', range=(0.0, 1e3), runtime=True
    )
    kd: tuple[float, float] = param(
        (0.15, 0.06),
        'N·m·s/rad, derivative gain on the measured velocity [hip, knee]',
        range=(0.0, 1e2),
        runtime=True,
    )
    i_max: tuple[float, float] = param(
        (0.5, 0.3), 'N·m, clamp of the integral torque', range=(0.0, 1e2), runtime=True
    )
    k_aw: float = param(
        5.0, '1/s, anti-windup back-calculation rate', range=(0.0, 1e3), runtime=True
    )
    lead: float = param(
        0.0,
        's, the PID follows the reference this far ahead (its feedforward and its error): the '
        "valves' dead time and fill lag, paid in advance; the reference's own future where it "
        'sends one (/reference/preview), else carried along its velocity (at most 0.1 s)',
        range=(0.0, 1.0),
        runtime=True,
    )

    def __post_init__(self) -> None:
        validate_fields(self)
        n = len(self.kp)
        for name in ('kp', 'ki', 'kd', 'i_max'):
            if n == 0 or len(getattr(self, name)) != n:
                raise ConfigError(
                    f'{name}={getattr(self, name)!r}: one value per joint, as many as kp '
                    f'({n}); the 2-joint leg takes [hip, knee]'
                )


def check_joint_count(gains: PIDGains, n: int) -> None:
    if len(gains.kp) != n:
        raise ConfigError(
            f'kp={list(gains.kp)!r}: the limb has {n} joints; give kp, ki, kd and i_max '
            f'with {n} values each'
        )


class StaticFeedforward:
    """Open loop: the pressures that hold the reference pose (clipped to the valve range)."""

    def __init__(self, params: StaticParams) -> None:
        self.params = params

    def reset(self) -> None:
        pass

    def step(self, state: Estimate, ref: Reference, dt: float, p_max: float) -> ControlOutput:
        raw = holding_pressures(ref.q, self.params)
        P = np.clip(raw, 0.0, p_max)
        return ControlOutput(P, (raw < 0) | (raw > p_max), {'feedforward': P.copy()})


#: pid_law's answer: pressures (kPa), saturated, torque errors (N·m), feedforward pressures
#: (kPa), new integral torques (N·m), each [hip, knee] or [maa, baa]
PIDOutput = tuple[float, float, bool, bool, float, float, float, float, float, float]


def pack_statics(params: StaticParams) -> tuple[float, ...]:
    """The static model as the compiled `pid_law` reads it (the order of _kernels.c's enum)."""
    g = params.geometry
    values = (
        *(g.beta1, g.beta2, g.a1, g.b1, g.b2, g.d1, g.d2),
        *(params.m_thigh, params.m_calf, *params.com_thigh, *params.com_calf, *params.m_act),
        *(*params.k, *params.l0, *params.S, *params.area_slope, params.g, params.pressure_sign),
    )
    return tuple(float(v) for v in values)


def pid_law(
    params: StaticParams,
    q0: float,
    q1: float,
    qd0: float,
    qd1: float,
    r0: float,
    r1: float,
    rd0: float,
    rd1: float,
    kp0: float,
    kp1: float,
    ki0: float,
    ki1: float,
    kd0: float,
    kd1: float,
    k_aw: float,
    i_max0: float,
    i_max1: float,
    i0: float,
    i1: float,
    dt: float,
    p_max: float,
) -> PIDOutput:
    """`PIDController.step`'s law in plain floats (every cycle; numpy on 2-vectors cost most of
    it), the reference of its compiled form: angles q, rates qd, reference r and its rate rd,
    gains, the integral torques i → (pressures p0, p1 in [0, p_max], saturated, torque errors,
    feedforward pressures, new integral torques). `PIDController.step_numpy` is the same law
    on arrays."""
    pm = float(p_max)
    e0, e1 = r0 - q0, r1 - q1
    h0, h1 = holding_pressures_floats((r0, r1), params)
    f0 = min(max(h0, 0.0), pm)  # np.clip(x, 0, p_max) for p_max >= 0
    f1 = min(max(h1, 0.0), pm)
    t0 = kp0 * e0 + kd0 * (rd0 - qd0) + i0
    t1 = kp1 * e1 + kd1 * (rd1 - qd1) + i1
    # A = σ J_Aᵀ diag(S·1e3): A[j][a] = σ J[a][j] S[a] 1e3
    _, (j00, j01), (j10, j11) = actuation_lengths_jacobian((q0, q1), params.geometry)
    sg = params.pressure_sign
    s0, s1 = params.S[0] * 1e3, params.S[1] * 1e3
    a00, a01, a10, a11 = sg * j00 * s0, sg * j10 * s1, sg * j01 * s0, sg * j11 * s1
    b0 = (a00 * f0 + a01 * f1) + t0
    b1 = (a10 * f0 + a11 * f1) + t1
    (p0, p1), (sat0, sat1) = box_lsq_floats(
        ((a00, a01), (a10, a11)), (b0, b1), (0.0, 0.0), (pm, pm)
    )
    p0, p1 = min(max(p0, 0.0), pm), min(max(p1, 0.0), pm)
    err0 = (a00 * p0 + a01 * p1) - b0
    err1 = (a10 * p0 + a11 * p1) - b1
    ni0 = anti_windup(i0, err0, ki0 * e0, k_aw, dt, i_max0)
    ni1 = anti_windup(i1, err1, ki1 * e1, k_aw, dt, i_max1)
    return p0, p1, sat0, sat1, err0, err1, f0, f1, ni0, ni1


class PIDController:
    """PID on (θ1, θ2) → torque → pressures (see module docstring). `compiled`: its law
    compiled or in Python (None: kernels.use_compiled's choice)."""

    def __init__(
        self, params: StaticParams, gains: PIDGains | None = None, compiled: bool | None = None
    ) -> None:
        k = kernels.use_compiled(compiled)
        self._law: Callable[..., PIDOutput] = pid_law if k is None else k.pid_law
        self.kernels = 'python' if k is None else 'compiled'
        self.params = params
        self.g = gains if gains is not None else PIDGains()
        self.reset()

    @property
    def params(self) -> StaticParams:
        return self._params

    @params.setter
    def params(self, params: StaticParams) -> None:
        self._params = params
        self._law_params: StaticParams | tuple[float, ...] = (
            params if self.kernels == 'python' else pack_statics(params)
        )

    def reset(self) -> None:
        self.integral = np.zeros(2)  # integral torque (N·m)
        check_joint_count(self.g, 2)

    def set_gains(self, gains: PIDGains) -> None:
        """New gains from the next step on (the integral torque is kept, clamped to i_max)."""
        check_joint_count(gains, len(self.integral))
        self.g = gains
        i_max = np.asarray(gains.i_max)
        self.integral = np.clip(self.integral, -i_max, i_max)

    def step(self, state: Estimate, ref: Reference, dt: float, p_max: float) -> ControlOutput:
        """The control law (`pid_law`, compiled or in Python). `step_numpy` is the same law on
        arrays, the reference the tests compare with."""
        q0, q1 = float(state.q[0]), float(state.q[1])
        qd0, qd1 = float(state.qd[0]), float(state.qd[1])
        g = self.g
        if g.lead > 0.0:
            r_q, r_qd = ref.at(g.lead), ref.velocity_at(g.lead)
            r0, r1, rd0, rd1 = float(r_q[0]), float(r_q[1]), float(r_qd[0]), float(r_qd[1])
        else:
            r0, r1 = float(ref.q[0]), float(ref.q[1])
            rd0, rd1 = float(ref.qd[0]), float(ref.qd[1])
        (kp0, kp1), (ki0, ki1), (kd0, kd1) = g.kp, g.ki, g.kd
        i0, i1 = float(self.integral[0]), float(self.integral[1])
        p0, p1, sat0, sat1, err0, err1, f0, f1, ni0, ni1 = self._law(
            self._law_params, q0, q1, qd0, qd1, r0, r1, rd0, rd1, kp0, kp1, ki0, ki1, kd0, kd1,
            g.k_aw, g.i_max[0], g.i_max[1], i0, i1, dt, p_max
        )  # fmt: skip
        self.integral = np.array([ni0, ni1])
        return ControlOutput(
            np.array([p0, p1]),
            np.array([sat0, sat1]),
            {'torque_error': np.array([err0, err1]), 'feedforward': np.array([f0, f1])},
        )

    def step_numpy(self, state: Estimate, ref: Reference, dt: float, p_max: float) -> ControlOutput:
        q, qd = np.asarray(state.q, float), np.asarray(state.qd, float)
        q_ref, qd_ref = np.asarray(ref.q, float), np.asarray(ref.qd, float)
        if self.g.lead > 0.0:
            q_ref, qd_ref = ref.at(self.g.lead), ref.velocity_at(self.g.lead)
        kp, ki, kd = (np.asarray(v) for v in (self.g.kp, self.g.ki, self.g.kd))
        e = q_ref - q
        p_ff = np.clip(holding_pressures(q_ref, self.params), 0.0, p_max)
        tau = kp * e + kd * (qd_ref - qd) + self.integral
        P, sat, terr = pressures_for_torque(q, tau, p_ff, self.params, p_max)
        # Anti-windup. Conditional integration: a joint whose delivered torque falls short in
        # the direction the integrator pushes stops integrating. Back-calculation: there, the
        # integral also bleeds towards zero at rate k_aw·|shortfall| (never past zero).
        short = (np.abs(terr) > 1e-9) & (np.sign(terr) != np.sign(ki * e))
        di = np.where(short, 0.0, ki * e)
        bleed = np.where(
            short & (np.sign(terr) == -np.sign(self.integral)),
            np.minimum(self.g.k_aw * np.abs(terr) * dt, np.abs(self.integral)),
            0.0,
        )
        self.integral += dt * di - np.sign(self.integral) * bleed
        i_max = np.asarray(self.g.i_max)
        self.integral = np.clip(self.integral, -i_max, i_max)
        return ControlOutput(P, sat, {'torque_error': terr, 'feedforward': p_ff})


def _sign(x: float) -> float:
    return 1.0 if x > 0 else (-1.0 if x < 0 else (0.0 if x == 0 else math.nan))


def anti_windup(
    integral: float, terr: float, push: float, k_aw: float, dt: float, i_max: float
) -> float:
    """One joint's integral after a step: conditional integration + back-calculation (see
    PIDController.step_numpy, its array form); also LimbPIDController's, joint by joint."""
    s_err = _sign(terr)
    short = abs(terr) > 1e-9 and s_err != _sign(push)
    di = 0.0 if short else push
    s_int = _sign(integral)
    bleed = min(k_aw * abs(terr) * dt, abs(integral)) if short and s_err == -s_int else 0.0
    out = integral + (dt * di - s_int * bleed)
    return min(max(out, -i_max), i_max)


def impedance_transfer(q, qd, q_ref, kp, kd, params: StaticParams):
    """Actuator-space force and gains equivalent to τ = Kp(q* − q) − Kd q̇ (seeds/002 eq. 26–31).

    With τ = σ J_Aᵀ F (F the pressure forces), F*(q) = σ J_A⁻ᵀ τ(q). Returns (F*, K_Pm, K_Dm) with
    K_Pm = −∂F/∂l at constant actuator velocity l̇ and K_Dm = −∂F/∂l̇:
      K_Pm = σ[J⁻ᵀKpJ⁻¹ − (∂J⁻ᵀ/∂q·τ)J⁻¹ + J⁻ᵀKd ∂(J⁻¹l̇)/∂q J⁻¹],  K_Dm = σ J⁻ᵀ Kd J⁻¹.
    """
    q, qd, q_ref = (np.asarray(v, float) for v in (q, qd, q_ref))
    Kp, Kd = np.diag(kp), np.diag(kd)
    s = params.pressure_sign
    _, J, H = actuation_derivatives(q, params.geometry)
    Ji = np.linalg.inv(J)
    tau = Kp @ (q_ref - q) - Kd @ qd
    F = s * Ji.T @ tau
    ld = J @ qd
    # ∂(J⁻ᵀ)/∂q_j = −J⁻ᵀ (∂J/∂q_j)ᵀ J⁻ᵀ ;  ∂(J⁻¹ l̇)/∂q_j = −J⁻¹ (∂J/∂q_j) J⁻¹ l̇
    dJ = [H[:, :, j] for j in range(2)]
    A_term = np.column_stack([-Ji.T @ dJ[j].T @ Ji.T @ tau for j in range(2)])
    dqd_dq = np.column_stack([-Ji @ dJ[j] @ Ji @ ld for j in range(2)])
    dF_dq = s * (A_term - Ji.T @ Kp - Ji.T @ Kd @ dqd_dq)
    K_Pm = -dF_dq @ Ji
    K_Dm = s * Ji.T @ Kd @ Ji
    return F, K_Pm, K_Dm
