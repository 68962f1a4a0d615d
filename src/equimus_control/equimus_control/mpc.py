"""Linear MPC on MuJoCo linearisations of the EquiMus leg, with the valve lag in the state.

State x = (θ1, θ2, θ̇1, θ̇2, p_maa, p_baa): joint angles/velocities and the valve (muscle)
pressures in kPa; input u = commanded pressures. The mechanical part is linearised by central
finite differences through the full MuJoCo model (3-2-1 actuators, loop closures) about a static
equilibrium (θ0, θ̇ = 0, p0 = the pressures that hold θ0), one control period long: states are
placed with `LegModel.reset(q, qd)` so every loop closure is satisfied. The valve rows are the
exact discretisation of the description's first-order chamber, p ← a p + (1 − a) u, with a of the
fill or the vent time constant per channel (by the direction from the predicted pressure to the
target's static pressure; one matrix set per direction pair).

Relinearisation: a grid of operating points over the workspace is precomputed at start-up
(~10 ms each) and the node nearest to the measured pose is used, so the control cycle never pays
for finite differences (a cache miss in the loop would blow the 4 ms budget); the affine model
about an equilibrium is exact at the node and its error grows only quadratically with the
distance to it (≤ half the grid spacing).

QP (condensed; decision variables = the 2·N inputs, move-blocked by `block` periods):
  min Σ (θ − θ*)ᵀQ(θ − θ*) + q_v‖θ̇‖² + (u − u*)ᵀR(u − u*) + Δuᵀ R_Δ Δu
  s.t. 0 ≤ u ≤ p_max, |u_k − u_{k−1}| ≤ Δu_max · block   (u_{−1} = the last command)
solved by OSQP, warm-started from the previous (shifted) solution. The valve state is not
measured; it is predicted from the commands sent by the description's valve model
(equimus_description.valve.follow, dead time included: an open-loop observer). The QP itself has
no dead time: the commands still in flight are in the predicted pressure, not in the prediction
matrices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from equimus_description.config import check_pair, param, validate_fields
from equimus_description.statics import StaticParams, holding_pressures
from equimus_description.valve import (
    HARD_MAX_KPA,
    VALVE_TAU_S,
    ValveParams,
    follow,
    lag_coefficient,
)

from . import qp
from .controller import ControlOutput, Estimate, Reference
from .plant import PlantModel

if TYPE_CHECKING:
    import osqp

# mujoco, osqp and scipy.sparse are imported where used: every controller process imports this
# module for MPCConfig (controllers.configs declares every kind's parameters), and a PID
# controller's start need not pay the 0.1-0.3 s each takes to import.

NX, NU = 6, 2


def linearise(
    leg_model: PlantModel,
    q0: np.ndarray,
    p0: np.ndarray,
    period: float,
    eps_q: float = 1e-4,
    eps_p: float = 0.05,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A (4×4), B (4×2), c (4,)) with (θ, θ̇)⁺ ≈ x0 + A(x − x0) + B(p − p0) + c over one period.

    x0 = (q0, 0). c is the drift f(x0, p0) − x0: zero at a true equilibrium, non-zero when p0 had
    to be moved into the valve range (poses the pressures cannot hold).
    """
    import mujoco

    m = leg_model.model
    d = mujoco.MjData(m)
    n = max(1, int(round(period / m.opt.timestep)))

    def roll(q, qd, p):
        leg_model.reset(d, q, qd)
        leg_model.set_pressures(d, p)
        for _ in range(n):
            mujoco.mj_step(m, d)
        return np.concatenate([leg_model.joint_angles(d), leg_model.joint_velocities(d)])

    q0 = np.asarray(q0, float)
    p0 = np.asarray(p0, float)
    x0 = np.concatenate([q0, np.zeros(2)])
    c = roll(q0, np.zeros(2), p0) - x0
    A = np.zeros((4, 4))
    B = np.zeros((4, 2))
    for i in range(4):
        dx = np.zeros(4)
        h = eps_q if i < 2 else eps_q * 10
        dx[i] = h
        xp = roll(q0 + dx[:2], dx[2:], p0)
        xm = roll(q0 - dx[:2], -dx[2:], p0)
        A[:, i] = (xp - xm) / (2 * h)
    for j in range(2):
        dp = np.zeros(2)
        dp[j] = eps_p
        B[:, j] = (roll(q0, np.zeros(2), p0 + dp) - roll(q0, np.zeros(2), p0 - dp)) / (2 * eps_p)
    return A, B, c


