"""LegModel: a thin handle around a built MjModel that speaks in the paper's quantities.

Joint angles are the paper's θ (hinge qpos with ref = build angle, so no offset); forces are the
actuator tensions F = S·P (N, positive extends the actuator, as pressure does on the rig);
pressures are kPa. Works for both variants and any number of joints/actuators in the
description.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import mujoco
import numpy as np

from equimus_description.leg import LegDescription, load_leg

from .mjcf_builder import build_model, point_names, seg_names

ArrayLike = Sequence[float] | np.ndarray | Mapping[str, float]


class LegModel:
    """Indices and conversions for one compiled model (one variant of one description)."""

    def __init__(
        self,
        leg: LegDescription | None = None,
        variant: str = 'equimus',
        model: mujoco.MjModel | None = None,
        **build_kw,
    ):
        self.leg = leg if leg is not None else load_leg()
        self.variant = variant
        self.model = model if model is not None else build_model(self.leg, variant, **build_kw)
        m = self.model
        # Valves inside MuJoCo (build_mjcf's valve_tau): ctrl and act are pressures in kPa.
        self.valve_tau: float | None = build_kw.get('valve_tau')
        self.joint_names = list(self.leg.joints)
        self.actuator_names = list(self.leg.actuators)
        jid = [m.joint(n).id for n in self.joint_names]
        self.qpos_idx = np.array([m.jnt_qposadr[j] for j in jid], dtype=int)
        self.qvel_idx = np.array([m.jnt_dofadr[j] for j in jid], dtype=int)
        self.areas = np.array([a.area for a in self.leg.actuators.values()])
        self.pressure_max_kpa = np.array([a.pressure_max_kpa for a in self.leg.actuators.values()])
        self._axis = (
            self.leg.joints[self.joint_names[0]].axis
            if self.joint_names
            else np.array([-1.0, 0, 0])
        )
        # ctrl indices: one motor per actuator ('pure') or one per segment ('equimus').
        if variant == 'equimus':
            self.ctrl_idx = np.array(
                [[m.actuator(s).id for s in seg_names(a)] for a in self.actuator_names]
            )
            self._seg_q = np.array(
                [[m.jnt_qposadr[m.joint(s).id] for s in seg_names(a)] for a in self.actuator_names]
            )
            self._swing_q = np.array(
                [m.jnt_qposadr[m.joint(f'{a}_swing').id] for a in self.actuator_names]
            )
            self._p_body = np.array(
                [[m.body(p).id for p in point_names(a)] for a in self.actuator_names]
            )
            d = mujoco.MjData(m)
            mujoco.mj_kinematics(m, d)
            self._build_len = np.array(
                [np.linalg.norm(d.xpos[p[2]] - d.xpos[p[0]]) for p in self._p_body]
            )
            self._build_dir = np.array(
                [
                    (d.xpos[p[2]] - d.xpos[p[0]]) / L
                    for p, L in zip(self._p_body, self._build_len, strict=True)
                ]
            )
        else:
            self.ctrl_idx = np.array([[m.actuator(a).id] for a in self.actuator_names])
            self._tendon = np.array([m.tendon(a).id for a in self.actuator_names])
        self._site_base = np.array([m.site(f'{a}_base').id for a in self.actuator_names])
        self._site_tip = np.array([m.site(f'{a}_tip').id for a in self.actuator_names])
        if variant == 'equimus':
            # the chain placement runs in plain floats (it is in every reset): its constants once
            self._chain_geom = [
                (
                    int(self._site_base[i]),
                    int(self._site_tip[i]),
                    int(m.body_parentid[self._p_body[i, 0]]),
                    tuple(self._build_dir[i].tolist()),
                    float(self._build_len[i]),
                    int(self._swing_q[i]),
                    self._seg_q[i].tolist(),
                )
                for i in range(len(self.actuator_names))
            ]
            self._axis_t = tuple(np.asarray(self._axis, float).tolist())
            chain = np.concatenate([self._swing_q, self._seg_q.ravel()])
            self._chain_dofs = (
                chain,
                np.array([m.jnt_dofadr[np.where(m.jnt_qposadr == a)[0][0]] for a in chain]),
            )

    # ----- inputs -----
    def _vector(self, values: ArrayLike, names, what) -> np.ndarray:
        if isinstance(values, Mapping):
            unknown = set(values) - set(names)
            if unknown:
                raise KeyError(f'{what}: unknown names {sorted(unknown)} (have {names})')
            return np.array([float(values.get(n, 0.0)) for n in names])
        v = np.asarray(values, dtype=float).reshape(-1)
        if v.size != len(names):
            raise ValueError(f'{what}: expected {len(names)} values ({names}), got {v.size}')
        return v

    def forces_from_pressures(self, p_kpa: ArrayLike) -> np.ndarray:
        """F = S·P in N from pressures in kPa."""
        return self.areas * 1e3 * self._vector(p_kpa, self.actuator_names, 'pressures')

    def set_forces(self, data: mujoco.MjData, forces: ArrayLike) -> np.ndarray:
        """Write actuator tensions F (N, ≥ 0 extends) to ctrl.

        Every segment motor of an actuator gets F."""
        F = self._vector(forces, self.actuator_names, 'forces')
        if not np.all(np.isfinite(F)):
            raise ValueError(f'forces must be finite, got {F}')
        if self.valve_tau is None:
            data.ctrl[self.ctrl_idx] = F[:, None]
        else:
            # The valves' setpoint and state, settled: the pressure acts at once.
            p = F / (self.areas * 1e3)
            data.ctrl[self.ctrl_idx] = p[:, None]
            data.act[self.model.actuator_actadr[self.ctrl_idx]] = p[:, None]
        return F

    def set_pressures(self, data: mujoco.MjData, p_kpa: ArrayLike) -> np.ndarray:
        """Apply pressures (kPa) as F = S·P; returns the forces written."""
        return self.set_forces(data, self.forces_from_pressures(p_kpa))

    # ----- outputs -----
    def joint_angles(self, data: mujoco.MjData) -> np.ndarray:
        return data.qpos[self.qpos_idx].copy()

    def joint_velocities(self, data: mujoco.MjData) -> np.ndarray:
        return data.qvel[self.qvel_idx].copy()

    def actuator_lengths(self, data: mujoco.MjData) -> np.ndarray:
        """The model's own actuator lengths.

        Slide chain length ('equimus') or tendon length ('pure')."""
        if self.variant == 'equimus':
            return self._build_len + data.qpos[self._seg_q].sum(axis=1)
        return data.ten_length[self._tendon].copy()

    def anchor_distances(self, data: mujoco.MjData) -> np.ndarray:
        """Distance between the skeleton's anchor sites (needs kinematics computed in data)."""
        return np.linalg.norm(
            data.site_xpos[self._site_tip] - data.site_xpos[self._site_base], axis=1
        )

    def loop_residuals(self, data: mujoco.MjData) -> np.ndarray:
        """Per actuator: max(|chain end − tip anchor|, |seg1 − seg2|) in m; zeros for 'pure'."""
        if self.variant != 'equimus':
            return np.zeros(len(self.actuator_names))
        gap = np.linalg.norm(data.xpos[self._p_body[:, 2]] - data.site_xpos[self._site_tip], axis=1)
        seg = np.abs(data.qpos[self._seg_q[:, 0]] - data.qpos[self._seg_q[:, 1]])
        return np.maximum(gap, seg)

    def body_pose(self, data: mujoco.MjData, name: str):
        """(world position (3,), quaternion wxyz (4,)) of a skeleton body frame."""
        b = self.model.body(name).id
        return data.xpos[b].copy(), data.xquat[b].copy()

    # ----- states -----
    def reset(
        self, data: mujoco.MjData, q: ArrayLike | None = None, qd: ArrayLike | None = None
    ) -> None:
        """Reset to joint angles q (default: build pose) with every loop closure satisfied exactly.

        The actuator chains are placed geometrically: swing hinge along the anchor line, both
        slides at half the extension. With qd, the chain velocities follow the anchors too.
        """
        m = self.model
        mujoco.mj_resetData(m, data)
        if q is not None:
            data.qpos[self.qpos_idx] = self._vector(q, self.joint_names, 'q')
        if self.variant == 'equimus':
            self._place_chains(data)
        if qd is not None:
            data.qvel[self.qvel_idx] = self._vector(qd, self.joint_names, 'qd')
            if self.variant == 'equimus':
                self._chain_velocities(data)
        mujoco.mj_forward(m, data)

    def _place_chains(self, data):
        m = self.model
        mujoco.mj_kinematics(m, data)
        a0, a1, a2 = self._axis_t
        site, xmat, qpos = data.site_xpos, data.xmat, data.qpos
        # Plain floats: on 3-vectors numpy's per-call cost was most of the time (reset with
        # velocities, four placements: 247 -> 47 µs).
        for base, tip, parent, (b0, b1, b2), build_len, swing, segs in self._chain_geom:
            # The chain's hinge frame moves with its parent body; express the anchor line there.
            pa, pb, R = site[base].tolist(), site[tip].tolist(), xmat[parent].tolist()
            d0, d1, d2 = pb[0] - pa[0], pb[1] - pa[1], pb[2] - pa[2]
            r0 = R[0] * d0 + R[3] * d1 + R[6] * d2  # Rᵀ·d, R row-major
            r1 = R[1] * d0 + R[4] * d1 + R[7] * d2
            r2 = R[2] * d0 + R[5] * d1 + R[8] * d2
            L = math.sqrt(r0 * r0 + r1 * r1 + r2 * r2)
            e0, e1, e2 = r0 / L, r1 / L, r2 / L
            sin = a0 * (b1 * e2 - b2 * e1) + a1 * (b2 * e0 - b0 * e2) + a2 * (b0 * e1 - b1 * e0)
            qpos[swing] = math.atan2(sin, b0 * e0 + b1 * e1 + b2 * e2)
            qpos[segs] = (L - build_len) / 2.0
        mujoco.mj_kinematics(m, data)

    def _chain_velocities(self, data):
        """Chain velocities consistent with the joint velocities.

        Central difference of the chain placement."""
        h = 1e-6
        q = data.qpos[self.qpos_idx].copy()
        qd = data.qvel[self.qvel_idx].copy()
        chain, dofs = self._chain_dofs
        out = []
        for sgn in (1.0, -1.0):
            data.qpos[self.qpos_idx] = q + sgn * h * qd
            self._place_chains(data)
            out.append(data.qpos[chain].copy())
        data.qvel[dofs] = (out[0] - out[1]) / (2 * h)
        data.qpos[self.qpos_idx] = q
        self._place_chains(data)

    def settle(
        self,
        data: mujoco.MjData,
        max_time: float = 60.0,
        vel_tol: float = 1e-9,
        extra_damping: float = 0.5,
    ) -> float:
        """Step with the current ctrl until at rest; extra hinge damping (removed afterwards) speeds
        it up without moving the equilibrium. Dry friction (frictionloss) is off meanwhile: the
        frictionless equilibrium is the middle of the band friction holds the leg in, and
        MuJoCo's soft friction creeps instead of stopping. Returns the simulated time taken.

        Raises RuntimeError if not at rest within max_time or if the state diverges."""
        m = self.model
        saved = m.dof_damping.copy()
        saved_friction = m.dof_frictionloss.copy()
        m.dof_damping[self.qvel_idx] += extra_damping
        m.dof_frictionloss[:] = 0.0
        try:
            steps = int(max_time / m.opt.timestep)
            for k in range(steps):
                mujoco.mj_step(m, data)
                if k % 50 == 0:
                    if not np.all(np.isfinite(data.qpos)):
                        raise RuntimeError('settle: simulation diverged (NaN state)')
                    if np.max(np.abs(data.qvel)) < vel_tol:
                        data.qvel[:] = 0.0
                        mujoco.mj_forward(m, data)
                        return (k + 1) * m.opt.timestep
        finally:
            m.dof_damping[:] = saved
            m.dof_frictionloss[:] = saved_friction
        raise RuntimeError(
            f'settle: not at rest after {max_time} s (|qvel| = {np.max(np.abs(data.qvel)):.2e})'
        )

    def static_equilibrium(
        self,
        p_kpa: ArrayLike,
        q0: ArrayLike | None = None,
        max_time: float = 60.0,
        vel_tol: float = 1e-9,
        extra_damping: float = 0.5,
    ) -> np.ndarray:
        """Joint angles at rest under constant pressures (kPa).

        Settled from q0 (default: the build pose)."""
        d = mujoco.MjData(self.model)
        self.reset(d, q0)
        self.set_pressures(d, p_kpa)
        self.settle(d, max_time, vel_tol, extra_damping)
        return self.joint_angles(d)
