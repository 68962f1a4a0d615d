"""Stance phase of the paper's Table III: the leg standing on its foot, pushed, MuJoCo vs analytic.

Our reading of the paper (Sec. IV-C-2b; the slides of seeds/001 for the base energy), since it
gives only the start pose and F' = (10 N, 10 N):
  * the foot is the origin of the reference frame (r^F = r^O − OF): in the analytic model the foot
    stays where it stands, so every point moves as in the swing model minus the foot's motion; the
    foot is a sphere of radius r that rolls without slipping (its centre moves r·Δφ with the
    calf's absolute angle φ; r → 0 is a pin);
  * the base carries the hip and translates in the swing plane without rotating (so θ1 is still
    the thigh angle against the base, and the generalised coordinates stay θ = (θ1, θ2)); its
    mass enters the kinetic and potential energy;
  * start: standing still at θ0 = (π/2, 0) (straight leg, foot under the hip), held by the
    balancing actuator forces F0 = f(θ0) of the stance model, as the swing test starts from
    the rest state under F = f(θ);
  * F' = (10 N, 10 N) is an external force in the paper's planar frame (x forward = world +y,
    y along gravity = world −z) on the base, held for IMPULSE_S (an impulse of 0.1 N·s per axis);
    the actuator forces stay at F0. Standing straight is an unstable equilibrium (the loaded
    knee buckles), so the push starts a fall that flexes the knee; we compare DURATION_S of it.
In MuJoCo (the builder's ground option) the foot is held by a soft frictional contact instead of
a perfect pin: that is the only modelling difference, and the paper names it as the error source.
Nothing here is used by the swing/static rows.

Run: python -m equimus_sim.stance [--duration 1.0] [--plot stance.png]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import mujoco
import numpy as np

from equimus_description.leg import LegDescription, load_leg, world_points_at_build

from .lagrangian import LagrangianLeg, _planar, _Point
from .leg_model import LegModel
from .mjcf_builder import base_slide_names

PAPER_STANCE = {'rmse': (0.01693, 0.03000), 'maxae': (0.04673, 0.08805)}  # Table III (rad)
THETA0 = (np.pi / 2, 0.0)  # standing still, straight leg
IMPULSE_N = (10.0, 10.0)  # F' in the planar frame (x forward, y along gravity)
IMPULSE_S = 0.01  # how long F' acts (s)
DURATION_S = 1.0  # compared trajectory length (s)
VARIANTS = ('equimus', 'pure')


def has_stance(leg: LegDescription) -> bool:
    """Whether the description can stand: it has a foot and a ground section (enabled or not)."""
    return leg.foot is not None and (leg.ground is not None or 'ground' in leg.raw)


def stance_leg(leg: LegDescription | None = None) -> LegDescription:
    """The description with its ground enabled (it must have `foot` and `ground` sections)."""
    leg = leg if leg is not None else load_leg()
    if leg.ground is not None:
        return leg
    if not has_stance(leg):
        raise ValueError(
            f'{leg.source or leg.name}: no `foot` and `ground` sections, so no stance model; '
            'add them as in config/leg.yaml'
        )
    return leg.with_overrides({'ground.enabled': True})


def planar_to_world(f_planar) -> np.ndarray:
    """Planar (x forward, y along gravity) → world (x across the plane, y, z up)."""
    return np.array([0.0, float(f_planar[0]), -float(f_planar[1])])


class StanceLagrangian(LagrangianLeg):
    """The swing model re-rooted at the foot: same θ, base translating, foot rolling in place."""

    def __init__(self, leg: LegDescription | None = None):
        leg = stance_leg(leg)
        super().__init__(leg)
        foot = leg.foot
        assert foot is not None
        bi = {n: i for i, n in enumerate(self.body_names)}
        origins = world_points_at_build(leg)
        self.foot = _Point(bi[foot.body], _planar(origins[foot.body] + foot.pos))
        self.radius = foot.radius
        root = leg.root
        self.base_mass = leg.bodies[root].mass
        self.base_com = _Point(bi[root], _planar(origins[root] + leg.bodies[root].com))
        # d(absolute foot-body angle)/dθ: the rolling term's Jacobian
        self._w_foot = np.zeros(self.n)
        for c in self.path[self.foot.body]:
            self._w_foot[self.joint_of[c]] += self.sign[c]

    def _swing_point(self, pt: _Point, frames, qd):
        return LagrangianLeg._point(self, pt, frames, qd)

    def _point(self, pt: _Point, frames, qd):
        r, J, h, v = self._swing_point(pt, frames, qd)
        rf, Jf, hf, vf = self._swing_point(self.foot, frames, qd)
        th_foot = frames[0][self.foot.body]
        roll = np.array([self.radius, 0.0])
        return (
            r - rf + roll * th_foot,
            J - Jf + np.outer(roll, self._w_foot),
            h - hf,
            v - vf + roll * (self._w_foot @ np.asarray(qd, float)),
        )

    def terms(self, q, qd, forces):
        M, b, Q = super().terms(q, qd, forces)
        _, J, h, _ = self._point(self.base_com, self._frames(np.asarray(q, float), qd), qd)
        m = self.base_mass
        return M + m * J.T @ J, b + m * J.T @ h, Q + m * J.T @ np.array([0.0, self.g])

    def base_jacobian(self, q) -> np.ndarray:
        """∂(base position, planar)/∂θ: maps a force on the base to generalised forces."""
        z = np.zeros(self.n)
        return self._point(self.base_com, self._frames(np.asarray(q, float), z), z)[1]

    def foot_roll(self, q) -> float:
        """Horizontal travel of the foot sphere's centre from rolling (from the build pose)."""
        th = self._frames(np.asarray(q, float), np.zeros(self.n))[0]
        return float(self.radius * th[self.foot.body])

    def simulate_push(
        self,
        q0,
        forces,
        push_n,
        push_s: float,
        t_eval,
        rtol: float = 1e-10,
        atol: float = 1e-12,
    ) -> np.ndarray:
        """States (len(t_eval), 2n) from rest at q0 under constant actuator forces, with an
        external planar force push_n on the base during [0, push_s): two integrations, so the
        push's end is a step boundary. Raises RuntimeError if the integrator fails."""
        from scipy.integrate import solve_ivp

        n = self.n
        F = np.asarray(forces, float)
        t_eval = np.asarray(t_eval, float)
        y = np.concatenate([np.asarray(q0, float), np.zeros(n)])
        out = np.empty((len(t_eval), 2 * n))
        t_end = float(t_eval[-1])
        t_push = min(float(t_eval[0]) + push_s, t_end)
        segments = (
            (np.asarray(push_n, float), float(t_eval[0]), t_push),
            (np.zeros(2), t_push, t_end),
        )
        for f, ta, tb in segments:
            if tb <= ta:
                continue
            sel = (t_eval >= ta) & ((t_eval < tb) | (tb == t_end))

            def rhs(_t, y, f=f):
                q, qd = y[:n], y[n:]
                M, b, Q = self.terms(q, qd, F)
                Q = Q + self.base_jacobian(q).T @ f
                return np.concatenate([qd, np.linalg.solve(M, Q - b)])

            times = t_eval[sel]
            k = len(times)
            if not k or times[-1] < tb:
                times = np.append(times, tb)
            sol = solve_ivp(rhs, (ta, tb), y, method='DOP853', t_eval=times, rtol=rtol, atol=atol)
            if sol.status != 0 or sol.y.shape[1] != len(times):
                raise RuntimeError(f'analytic stance model failed: {sol.message}')
            out[sel] = sol.y[:, :k].T
            y = sol.y[:, -1]
        return out

    def ground_reaction(self, q, qd, forces, push) -> np.ndarray:
        """Planar force the ground exerts on the foot (N; y along gravity, so the normal force
        is −y): total mass × acceleration − gravity − push."""
        q = np.asarray(q, float)
        qd = np.asarray(qd, float)
        M, b, Q = self.terms(q, qd, forces)
        qdd = np.linalg.solve(M, Q + self.base_jacobian(q).T @ push - b)
        fr = self._frames(q, qd)
        gvec = np.array([0.0, self.g])
        total = np.zeros(2)
        pts = [(self.base_mass, self.base_com)]
        pts += [
            (self.mass[i], self.com[i]) for i in range(len(self.body_names)) if self.parent[i] >= 0
        ]
        for m, pt in pts:
            _, J, h, _ = self._point(pt, fr, qd)
            total += m * (J @ qdd + h - gvec)
        for a, A, B in self.acts:  # a uniform rod: its centre of mass is the anchors' midpoint
            _, JA, hA, _ = self._point(A, fr, qd)
            _, JB, hB, _ = self._point(B, fr, qd)
            total += a.m * (0.5 * (JA + JB) @ qdd + 0.5 * (hA + hB) - gvec)
        return total - push