@dataclass(frozen=True)
class MPCConfig:
    """Linear MPC settings. All are fixed at start-up: the grid and the condensed QP matrices
    are built from them once."""

    horizon: int = param(15, 'MPC prediction steps (each `block` periods)', range=(1, 200))
    block: int = param(3, 'control periods per MPC step (move blocking)', range=(1, 50))
    q_theta: tuple[float, float] = qp.q_theta()
    q_vel: float = qp.q_vel('joint velocities')
    r_u: float = qp.r_u('target')
    r_du: float = qp.r_du('steps')
    du_max: float = param(
        25.0, 'kPa per control period, rate limit of the command', range=(0.01, HARD_MAX_KPA)
    )
    grid_step: float = param(0.1, 'rad, spacing of the linearisation grid', range=(0.01, 1.0))
    grid_lo: tuple[float, float] = param(
        (1.0, 0.05), 'rad, linearisation grid lower corner', range=(-3.2, 3.2)
    )
    grid_hi: tuple[float, float] = param(
        (2.0, 1.25), 'rad, linearisation grid upper corner', range=(-3.2, 3.2)
    )
    max_iter: int = qp.max_iter()
    period: float = 1.0 / 120.0  # s, control period (the discretisation)
    valve_tau: float = VALVE_TAU_S  # s; the lag used when no valve model is given

    def __post_init__(self) -> None:
        validate_fields(self)
        for name in ('q_theta', 'grid_lo', 'grid_hi'):
            check_pair(name, getattr(self, name))


class LinearisationGrid:
    """Precomputed (θ0, p0, A, B) over a grid of equilibria; nearest-node look-up."""

    def __init__(self, leg_model: PlantModel, params: StaticParams, cfg: MPCConfig) -> None:
        self.cfg = cfg
        ax = [
            np.arange(lo, hi + 1e-9, cfg.grid_step)
            for lo, hi in zip(cfg.grid_lo, cfg.grid_hi, strict=True)
        ]
        self.axes = ax
        self.nodes = {}
        for i, t1 in enumerate(ax[0]):
            for j, t2 in enumerate(ax[1]):
                q0 = np.array([t1, t2])
                # the valve clamps negative pressures: linearise inside the range, keep the drift
                p0 = np.clip(holding_pressures(q0, params), 0.1, HARD_MAX_KPA - 0.1)
                A, B, c = linearise(leg_model, q0, p0, cfg.period)
                self.nodes[(i, j)] = (q0, p0, A, B, c)

    def nearest(self, q):
        i, j = (
            int(
                np.clip(
                    round((q[k] - self.axes[k][0]) / self.cfg.grid_step), 0, len(self.axes[k]) - 1
                )
            )
            for k in range(2)
        )
        return (i, j), self.nodes[(i, j)]


