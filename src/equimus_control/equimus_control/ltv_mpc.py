"""MPC on the exact actuation model, linearised along its own predicted trajectory (LTV, one
real-time SQP iteration per control period).

Model (`PeriodModel`): state x = (θ1, θ2, θ̇1, θ̇2, p_maa, p_baa[, I_maa, I_baa]), one control
period per step.
The mechanics are `equimus_description.dynamics.LegDynamics` (joint-space dynamics through the
exact transmission l(θ), J_A(θ) and ∂J_A/∂θ; seeds/002) integrated with semi-implicit Euler
sub-steps; the chamber pressures follow the description's valve model (`equimus_description
.valve`): the command reaches the chamber after the dead time, a first-order lag with the fill
or the vent time constant per channel and direction. Over one period the chamber sees the
command of D + 1 periods ago for the first f·T and that of D periods ago for the rest
(dead time = (D + f)·T), so the pressure at any instant of the period is linear in the pressure
at its start and the two commands; the mechanics see it at each sub-step's midpoint. The
Jacobians of the period map are analytic (chain rule through the sub-steps; derivatives of the
dynamics in closed form), checked against finite differences in tests/control/test_ltv_mpc.py.

Each cycle (real-time iteration, multiple shooting condensed):
1. Linearisation points: the previous cycle's predicted trajectory and commands shifted by one
   period, the first node replaced by the current state (estimate + the open-loop valve
   observer, dead time included).
2. All nodes evaluated at once (arrays over the horizon): x̄⁺_k, A_k, B_k, and the defects
   d_k = F(x̄_k, v̄_k) − x̄_{k+1}.
3. Condensing: x_k = x̄_k + Γ_k U + λ_k, where U are the decision values. The commands are
   first-order-hold ramps between block-end values U_i (`block` periods per block), from the
   last command sent; a ramp whose step is at most `block`·slew·T is exactly what the valve
   driver's slew limit lets through, so what is predicted is what the valves get. The chamber
   input of period k is the command of period k − D (and k − D − 1 for the first f·T): the
   commands still in flight are constants in the prediction, the decisions act after the dead
   time. The horizon is the dead time plus `blocks`·`block` periods.
4. QP in U:  min Σ_k ‖θ_k − θ*_k‖²_Q + q_v‖θ̇_k − θ̇*_k‖² + r_u‖U − u*‖² + r_du‖ΔU‖²
   s.t. 0 ≤ U ≤ p_max, |U_i − U_{i−1}| ≤ block·slew·T (U_{−1} = the last command), solved
   by OSQP warm-started from the shifted solution. θ*_k is the reference's preview: along its
   velocity, acceleration and jerk (differences of the successive references' velocities;
   `ltv_ref_order`), capped at its max_preview (0.1 s) and held beyond; u* its static
   pressures at the block ends.
5. The first period's command is sent; the valve observer and the predicted trajectory
   (x̄ + ΓU + λ) advance for the next cycle.

With the valves' regulator (`ValveParams.integral_gain` > 0) the state also has each valve's
integral (`PeriodModel`): without it the prediction's chambers relax to the command while the
valves overshoot it, and the controller oscillates on such a leg (tests/control/test_ltv_mpc.py).
Not in the prediction: the valves' fill-rate limit (`ValveParams.fill_rate`, none in the shipped
descriptions) and the regulator's slack (the valve observer runs it, through `follow`), the
joints' dry friction and stops. What
limits the tracking is the preview: the controller sees the reference's current sample only,
and the chambers vent with τ ≈ 0.2 s (docs/control.md, "LTV MPC").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from equimus_description.config import check_pair, param, validate_fields
from equimus_description.dynamics import LegDynamics
from equimus_description.valve import (
    HARD_MAX_KPA,
    MIN_REGULATED_KPA,
    SLEW_RATE_KPA_S,
    VALVE_TAU_S,
    ValveMemory,
    ValveParams,
    follow,
)

from . import qp
from .controller import ControlOutput, Estimate, Reference
from .lowband import sigma_delta
from .step import MAX_DT

if TYPE_CHECKING:
    import osqp

# osqp and scipy.sparse are imported where used: every controller process imports this module for
# LTVMPCConfig (controllers.configs declares every kind's parameters), and a PID controller's
# start need not pay the 0.1-0.3 s each takes to import.

NX, NU = 6, 2


@dataclass(frozen=True)
class LTVMPCConfig:
    """Settings of the LTV MPC; all fixed at start-up."""

    ltv_blocks: int = param(12, 'LTV MPC decision blocks over the horizon', range=(1, 100))
    ltv_block: int = param(3, 'control periods per decision block', range=(1, 50))
    ltv_substeps: int = param(
        2, 'integration sub-steps of the model per control period', range=(1, 20)
    )
    ltv_q_theta: tuple[float, float] = qp.q_theta()
    ltv_q_vel: float = qp.q_vel('joint velocity error')
    ltv_r_u: float = qp.r_u('reference')
    ltv_r_du: float = qp.r_du('blocks')
    ltv_slew: float = param(
        SLEW_RATE_KPA_S,
        "kPa/s, rate limit of the command (keep it at the valve driver's slew_rate_kpa_s)",
        range=(1.0, 1e6),
    )
    ltv_min_regulated: float = param(
        MIN_REGULATED_KPA,
        "kPa, lowest pressure the valves regulate (keep it at the valve driver's "
        'min_regulated_kpa; below it they vent): commands under it are sigma-delta modulated '
        'between 0 and it; 0 = off',
        range=(0.0, 50.0),
    )
    ltv_ref_order: int = param(
        3,
        "order of the reference's preview within its max_preview: 1 along its velocity, 2 also "
        "its acceleration, 3 also its jerk (both estimated from successive references' "
        'velocities)',
        range=(1, 3),
    )
    ltv_max_iter: int = qp.max_iter()
    period: float = 1.0 / 120.0  # s, control period (the discretisation)
    valve_tau: float = VALVE_TAU_S  # s; the lag used when no valve model is given

    def __post_init__(self) -> None:
        validate_fields(self)
        check_pair('ltv_q_theta', self.ltv_q_theta)


class PeriodModel:
    """The discrete model over one control period and its Jacobians, for a batch of nodes.

    With a valve regulator that integrates (`ValveParams.integral_gain` > 0) the state has the
    two integrals too, x = (θ, θ̇, p, I) (`nx` 8): over each piece of the period with one input
    v the chamber relaxes towards v + I and then the integral takes the valve model's Euler
    step, I ← I + (k_i·(v − p) − λ·I)·h; below the regulated minimum the valve vents and I = 0.
    The flow direction and the on/off of each piece are those of the linearisation point."""

    def __init__(
        self, dynamics: LegDynamics, valve: ValveParams, period: float, substeps: int = 2
    ) -> None:
        self.dyn = dynamics
        self.valve = valve
        self.T = period
        self.n = substeps
        self.D, self.f = valve.delay_steps(period)
        self.tau_fill = np.broadcast_to(np.asarray(valve.tau_fill, float), (NU,)).copy()
        self.tau_vent = np.broadcast_to(np.asarray(valve.tau_vent, float), (NU,)).copy()
        self.ki = np.broadcast_to(np.asarray(valve.integral_gain, float), (NU,)).copy()
        self.leak = np.broadcast_to(np.asarray(valve.integral_leak, float), (NU,)).copy()
        self.integrates = bool(np.any(self.ki > 0))
        self.nx = NX + NU if self.integrates else NX
        # sample instants: each sub-step's midpoint, then the period's end
        h = period / substeps
        self.h = h
        self.s = np.append((np.arange(substeps) + 0.5) * h, period)

    def chamber(self, p0: np.ndarray, v1: np.ndarray, v2: np.ndarray):
        """Pressure at the sample instants as α p0 + β1 v1 + β2 v2: (α, β1, β2), each
        (n_samples, ..., 2). Over [0, fT] the chamber sees v1, then v2; the time constant of
        each part is the fill or the vent one by the direction at its start."""
        s = self.s.reshape((-1,) + (1,) * p0.ndim)
        fT = self.f * self.T
        if fT > 0:
            tau1 = np.where(v1 > p0, self.tau_fill, self.tau_vent)
            e1 = np.exp(-np.minimum(s, fT) / tau1)
            af = np.exp(-fT / tau1)
            pf = af * p0 + (1 - af) * v1
        else:
            e1 = np.ones(s.shape[:1] + p0.shape)
            af = np.ones_like(p0)
            pf = p0
        tau2 = np.where(v2 > pf, self.tau_fill, self.tau_vent)
        e2 = np.exp(-np.maximum(s - fT, 0.0) / tau2)
        alpha = np.where(s <= fT, e1, e2 * af)
        beta1 = np.where(s <= fT, 1 - e1, e2 * (1 - af)) if fT > 0 else np.zeros_like(alpha)
        beta2 = np.where(s <= fT, 0.0, 1 - e2)
        return alpha, beta1, beta2

    def regulated_chamber(self, p0, i0, v1, v2):
        """With the integrals: the pressure at the sample instants and the integral at the
        period's end, each linear in (p0, I0, v1, v2): (P, I_end), P (4, n_samples, N, 2) and
        I_end (4, N, 2) the coefficients of p0, I0, v1 and v2 in that order."""
        fT, h2 = self.f * self.T, (1.0 - self.f) * self.T
        on1 = (v1 >= MIN_REGULATED_KPA).astype(float)
        on2 = (v2 >= MIN_REGULATED_KPA).astype(float)
        zero, one = np.zeros_like(p0), np.ones_like(p0)
        s = self.s.reshape((-1,) + (1,) * p0.ndim)
        if fT > 0:
            tau1 = np.where(v1 + on1 * i0 > p0, self.tau_fill, self.tau_vent)
            c_s = 1.0 - np.exp(-np.minimum(s, fT) / tau1)
            first = np.stack([1.0 - c_s, c_s * on1, c_s, np.zeros_like(c_s)])
            cf = 1.0 - np.exp(-fT / tau1)
            pf_c = np.stack([1.0 - cf, cf * on1, cf, zero])
            g = self.ki * fT
            if_c = on1 * np.stack(
                [-g * (1.0 - cf), 1.0 - self.leak * fT - g * cf, g * (1.0 - cf), zero]
            )
        else:
            first = np.zeros((4,) + s.shape[:1] + p0.shape)
            pf_c = np.stack([one, zero, zero, zero])
            if_c = np.stack([zero, one, zero, zero])
        pf = pf_c[0] * p0 + pf_c[1] * i0 + pf_c[2] * v1
        i_f = if_c[0] * p0 + if_c[1] * i0 + if_c[2] * v1
        tau2 = np.where(v2 + on2 * i_f > pf, self.tau_fill, self.tau_vent)
        c = 1.0 - np.exp(-np.maximum(s - fT, 0.0) / tau2)
        v2_c = np.stack([zero, zero, zero, one])
        second = (1.0 - c) * pf_c[:, None] + c * (on2 * if_c + v2_c)[:, None]
        P = np.where(s <= fT, first, second)
        ce = 1.0 - np.exp(-h2 / tau2)
        g2 = self.ki * h2
        p_end = (1.0 - ce) * pf_c + ce * (on2 * if_c + v2_c)
        I_end = on2 * ((1.0 - self.leak * h2) * if_c - g2 * p_end + g2 * v2_c)
        return P, I_end

    def step(self, x: np.ndarray, v1: np.ndarray, v2: np.ndarray, jacobians: bool = True):
        """x (N, nx), chamber inputs v1, v2 (N, 2) → x⁺ (N, nx) and, with jacobians, ∂x⁺/∂x
        (N, nx, nx), ∂x⁺/∂v1 and ∂x⁺/∂v2 (N, nx, 2)."""
        q, w, p0 = x[:, 0:2], x[:, 2:4], x[:, 4:6]
        if self.integrates:
            i0 = x[:, 6:8]
            P, I_end = self.regulated_chamber(p0, i0, v1, v2)
            # (coefficients, the inputs they multiply, their Jacobian columns)
            terms = [(P[0], p0, 4), (P[1], i0, 6), (P[2], v1, 8), (P[3], v2, 10)]
        else:
            alpha, beta1, beta2 = self.chamber(p0, v1, v2)
            terms = [(alpha, p0, 4), (beta1, v1, 6), (beta2, v2, 8)]
        nx = self.nx
        ncol = nx + 2 * NU  # the inputs: (θ0, θ̇0, p0[, I0], v1, v2)
        h = self.h
        N = x.shape[0]
        if jacobians:
            Zq = np.zeros((N, 2, ncol))
            Zq[:, 0, 0] = Zq[:, 1, 1] = 1.0
            Zw = np.zeros((N, 2, ncol))
            Zw[:, 0, 2] = Zw[:, 1, 3] = 1.0
            Zp = np.zeros((N, 2, ncol))
        for j in range(self.n):
            pj = terms[0][0][j] * terms[0][1]
            for coef, value, _ in terms[1:]:
                pj = pj + coef[j] * value
            d = self.dyn.derivatives(q, w, pj)
            w = w + h * d.acc
            q = q + h * w
            if jacobians:
                for c in range(NU):
                    for coef, _, col in terms:
                        Zp[:, c, col + c] = coef[j][:, c]
                Zw = Zw + h * (d.d_q @ Zq + d.d_qd @ Zw + d.d_p @ Zp)
                Zq = Zq + h * Zw
        pT = terms[0][0][-1] * terms[0][1]
        for coef, value, _ in terms[1:]:
            pT = pT + coef[-1] * value
        parts = [q, w, pT]
        if self.integrates:
            parts.append(I_end[0] * p0 + I_end[1] * i0 + I_end[2] * v1 + I_end[3] * v2)
        xn = np.concatenate(parts, axis=1)
        if not jacobians:
            return xn, None, None, None
        Z = np.zeros((N, nx, ncol))
        Z[:, 0:2] = Zq
        Z[:, 2:4] = Zw
        for c in range(NU):
            for coef, _, col in terms:
                Z[:, 4 + c, col + c] = coef[-1][:, c]
            if self.integrates:
                for k, col in enumerate((4, 6, 8, 10)):
                    Z[:, 6 + c, col + c] = I_end[k][:, c]
        return xn, Z[:, :, :nx], Z[:, :, nx : nx + NU], Z[:, :, nx + NU :]


class LTVMPC:
    """Receding-horizon pressure commands on the exact actuation model (see the module).

    A QP the solver cannot solve gives the static pressures of the reference moved towards them
    within the rate limit, clipped to [0, p_max]; `info['qp_failed']` reports it and `failures`
    counts it."""

    def __init__(
        self,
        dynamics: LegDynamics,
        cfg: LTVMPCConfig | None = None,
        valve: ValveParams | None = None,
    ) -> None:
        cfg = cfg if cfg is not None else LTVMPCConfig()
        self.cfg = cfg
        self.dyn = dynamics
        self.valve = valve if valve is not None else ValveParams.lag(cfg.valve_tau)
        self.model = PeriodModel(dynamics, self.valve, cfg.period, cfg.ltv_substeps)
        self.nx = self.model.nx  # 8 with the valves' integrals in the state
        self.D, self.f = self.model.D, self.model.f
        self.H = self.valve.history_steps(cfg.period)  # commands in flight
        b, nb = cfg.ltv_block, cfg.ltv_blocks
        self.Nc = nb * b  # future commands decided
        self.Np = self.Nc + self.D  # predicted periods: the dead time, then the decisions
        self.nv = NU * nb
        # first-order hold: command j = w_prev[j]·U_{i−1} + w_cur[j]·U_i, i = j // b
        j = np.arange(self.Nc)
        self.blk = j // b
        self.w_cur = (j % b + 1) / b
        self.w_prev = 1.0 - self.w_cur
        self.failures = 0
        self._build_constraints()
        self._W1, self._W2 = self._input_maps()
        weights = [*cfg.ltv_q_theta, cfg.ltv_q_vel, cfg.ltv_q_vel] + [0.0] * (self.nx - 4)
        self._wx = np.tile(np.array(weights), self.Np)
        self.reset()
        self._warm_up()

    # ----- set-up -------------------------------------------------------------------------
    def _build_constraints(self) -> None:
        import scipy.sparse as sp

        n = self.nv
        eye = sp.eye(n, format='csc')
        Dm = sp.eye(n, format='lil')
        for i in range(1, self.cfg.ltv_blocks):
            Dm[NU * i, NU * (i - 1)] = -1
            Dm[NU * i + 1, NU * (i - 1) + 1] = -1
        self.C = sp.vstack([eye, Dm.tocsc()], format='csc')
        self.Dd = Dm.toarray()
        r, c = np.triu_indices(n)
        order = np.lexsort((r, c))  # CSC order: by column, then row
        self._tri = (r[order], c[order])
        self._indptr = np.concatenate([[0], np.cumsum(np.bincount(self._tri[1], minlength=n))])

    def _warm_up(self) -> None:
        """One cycle at start-up, then forgotten: the lazy imports of its first cycle (the valve
        model's scipy.signal, 1.4 s here) happen before the loop, not in it."""
        q = np.array([1.4, 0.8])  # any pose of the workspace
        ref = Reference(q, np.zeros(NU))
        self.step(Estimate(q, np.zeros(NU), 0.0), ref, self.cfg.period, HARD_MAX_KPA)
        self.failures = 0
        self.reset()

    def reset(self, p_valve: np.ndarray | None = None) -> None:
        self.p_valve = np.zeros(NU) if p_valve is None else np.asarray(p_valve, float).copy()
        self.u_last = self.p_valve.copy()
        # commands in flight (oldest first); settled: they were p_valve
        self.history = np.tile(self.p_valve, (self.H, 1))
        self._follow_hist: np.ndarray | ValveMemory | None = None
        # the observer before the last cycle's command (`sent`)
        self._before: tuple[np.ndarray, np.ndarray, np.ndarray | ValveMemory | None] | None = None
        self._sd = np.zeros(NU)  # sigma-delta residual (kPa)
        # the last distinct reference velocity: (stamp, θ̇*, acceleration, jerk)
        self._ref_prev: tuple[float, np.ndarray, np.ndarray, np.ndarray] | None = None
        self.X: np.ndarray | None = None  # predicted trajectory (Np + 1, nx)
        self.cmds: np.ndarray | None = None  # planned commands (Nc, 2)
        self.U: np.ndarray | None = None
        self._solver: osqp.OSQP | None = None
        self.last_status = 'none'
        self.last_iters = 0

    # ----- the pieces of one cycle ----------------------------------------------------------
    def commands(self, U: np.ndarray) -> np.ndarray:
        """Per-period commands (Nc, 2) of block values U (blocks, 2) from the last command."""
        Uf = np.vstack([self.u_last[None, :], U])
        return self.w_prev[:, None] * Uf[self.blk] + self.w_cur[:, None] * Uf[self.blk + 1]

    def chamber_inputs(self, cmds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(v1, v2) (Np, 2): the commands the chamber sees in each predicted period."""
        full = np.vstack([self.history, cmds]) if self.H else cmds
        # command index j (from −H) sits at full[j + H]
        k = np.arange(self.Np)
        i2 = np.minimum(k - self.D + self.H, len(full) - 1)
        v2 = full[i2]
        v1 = full[np.maximum(i2 - 1, 0)] if self.f > 0 else v2
        return v1, v2

    def _input_maps(self) -> tuple[np.ndarray, np.ndarray]:
        """How the chamber inputs of each predicted period depend on the decisions: (W1, W2),
        each (Np, blocks + 1); column 0 is the last command's weight, column 1 + i that of U_i.
        Rows of periods whose input is a command already sent are zero."""
        nb = self.cfg.ltv_blocks
        W2 = np.zeros((self.Np, nb + 1))
        W1 = np.zeros((self.Np, nb + 1))
        for k in range(self.Np):
            for W, j in ((W2, k - self.D), (W1, k - self.D - 1)):
                if j < 0 or (W is W1 and self.f == 0):
                    continue
                W[k, self.blk[j]] += self.w_prev[j]
                W[k, self.blk[j] + 1] += self.w_cur[j]
        return W1, W2

    def linearise(self, x0: np.ndarray):
        """Nodes and the condensed prediction x_k = x̄_k + Γ_k U + λ_k (k = 1..Np).

        Returns (Xbar (Np+1, nx), Gam (Np·nx, nv), lam (Np·nx,))."""
        if self.X is None or self.cmds is None:
            Xbar = np.tile(x0, (self.Np + 1, 1))
            cmds = np.tile(self.u_last, (self.Nc, 1))
        else:
            Xbar = np.vstack([self.X[1:], self.X[-1:]])
            cmds = np.vstack([self.cmds[1:], self.cmds[-1:]])
        Xbar[0] = x0
        v1, v2 = self.chamber_inputs(cmds)
        xn, A, B1, B2 = self.model.step(Xbar[:-1], v1, v2)
        assert A is not None and B1 is not None and B2 is not None
        W1, W2 = self._W1, self._W2
        Np, nv, nx = self.Np, self.nv, self.nx
        # δv = v(U) − v̄ = W[:, 1:] U + W[:, 0] u_last − v̄ on decided periods, 0 before
        dec2 = (np.arange(Np) >= self.D)[:, None]
        c = np.einsum('kxc,kc->kx', B2, np.where(dec2, W2[:, :1] * self.u_last - v2, 0.0))
        Bt = np.einsum('kxc,ki->kxic', B2, W2[:, 1:])
        if self.f > 0:
            dec1 = (np.arange(Np) >= self.D + 1)[:, None]
            c += np.einsum('kxc,kc->kx', B1, np.where(dec1, W1[:, :1] * self.u_last - v1, 0.0))
            Bt += np.einsum('kxc,ki->kxic', B1, W1[:, 1:])
        # [Γ | λ] recursion: [Γ, λ]_{k+1} = A_k [Γ, λ]_k + [B̃_k, c_k + d_k]
        rhs = np.concatenate([Bt.reshape(Np, nx, nv), (c + xn - Xbar[1:])[:, :, None]], axis=2)
        out = np.empty((Np, nx, nv + 1))
        G = rhs[0]
        out[0] = G
        for k in range(1, Np):
            G = A[k] @ G + rhs[k]
            out[k] = G
        return Xbar, out[:, :, :nv].reshape(Np * nx, nv), out[:, :, nv].reshape(-1)

    def step(self, state: Estimate, ref: Reference, dt: float, p_max: float) -> ControlOutput:
        """One command (kPa) for the next period."""
        cfg = self.cfg
        T, b, nb = cfg.period, cfg.ltv_block, cfg.ltv_blocks
        parts = [np.asarray(state.q, float), np.asarray(state.qd, float), self.p_valve]
        if self.nx > NX:  # the regulator's integrals, from the valve observer
            memory = self._follow_hist
            parts.append(memory.integral if isinstance(memory, ValveMemory) else np.zeros(NU))
        x0 = np.concatenate(parts)
        Xbar, Gam, lam = self.linearise(x0)
        xr = self.preview(state.stamp, ref)
        ends = self.D + b * np.arange(1, nb + 1) - 1
        u_star = np.clip(self.dyn.holding_pressures(xr[ends, 0:2]), 0.0, p_max).ravel()
        # QP: ½ Uᵀ P U + qᵀ U
        wG = self._wx[:, None] * Gam
        Hm = Gam.T @ wG + cfg.ltv_r_u * np.eye(self.nv) + cfg.ltv_r_du * (self.Dd.T @ self.Dd)
        e = Xbar[1:].ravel() + lam - xr.ravel()
        d_prev = np.zeros(self.nv)
        d_prev[:NU] = self.u_last
        lin = wG.T @ e - cfg.ltv_r_u * u_star - cfg.ltv_r_du * (self.Dd.T @ d_prev)
        rate = b * cfg.ltv_slew * T
        lo_u, hi_u = np.zeros(self.nv), np.full(self.nv, float(p_max))
        lo_d, hi_d = np.full(self.nv, -rate), np.full(self.nv, rate)
        lo_d[:NU], hi_d[:NU] = self.u_last - rate, self.u_last + rate
        # a last command above a lowered p_max: the box wins (first block)
        lo_d[:NU] = np.minimum(lo_d[:NU], p_max)
        Px = 0.5 * (Hm + Hm.T)[self._tri]
        l_all = np.concatenate([lo_u, lo_d])
        u_all = np.concatenate([hi_u, hi_d])
        if self._solver is None:
            import osqp
            import scipy.sparse as sp

            P = sp.csc_matrix((Px, self._tri[0], self._indptr), shape=(self.nv, self.nv))
            self._solver = osqp.OSQP()
            self._solver.setup(
                P,
                lin,
                self.C,
                l_all,
                u_all,
                verbose=False,
                warm_starting=True,
                polishing=False,
                eps_abs=1e-4,
                eps_rel=1e-4,
                max_iter=cfg.ltv_max_iter,
            )
        else:
            self._solver.update(Px=Px, q=lin, l=l_all, u=u_all)
            if self.U is not None:
                self._solver.warm_start(x=self._shifted_U())
        res, failed = qp.solve(self._solver)
        self.last_status, self.last_iters = str(res.info.status), res.info.iter
        if failed:
            self.failures += 1
            U = np.tile(u_star[:NU], (nb, 1))
        else:
            U = np.asarray(res.x, float).reshape(nb, NU)
        cmds = self.commands(U)
        u = cmds[0]
        # hard limits exactly (the pressure bounds last: they win over the rate limit)
        step_max = cfg.ltv_slew * T
        u = np.clip(u, self.u_last - step_max, self.u_last + step_max)
        u = np.clip(u, 0.0, p_max)
        demand = u.copy()
        sat = (u <= 1e-6) | (u >= p_max - 1e-6)
        # the bounds win over the modulation too (p_max may be under the regulated minimum)
        u = np.clip(self._modulate(u, step_max), 0.0, p_max)
        # the predicted trajectory for the next cycle's linearisation
        Xp = Xbar[1:] + (Gam @ U.ravel() + lam).reshape(self.Np, self.nx)
        self.X = np.vstack([x0[None, :], Xp])
        cmds[0] = u
        self.cmds, self.U = cmds, U
        self._before = (self.p_valve, self.history, self._follow_hist)
        self._advance_valve(u)
        info: dict[str, Any] = {
            'status': self.last_status,
            'iters': res.info.iter,
            'qp_failed': failed,
            'demand': demand,
        }
        return ControlOutput(u, sat, info)

    def preview(self, stamp: float, ref: Reference) -> np.ndarray:
        """The reference states (Np, nx) at the predicted periods: a polynomial of order
        ltv_ref_order in the time ahead, up to the reference's max_preview, held beyond it.
        Acceleration and jerk are differences of the successive references' velocities: a
        reference at rest (θ̇* = 0) has none; a repeated velocity (a sample late under load)
        keeps the last estimates and the next difference spans the gap. A reference that sent
        its own future (`ref.preview`) is that future instead."""
        ahead = self.cfg.period * np.arange(1, self.Np + 1)
        if ref.preview is not None:
            xr = np.zeros((self.Np, self.nx))
            xr[:, 0:2], xr[:, 2:4] = ref.at(ahead), ref.velocity_at(ahead)
            return xr
        q, qd = np.asarray(ref.q, float), np.asarray(ref.qd, float)
        order = self.cfg.ltv_ref_order
        last = self._ref_prev
        acc = jerk = np.zeros(NU)
        if order >= 2 and np.any(qd != 0.0):
            if last is not None and np.array_equal(qd, last[1]):
                acc, jerk = last[2], last[3]
            elif last is not None and 0.0 < stamp - last[0] <= MAX_DT:
                dt = stamp - last[0]
                acc = (qd - last[1]) / dt
                if order >= 3:
                    jerk = (acc - last[2]) / dt
        if last is None or not np.array_equal(qd, last[1]) or not np.any(qd != 0.0):
            self._ref_prev = (stamp, qd, acc, jerk)
        a = np.minimum(ahead, ref.max_preview)[:, None]
        moving = (ahead < ref.max_preview)[:, None]
        xr = np.zeros((self.Np, self.nx))
        xr[:, 0:2] = q + a * (qd + a * (acc / 2 + a * jerk / 6))
        xr[:, 2:4] = np.where(moving, qd + a * (acc + a * jerk / 2), 0.0)
        return xr

    def _shifted_U(self) -> np.ndarray:
        assert self.cmds is not None and self.U is not None
        b = self.cfg.ltv_block
        idx = np.minimum(np.arange(1, self.cfg.ltv_blocks + 1) * b, self.Nc - 1)
        return self.cmds[idx].ravel()

    def _modulate(self, u: np.ndarray, step_max: float) -> np.ndarray:
        """Commands below the lowest regulated pressure vent at the valve: the sigma-delta of
        `lowband` sends 0 or it instead, so the chamber's lag averages them to what the QP
        asked for."""
        if self.cfg.ltv_min_regulated <= 0:
            return u
        out, self._sd = sigma_delta(u, self._sd, self.cfg.ltv_min_regulated)
        return np.clip(out, self.u_last - step_max, self.u_last + step_max)

    def sent(self, u: np.ndarray) -> None:
        """Another controller's command `u` (kPa) went to the valves this period instead of this
        cycle's answer (an expert labelling a learner's states, equimus_learning.imitate): the
        valve observer and the next ramp start from it."""
        if self._before is None:
            raise RuntimeError('LTVMPC.sent before a step')
        self.p_valve, self.history, self._follow_hist = self._before
        u = np.asarray(u, float).copy()
        if self.cmds is not None:
            self.cmds[0] = u
        self._advance_valve(u)

    def applied(self, u: np.ndarray) -> np.ndarray:
        """The pressure the valves are driven to for command u: below the lowest regulated
        pressure they vent."""
        m = self.cfg.ltv_min_regulated
        return np.where(u < m, 0.0, u) if m > 0 else u

    def _advance_valve(self, u: np.ndarray) -> None:
        """The open-loop observer: the chamber pressure one period on, and the pressures in
        flight (the description's valve model, the same solution the simulator uses)."""
        self.u_last = u.copy()
        a = self.applied(u)
        p, self._follow_hist = follow(
            self.valve, a[None], self.p_valve, self.cfg.period, self._follow_hist
        )
        self.p_valve = p[0]
        if self.H:
            self.history = np.vstack([self.history[1:], a[None, :]])