@dataclass
class StanceSetup:
    """What the stance run does, for the report."""

    theta0: tuple = THETA0
    impulse_n: tuple = IMPULSE_N
    impulse_s: float = IMPULSE_S
    duration: float = DURATION_S
    # The analytic model has no joint limits, and θ0 sits on the knee's lower limit (θ2 = 0):
    # the comparison builds the hinges without limits unless this is True.
    joint_limits: bool = False


def _push_fn(setup: StanceSetup) -> Callable[[float], np.ndarray]:
    f = np.asarray(setup.impulse_n, float)
    zero = np.zeros(2)
    return lambda t: f if t < setup.impulse_s else zero


def mujoco_stance(lm: LegModel, setup: StanceSetup, forces, lag: StanceLagrangian) -> dict:
    """One MuJoCo stance run: θ(t) and the foot's penetration and slip (beyond rolling)."""
    m = lm.model
    d = mujoco.MjData(m)
    leg = lm.leg
    assert leg.ground is not None and leg.foot is not None
    q0 = np.asarray(setup.theta0, float)
    lm.reset(d, q0)
    foot = m.geom('foot').id
    v_slide = m.joint(base_slide_names()[1]).id
    # stand the foot on the ground (touching, no penetration); the chains move with the base
    d.qpos[m.jnt_qposadr[v_slide]] -= d.geom_xpos[foot][2] - leg.foot.radius - leg.ground.height
    mujoco.mj_forward(m, d)
    lm.set_forces(d, forces)
    base = m.body(leg.root).id
    f_world = planar_to_world(setup.impulse_n)
    dt = m.opt.timestep
    n_steps = int(round(setup.duration / dt))
    theta = np.empty((n_steps + 1, len(lm.joint_names)))
    centre = np.empty((n_steps + 1, 3))
    theta[0], centre[0] = lm.joint_angles(d), d.geom_xpos[foot]
    for k in range(n_steps):
        d.xfrc_applied[base, :3] = f_world if k * dt < setup.impulse_s - 1e-12 else 0.0
        mujoco.mj_step(m, d)
        theta[k + 1], centre[k + 1] = lm.joint_angles(d), d.geom_xpos[foot]
    if not np.all(np.isfinite(theta)):
        raise RuntimeError('MuJoCo stance run diverged')
    roll = np.array([lag.foot_roll(q) for q in theta])
    horiz = centre[:, 1] - centre[0, 1]  # planar x = world y
    return {
        'theta': theta,
        'penetration_m': float(np.max(leg.ground.height + leg.foot.radius - centre[:, 2])),
        'slip_m': float(np.max(np.abs(horiz - (roll - roll[0])))),
    }