class LinearMPC:
    """Receding-horizon pressure commands from (θ, θ̇) and the reference pose.

    A QP the solver cannot solve (infeasible after p_max was lowered below the last command
    minus the rate limit, or numerically failed) gives the static pressures of the target moved
    towards it within the rate limit, clipped to [0, p_max]; `info['qp_failed']` reports it and
    `failures` counts it."""

    def __init__(
        self,
        leg_model: PlantModel,
        params: StaticParams,
        cfg: MPCConfig | None = None,
        grid: LinearisationGrid | None = None,
        valve: ValveParams | None = None,
    ) -> None:
        """valve: the valve model (the leg description's `valve`); None = the lag of
        cfg.valve_tau."""
        cfg = cfg if cfg is not None else MPCConfig()
        self.cfg, self.params = cfg, params
        self.valve = valve if valve is not None else ValveParams.lag(cfg.valve_tau)
        self.grid = grid if grid is not None else LinearisationGrid(leg_model, params, cfg)
        self.N = cfg.horizon
        # valve coefficient per direction (0 fill, 1 vent) and channel; a lag has one
        self.a_dir = tuple(
            [lag_coefficient(cfg.period, float(t)) for t in np.broadcast_to(taus, (NU,))]
            for taus in (self.valve.tau_fill, self.valve.tau_vent)
        )
        self.a_valve = self.a_dir[0][0]
        self.failures = 0
        self.node_key = None
        self._build_constraints()
        self.Qd = np.tile(np.array([*cfg.q_theta, cfg.q_vel, cfg.q_vel, 0.0, 0.0]), self.N)
        # all condensed matrices up front (per direction pair when filling and venting
        # differ), so no control cycle pays for a node switch
        self._dirs = (
            [(0, 0)] if self.a_dir[0] == self.a_dir[1] else [(0, 0), (0, 1), (1, 0), (1, 1)]
        )
        self._cache = {
            (k, d): self._condensed(n, d) for k, n in self.grid.nodes.items() for d in self._dirs
        }
        self.reset()

    def reset(self, p_valve: np.ndarray | None = None) -> None:
        self.p_valve = np.zeros(2) if p_valve is None else np.asarray(p_valve, float)
        self.u_last = self.p_valve.copy()
        self._history: np.ndarray | None = None  # commands the dead time holds (None: settled)
        self._solver: osqp.OSQP | None = None
        self.node_key = None
        self.last_status = 'none'
        self.last_iters = 0

    def _build_constraints(self):
        import scipy.sparse as sp

        N = self.N
        eye = sp.eye(2 * N, format='csc')
        D = sp.eye(2 * N, format='lil')
        for k in range(1, N):
            D[2 * k, 2 * (k - 1)] = -1
            D[2 * k + 1, 2 * (k - 1) + 1] = -1
        self.C = sp.vstack([eye, D.tocsc()], format='csc')
        self.D = D.toarray()

    def _prediction(self, A4, B4, c4, dirs=(0, 0)):
        """Stacked prediction x_k = Φ x + Γ u + Λ of the 6-state model, steps of `block` periods;
        dirs: per channel, the valve fills (0) or vents (1)."""
        c = self.cfg
        a = np.array([self.a_dir[d][ch] for ch, d in enumerate(dirs)])
        A = np.zeros((NX, NX))
        A[:4, :4] = A4
        A[:4, 4:] = B4
        A[4:, 4:] = a * np.eye(2)
        B = np.zeros((NX, NU))
        B[4:, :] = (1 - a) * np.eye(2)
        cc = np.zeros(NX)
        cc[:4] = c4
        Ab, Bb, cb = np.eye(NX), np.zeros((NX, NU)), np.zeros(NX)
        for _ in range(c.block):
            Ab, Bb, cb = A @ Ab, A @ Bb + B, A @ cb + cc
        N = self.N
        Phi = np.zeros((N * NX, NX))
        Gam = np.zeros((N * NX, N * NU))
        Lam = np.zeros(N * NX)
        lam = np.zeros(NX)
        AkB = [Bb]
        for _ in range(1, N):
            AkB.append(Ab @ AkB[-1])
        Ak = np.eye(NX)
        for k in range(N):
            Ak = Ab @ Ak
            lam = Ab @ lam + cb
            Phi[k * NX : (k + 1) * NX] = Ak
            Lam[k * NX : (k + 1) * NX] = lam
            for j in range(k + 1):
                Gam[k * NX : (k + 1) * NX, j * NU : (j + 1) * NU] = AkB[k - j]
        return Phi, Gam, Lam

    def _condensed(self, node, dirs=(0, 0)):
        """(Φ, Γ, Λ, H) of one grid node and valve directions; computed once and cached."""
        _, _, A4, B4, c4 = node
        Phi, Gam, Lam = self._prediction(A4, B4, c4, dirs)
        c = self.cfg
        R = c.r_u * np.eye(NU * self.N) + c.r_du * (self.D.T @ self.D)
        H = Gam.T @ (self.Qd[:, None] * Gam) + R
        return Phi, Gam, Lam, 0.5 * (H + H.T)

    def _set_node(self, key, node):
        if key not in self._cache:
            self._cache[key] = self._condensed(node, key[1])
        Phi, Gam, Lam, H = self._cache[key]
        self.Phi, self.Gam, self.Lam, self.H = Phi, Gam, Lam, H
        self.node_key, self.node = key, node
        n = H.shape[0]
        if self._solver is None:
            import osqp
            import scipy.sparse as sp

            r, cidx = np.triu_indices(n)
            order = np.lexsort((r, cidx))  # CSC order: by column, then row
            self._tri = (r[order], cidx[order])
            indptr = np.concatenate([[0], np.cumsum(np.bincount(self._tri[1], minlength=n))])
            P = sp.csc_matrix((H[self._tri], self._tri[0], indptr), shape=(n, n))
            self._solver = osqp.OSQP()
            nb = 2 * self.N
            self._solver.setup(
                P,
                np.zeros(nb),
                self.C,
                np.zeros(2 * nb),
                np.ones(2 * nb),
                verbose=False,
                warm_starting=True,
                polishing=False,
                eps_abs=1e-4,
                eps_rel=1e-4,
                max_iter=self.cfg.max_iter,
            )
        else:
            self._solver.update(Px=H[self._tri])

    def step(self, state: Estimate, ref: Reference, dt: float, p_max: float) -> ControlOutput:
        """One command (kPa) for the next period."""
        c = self.cfg
        q, qd = np.asarray(state.q, float), np.asarray(state.qd, float)
        q_ref = np.asarray(ref.q, float)
        key, node = self.grid.nearest(q)
        u_star = np.clip(holding_pressures(q_ref, self.params), 0.0, p_max)
        if len(self._dirs) > 1:
            key = (key, tuple(int(v) for v in (u_star <= self.p_valve)))
        else:
            key = (key, (0, 0))
        if self._solver is None or key != self.node_key:
            self._set_node(key, node)
        solver = self._solver
        assert solver is not None  # _set_node above built it
        q0, p0 = node[0], node[1]
        # deviation coordinates about the node's equilibrium (x0, u0 = p0)
        x0 = np.array([*q0, 0.0, 0.0, *p0])
        x = np.concatenate([q, qd, self.p_valve]) - x0
        x_ref = np.concatenate([q_ref - q0, np.zeros(2), u_star - p0])
        xr = np.tile(x_ref, self.N)
        ur = np.tile(u_star - p0, self.N)
        f = self.Phi @ x + self.Lam - xr
        lin = self.Gam.T @ (self.Qd * f) - c.r_u * ur
        d_prev = np.zeros(2 * self.N)
        d_prev[:2] = self.u_last - p0
        lin -= c.r_du * (self.D.T @ d_prev)
        nb = 2 * self.N
        du = c.du_max * c.block
        lo_u = np.tile(-p0, self.N)
        hi_u = np.tile(p_max - p0, self.N)
        lo_d = np.full(nb, -du)
        hi_d = np.full(nb, du)
        lo_d[:2] = self.u_last - p0 - c.du_max
        hi_d[:2] = self.u_last - p0 + c.du_max
        solver.update(q=lin, l=np.concatenate([lo_u, lo_d]), u=np.concatenate([hi_u, hi_d]))
        res, failed = qp.solve(solver)
        self.last_status, self.last_iters = str(res.info.status), res.info.iter
        if failed:
            self.failures += 1
            u = u_star
        else:
            u = res.x[:2] + p0
        # the solver tolerance may leave tiny violations: enforce the hard limits exactly (the
        # pressure bounds last: they win over the rate limit when both cannot hold)
        u = np.clip(u, self.u_last - c.du_max, self.u_last + c.du_max)
        u = np.clip(u, 0.0, p_max)
        sat = (u <= 1e-6) | (u >= p_max - 1e-6)
        self.u_last = u.copy()
        p, self._history = follow(self.valve, u[None], self.p_valve, c.period, self._history)
        self.p_valve = p[0]
        info: dict[str, Any] = {
            'status': self.last_status,
            'iters': res.info.iter,
            'qp_failed': failed,
        }
        return ControlOutput(u, sat, info)