def _metrics(err: np.ndarray) -> dict:
    return {
        'rmse': np.sqrt(np.mean(err**2, axis=0)).tolist(),
        'maxae': np.max(np.abs(err), axis=0).tolist(),
        'n': 1,
    }


def contact_settings(leg: LegDescription) -> dict:
    """The contact parameters as built (solref after the 2·timestep floor)."""
    g, foot = leg.ground, leg.foot
    assert g is not None and foot is not None
    return {
        'friction': [float(v) for v in g.friction],
        'condim': g.condim,
        'solref': [max(float(g.solref[0]), 2.0 * leg.timestep), float(g.solref[1])],
        'solimp': [float(v) for v in g.solimp],
        'foot': {'body': foot.body, 'pos': foot.pos.tolist(), 'radius': foot.radius},
    }


def run_stance(
    leg: LegDescription | None = None,
    setup: StanceSetup | None = None,
    timestep: float | None = None,
    integrator: str | None = None,
    variants=VARIANTS,
) -> dict:
    """The stance row: per variant RMSE/MaxAE against the analytic model, plus the foot checks."""
    leg = stance_leg(leg)
    if timestep is not None:
        leg = leg.with_timestep(timestep)
    if integrator is not None:
        leg = leg.with_overrides({'sim.integrator': integrator})
    setup = setup or StanceSetup()
    if not setup.joint_limits:
        free = [-2 * np.pi, 2 * np.pi]
        leg = leg.with_overrides({f'joints.{j}.range': free for j in leg.joints})
    lag = StanceLagrangian(leg)
    q0 = np.asarray(setup.theta0, float)
    F0 = lag.balancing_forces(q0)
    push = _push_fn(setup)
    dt = leg.timestep
    t = np.arange(int(round(setup.duration / dt)) + 1) * dt
    states = lag.simulate_push(q0, F0, setup.impulse_n, setup.impulse_s, t)
    ref = states[:, : lag.n]
    every = max(1, int(round(0.005 / dt)))  # the reaction check every 5 ms
    reaction = np.array(
        [
            lag.ground_reaction(y[: lag.n], y[lag.n :], F0, push(ti))
            for ti, y in zip(t[::every], states[::every], strict=True)
        ]
    )
    normal = -reaction[:, 1]
    out: dict = {
        'setup': vars(setup),
        'balancing_forces_n': F0.tolist(),
        'contact': contact_settings(leg),
        'timestep': dt,
        'integrator': leg.integrator,
        'min_normal_force_n': float(normal.min()),
        'max_friction_ratio': float(np.max(np.abs(reaction[:, 0]) / normal)),
        'theta_range': [ref.min(axis=0).tolist(), ref.max(axis=0).tolist()],
        'trace': {'t': t, 'lagrangian': ref},
    }
    for v in variants:
        run = mujoco_stance(LegModel(leg, v), setup, F0, lag)
        out[v] = _metrics(run['theta'] - ref)
        out[v]['penetration_m'] = run['penetration_m']
        out[v]['slip_m'] = run['slip_m']
        out['trace'][v] = run['theta']
    return out


def format_rows(res: dict) -> list[str]:
    """Table rows in equivalence.format_table's layout, then the setup and contact settings."""
    p = PAPER_STANCE
    rows = [
        f'{"stance":8s} {"paper":10s} {p["rmse"][0]:10.5f} {p["rmse"][1]:10.5f} '
        f'{p["maxae"][0]:10.5f} {p["maxae"][1]:10.5f}  (Table III)'
    ]
    for v in VARIANTS:
        if v in res:
            m = res[v]
            rows.append(
                f'{"stance":8s} {v:10s} {m["rmse"][0]:10.5f} {m["rmse"][1]:10.5f} '
                f'{m["maxae"][0]:10.5f} {m["maxae"][1]:10.5f}  {m["n"]}'
            )
    s, c = res['setup'], res['contact']
    rows.append(
        f'stance: from rest at θ = ({s["theta0"][0]:.4f}, {s["theta0"][1]:.1f}) under '
        f'F0 = ({res["balancing_forces_n"][0]:.3f}, {res["balancing_forces_n"][1]:.3f}) N, '
        f"push F' = {tuple(s['impulse_n'])} N (planar x, y) on the base for {s['impulse_s']} s, "
        f'{s["duration"]} s compared, joint limits {"on" if s["joint_limits"] else "off"}; '
        f'foot {c["foot"]["body"]} sphere r = '
        f'{c["foot"]["radius"]} m; contact friction {c["friction"]}, condim {c["condim"]}, '
        f'solref {c["solref"]}, solimp {c["solimp"]}'
    )
    eq = res.get('equimus')
    if eq is not None:
        rows.append(
            f'stance foot (equimus): max penetration {eq["penetration_m"] * 1e3:.3f} mm, '
            f'max slip beyond rolling {eq["slip_m"] * 1e3:.3f} mm; analytic ground reaction: '
            f'normal ≥ {res["min_normal_force_n"]:.2f} N, |tangential|/normal ≤ '
            f'{res["max_friction_ratio"]:.3f}'
        )
    return rows


def plot(res: dict, path: str) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    tr = res['trace']
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
    for j, ax in enumerate(axes):
        ax.plot(tr['t'], tr['lagrangian'][:, j], 'k-', lw=2, label='analytic (foot at origin)')
        if 'equimus' in tr:
            ax.plot(tr['t'], tr['equimus'][:, j], 'C1--', label='EquiMus (MuJoCo contact)')
        if 'pure' in tr:
            ax.plot(tr['t'], tr['pure'][:, j], 'C0:', label='pure MuJoCo (massless)')
        ax.set_xlabel('t (s)')
        ax.set_ylabel(f'θ{j + 1} (rad)')
    axes[0].legend(fontsize=8)
    fig.suptitle("stance: standing at (π/2, 0), push F' = (10 N, 10 N) on the base", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument('--duration', type=float, default=DURATION_S, help='seconds compared')
    ap.add_argument('--timestep', type=float, default=None, help='MuJoCo timestep')
    ap.add_argument('--leg', default=None, help='leg YAML (default: config/leg.yaml)')
    ap.add_argument('--plot', default=None, help='write the trajectories (PNG)')
    args = ap.parse_args(argv)
    if not args.duration > 0:
        ap.error('--duration must be > 0')
    try:
        leg = load_leg(args.leg)
        t0 = time.perf_counter()
        res = run_stance(leg, StanceSetup(duration=args.duration), timestep=args.timestep)
    except ValueError as exc:
        print(f'stance: {exc}', file=sys.stderr)
        return 2
    print('\n'.join(format_rows(res)))
    print(f'({time.perf_counter() - t0:.1f} s wall)')
    if args.plot:
        plot(res, args.plot)
        print(f'plot: {args.plot}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
