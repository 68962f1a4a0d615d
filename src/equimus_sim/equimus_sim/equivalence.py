"""Equivalence check in the spirit of the paper's Table III: MuJoCo models vs the Lagrangian model.

Samples equilibria θ in the workspace Ω = [π/6, 2π/3] × [0, π/2] whose balancing pressures
P = f(θ)/S lie in 0–50 kPa (the valves' range), then
  static: settles each MuJoCo model under F = f(θ) and compares its rest pose with θ;
  swing:  steps the forces from f(θ) to f(θ') (θ' another sample) and compares the joint
          trajectories over `duration` seconds. Runs whose Lagrangian trajectory leaves the valid
          range θ1 ∈ (π/6, 5π/6), θ2 ∈ (0, 2π/3) are rejected, as the authors do.
Each model starts from its own rest state under the initial forces. Valve lag is left out (step
forces), as in the paper. Prints RMSE and MaxAE per joint for 'equimus' and 'pure' beside Table III.
  stance: the leg standing on its foot (ground contact) and pushed, vs the analytic model re-rooted
          at the foot (equimus_sim.stance, which states our reading of the paper); --no-stance
          leaves it out.

Run: equivalence --samples 50 --seed 1 --duration 2 [--plot out.png] [--json out.json]

Morphology generalisation (paper Sec. IV-C3): `equivalence --morphology random --seed S` draws a
3-DOF limb from equimus_sim.morphology's documented distribution (seeded by S), drives it from
rest at its build pose with a multi-pulse pressure sequence (step forces, no valve lag), and
prints per-joint RMSE and MaxAE of 'equimus' and 'pure' against the Lagrangian model beside the
paper's 3-DOF RMSE. A draw whose Lagrangian trajectory comes within 0.1 rad of a joint limit or
whose muscle shrinks below 2 cm is replaced by the next draw (counted as rejected).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import mujoco
import numpy as np

from equimus_description.leg import from_dict, load_leg

from .lagrangian import LagrangianLeg
from .leg_model import LegModel
from .morphology import pulses, random_limb
from .stance import format_rows as stance_rows
from .stance import has_stance, run_stance

WORKSPACE = ((np.pi / 6, 2 * np.pi / 3), (0.0, np.pi / 2))
VALID = ((np.pi / 6, 5 * np.pi / 6), (0.0, 2 * np.pi / 3))
PAPER = {  # Table III (rad)
    'static': {'rmse': (0.00096, 0.00574), 'maxae': (0.00369, 0.01452)},
    'swing': {'rmse': (0.00094, 0.00586), 'maxae': (0.00379, 0.01559)},
}
VARIANTS = ('equimus', 'pure')
PAPER_3DOF_RMSE = (0.0035, 0.0066, 0.0041)  # Sec. IV-C3 (rad), per joint


def sample_equilibria(
    lag: LagrangianLeg, n: int, rng, p_max_kpa: float = 50.0, max_tries: int = 200000
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """n stable equilibria θ ∈ Ω whose balancing pressures lie in [0, p_max] kPa: (θ, F, P)."""
    areas = np.array([a.area for a in lag.leg.actuators.values()]) * 1e3
    out: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for _ in range(max_tries):
        if len(out) == n:
            break
        q = np.array([rng.uniform(*WORKSPACE[0]), rng.uniform(*WORKSPACE[1])])
        F = lag.balancing_forces(q)
        P = F / areas
        if (
            np.all(P >= 0.0)
            and np.all(p_max_kpa >= P)
            and np.all(np.linalg.eigvals(lag.stiffness_matrix(q, F)).real > 0)
        ):
            out.append((q, F, P))
    if len(out) < n:
        raise RuntimeError(
            f'only {len(out)} of {n} equilibria found with pressures in 0–{p_max_kpa} kPa'
        )
    return out


def _in_valid(theta: np.ndarray) -> bool:
    return bool(
        np.all(
            (theta[:, 0] > VALID[0][0])
            & (theta[:, 0] < VALID[0][1])
            & (theta[:, 1] > VALID[1][0])
            & (theta[:, 1] < VALID[1][1])
        )
    )


def _mujoco_step_response(lm: LegModel, q0, F0, F1, n_steps: int) -> tuple[np.ndarray, float]:
    """Joint angles (n_steps + 1, n_joints) after a force step F0 -> F1, and the largest
    loop-closure residual seen (m)."""
    d = mujoco.MjData(lm.model)
    lm.reset(d, q0)
    lm.set_forces(d, F0)
    lm.settle(d)
    lm.set_forces(d, F1)
    out = np.empty((n_steps + 1, len(lm.joint_names)))
    out[0] = lm.joint_angles(d)
    loop = 0.0
    for k in range(n_steps):
        mujoco.mj_step(lm.model, d)
        out[k + 1] = lm.joint_angles(d)
        if k % 10 == 0:
            loop = max(loop, float(np.max(lm.loop_residuals(d), initial=0.0)))
    if not np.all(np.isfinite(out)):
        raise RuntimeError('MuJoCo step response diverged')
    return out, loop


def _metrics(errors: list) -> dict:
    if not errors:
        return {'rmse': [float('nan')] * 2, 'maxae': [float('nan')] * 2, 'n': 0}
    e = np.concatenate(errors, axis=0)
    return {
        'rmse': np.sqrt(np.mean(e**2, axis=0)).tolist(),
        'maxae': np.max(np.abs(e), axis=0).tolist(),
        'n': len(errors),
    }


def run_equivalence(
    samples: int = 20,
    seed: int = 0,
    duration: float = 2.0,
    leg=None,
    timestep: float | None = None,
    integrator: str | None = None,
    static_samples: int | None = None,
    progress=None,
    keep_traces: int = 0,
    stance: bool = True,
) -> dict:
    """Static and swing comparison; returns metrics per variant plus counts (and a few traces)."""
    leg = leg if leg is not None else load_leg()
    if timestep is not None:
        leg = leg.with_timestep(timestep)
    if integrator is not None:
        leg = leg.with_overrides({'sim.integrator': integrator})
    lag = LagrangianLeg(leg)
    models = {v: LegModel(leg, v) for v in VARIANTS}
    rng = np.random.default_rng(seed)
    dt = leg.timestep
    n_steps = int(round(duration / dt))
    t = np.arange(n_steps + 1) * dt
    say = progress or (lambda msg: None)

    n_static = samples if static_samples is None else static_samples
    static_err: dict[str, list[np.ndarray]] = {v: [] for v in VARIANTS}
    eqs = sample_equilibria(lag, n_static, rng)
    t0 = time.perf_counter()
    for i, (q, F, _) in enumerate(eqs):
        for v, lm in models.items():
            d = mujoco.MjData(lm.model)
            lm.reset(d, q)
            lm.set_forces(d, F)
            lm.settle(d)
            static_err[v].append((lm.joint_angles(d) - q)[None, :])
        if (i + 1) % max(1, n_static // 10) == 0:
            say(f'static {i + 1}/{n_static} ({time.perf_counter() - t0:.1f} s)')

    swing_err: dict[str, list[np.ndarray]] = {v: [] for v in VARIANTS}
    traces: list[dict[str, np.ndarray]] = []
    rejected = 0
    max_loop = 0.0
    t0 = time.perf_counter()
    for i in range(samples):
        (q0, F0, P0), (q1, F1, P1) = sample_equilibria(lag, 2, rng)
        sol = lag.simulate(q0, F1, t)
        if sol.status != 0 or sol.y.shape[1] != len(t):
            rejected += 1
            continue
        ref = sol.y[:2].T
        if not _in_valid(ref):
            rejected += 1
            continue
        runs = {}
        for v, lm in models.items():
            runs[v], loop = _mujoco_step_response(lm, q0, F0, F1, n_steps)
            max_loop = max(max_loop, loop)
        for v in VARIANTS:
            swing_err[v].append(runs[v] - ref)
        if len(traces) < keep_traces:
            traces.append({'t': t, 'lagrangian': ref, **runs, 'p0': P0, 'p1': P1})
        if (i + 1) % max(1, samples // 10) == 0:
            rmse = _metrics(swing_err['equimus'])['rmse']
            say(
                f'swing {i + 1}/{samples}: {i + 1 - rejected} valid, equimus RMSE so far '
                f'{rmse[0]:.5f} / {rmse[1]:.5f} rad ({time.perf_counter() - t0:.1f} s)'
            )
    stance_res = None
    if stance and not has_stance(leg):
        say('stance: left out (the description has no `foot` and `ground` sections)')
    elif stance:
        t0 = time.perf_counter()
        stance_res = run_stance(leg, timestep=timestep, integrator=integrator)
        stance_res.pop('trace')
        say(f'stance ({time.perf_counter() - t0:.1f} s)')
    return {
        'stance': stance_res,
        'static': {v: _metrics(static_err[v]) for v in VARIANTS},
        'swing': {v: _metrics(swing_err[v]) for v in VARIANTS},
        'max_loop_residual_m': max_loop,
        'swing_valid': samples - rejected,
        'swing_rejected': rejected,
        'samples': samples,
        'seed': seed,
        'duration': duration,
        'timestep': dt,
        'integrator': leg.integrator,
        'traces': traces,
    }


def run_morphology(seed: int = 0, max_draws: int = 20) -> dict:
    """A random 3-DOF limb (seed S) under a multi-pulse sequence: metrics per variant."""
    rng = np.random.default_rng(seed)
    rejected = 0
    while True:
        leg = from_dict(random_limb(rng, name=f'random_limb_seed{seed}'))
        seq = pulses(rng, len(leg.actuators))
        lag = LagrangianLeg(leg)
        ref = _lagrangian_pulses(lag, seq)
        if ref is not None:
            break
        rejected += 1
        if rejected == max_draws:
            raise RuntimeError(f'no valid draw in {max_draws} for seed {seed}')
    runs = {v: _mujoco_pulses(LegModel(leg, v), lag.ref, seq) for v in VARIANTS}
    out = {v: _metrics([runs[v][0] - ref]) for v in VARIANTS}
    return {
        **out,
        'seed': seed,
        'rejected_draws': rejected,
        'max_loop_residual_m': runs['equimus'][1],
        'joints': [(j.name, j.parent, j.child, int(j.axis[0])) for j in leg.joints.values()],
        'muscles': [(a.name, a.base.body, a.tip.body) for a in leg.actuators.values()],
        'pulses_kpa': [np.round(p, 2).tolist() for _, p in seq],
        'pulse_s': seq[0][0],
        'timestep': leg.timestep,
        'integrator': leg.integrator,
        'range_rad': np.ptp(ref, axis=0).tolist(),
    }


def _lagrangian_pulses(lag: LagrangianLeg, seq) -> np.ndarray | None:
    """Joint angles of the analytic model through the pulses from rest at the build pose, or
    None when the draw leaves the valid set (near a joint limit, a collapsed muscle)."""
    leg = lag.leg
    areas = np.array([a.area for a in leg.actuators.values()]) * 1e3
    lo = np.array([j.range[0] for j in leg.joints.values()]) + 0.1
    hi = np.array([j.range[1] for j in leg.joints.values()]) - 0.1
    state = np.concatenate([lag.ref, np.zeros(lag.n)])
    out = [lag.ref.copy()]
    for dur, P in seq:
        n = int(round(dur / leg.timestep))
        sol = lag.simulate(
            state[: lag.n], areas * P, np.arange(n + 1) * leg.timestep, state[lag.n :]
        )
        if sol.status != 0 or sol.y.shape[1] != n + 1:
            return None
        q = sol.y[: lag.n, 1:].T
        if np.any(q < lo) or np.any(q > hi):
            return None
        if min(np.min(lag.actuator_lengths(x)) for x in q[::20]) < 0.02:
            return None
        out.extend(q)
        state = sol.y[:, -1]
    return np.array(out)


def _mujoco_pulses(lm: LegModel, q0, seq) -> tuple[np.ndarray, float]:
    d = mujoco.MjData(lm.model)
    lm.reset(d, q0)
    out = [lm.joint_angles(d)]
    loop = 0.0
    for dur, P in seq:
        lm.set_forces(d, lm.forces_from_pressures(P))
        for k in range(int(round(dur / lm.leg.timestep))):
            mujoco.mj_step(lm.model, d)
            out.append(lm.joint_angles(d))
            if k % 10 == 0:
                loop = max(loop, float(np.max(lm.loop_residuals(d), initial=0.0)))
    q = np.array(out)
    if not np.all(np.isfinite(q)):
        raise RuntimeError('MuJoCo pulse response diverged')
    return q, loop


def format_morphology(res: dict) -> str:
    n = len(res['joints'])
    head = ' '.join(f'{"RMSE θ" + str(i + 1):>10s}' for i in range(n))
    head += ' ' + ' '.join(f'{"MaxAE θ" + str(i + 1):>10s}' for i in range(n))
    rows = [f'{"test":8s} {"model":10s} {head}']
    rows.append(
        f'{"3-DOF":8s} {"paper":10s} '
        + ' '.join(f'{x:10.5f}' for x in PAPER_3DOF_RMSE)
        + ' '
        + ' '.join(f'{"-":>10s}' for _ in range(n))
        + '  (Sec. IV-C3)'
    )
    for v in VARIANTS:
        m = res[v]
        rows.append(
            f'{"3-DOF":8s} {v:10s} '
            + ' '.join(f'{x:10.5f}' for x in m['rmse'])
            + ' '
            + ' '.join(f'{x:10.5f}' for x in m['maxae'])
        )
    topo = ', '.join(f'{j} {p}->{c} (axis {s:+d}x)' for j, p, c, s in res['joints'])
    mus = ', '.join(f'{a} {b}->{t}' for a, b, t in res['muscles'])
    rows.append(f'random 3-DOF limb, seed {res["seed"]} ({res["rejected_draws"]} draws rejected)')
    rows.append(f'joints: {topo}')
    rows.append(f'muscles: {mus}')
    rows.append(
        f'pulses ({res["pulse_s"]} s each, kPa): {res["pulses_kpa"]}; dt {res["timestep"]} s, '
        f'{res["integrator"]}; joint excursion (ptp) '
        + ' / '.join(f'{x:.3f}' for x in res['range_rad'])
        + f' rad; largest loop-closure residual {res["max_loop_residual_m"]:.2e} m'
    )
    return '\n'.join(rows)


def format_table(res: dict) -> str:
    rows = [
        f'{"test":8s} {"model":10s} {"RMSE θ1":>10s} {"RMSE θ2":>10s} '
        f'{"MaxAE θ1":>10s} {"MaxAE θ2":>10s}  n'
    ]
    for test in ('static', 'swing'):
        p = PAPER[test]
        rows.append(
            f'{test:8s} {"paper":10s} {p["rmse"][0]:10.5f} {p["rmse"][1]:10.5f} '
            f'{p["maxae"][0]:10.5f} {p["maxae"][1]:10.5f}  (Table III)'
        )
        for v in VARIANTS:
            m = res[test][v]
            rows.append(
                f'{test:8s} {v:10s} {m["rmse"][0]:10.5f} {m["rmse"][1]:10.5f} '
                f'{m["maxae"][0]:10.5f} {m["maxae"][1]:10.5f}  {m["n"]}'
            )
    sw = res['swing']
    ratio = np.array(sw['pure']['rmse']) / np.array(sw['equimus']['rmse'])
    rows.append(
        f'swing runs: {res["swing_valid"]} valid of {res["samples"]} '
        f'({res["swing_rejected"]} left the valid workspace); duration {res["duration"]} s, '
        f'dt {res["timestep"]} s, {res["integrator"]}'
    )
    rows.append(
        f'pure / equimus swing RMSE: {ratio[0]:.1f}× / {ratio[1]:.1f}×; '
        'largest EquiMus loop-closure residual during the swings: '
        f'{res["max_loop_residual_m"]:.2e} m'
    )
    if res.get('stance'):
        rows.extend(stance_rows(res['stance']))
    return '\n'.join(rows)


def plot(res: dict, path: str) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    traces = res['traces']
    fig, axes = plt.subplots(len(traces), 2, figsize=(10, 2.6 * len(traces)), squeeze=False)
    for r, tr in enumerate(traces):
        for j in range(2):
            ax = axes[r, j]
            ax.plot(tr['t'], tr['lagrangian'][:, j], 'k-', lw=2, label='Lagrangian (scipy)')
            ax.plot(tr['t'], tr['equimus'][:, j], 'C1--', label='EquiMus (MuJoCo)')
            ax.plot(tr['t'], tr['pure'][:, j], 'C0:', label='pure MuJoCo (massless)')
            ax.set_ylabel(f'θ{j + 1} (rad)')
            ax.set_title(f'P {np.round(tr["p0"], 1)} → {np.round(tr["p1"], 1)} kPa', fontsize=9)
            if r == len(traces) - 1:
                ax.set_xlabel('t (s)')
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        '--samples', type=int, default=50, help='swing step responses (and static poses)'
    )
    ap.add_argument(
        '--static-samples', type=int, default=None, help='static poses (default: --samples)'
    )
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--duration', type=float, default=2.0, help='seconds per step response')
    ap.add_argument(
        '--timestep', type=float, default=None, help='MuJoCo timestep (default: leg.yaml)'
    )
    ap.add_argument(
        '--integrator', choices=['Euler', 'RK4', 'implicit', 'implicitfast'], default=None
    )
    ap.add_argument('--leg', default=None, help='leg YAML (default: config/leg.yaml)')
    ap.add_argument('--overrides', default=None, help='override YAML (e.g. identified parameters)')
    ap.add_argument('--plot', default=None, help='write a comparison plot (PNG)')
    ap.add_argument('--json', default=None, help='write the metrics as JSON')
    ap.add_argument('--no-stance', action='store_true', help='leave out the stance row')
    ap.add_argument(
        '--morphology',
        choices=['leg', 'random'],
        default='leg',
        help='leg: the description (--leg) against Table III; random: a randomised 3-DOF limb '
        "(seeded by --seed) under a multi-pulse sequence against the paper's 3-DOF figures",
    )
    args = ap.parse_args(argv)
    if args.samples < 1 or args.duration <= 0:
        ap.error('--samples must be ≥ 1 and --duration > 0')
    if args.morphology == 'random':
        t0 = time.perf_counter()
        mres = run_morphology(args.seed)
        print(format_morphology(mres))
        print(f'({time.perf_counter() - t0:.1f} s wall)')
        if args.json:
            with open(args.json, 'w') as f:
                json.dump(mres, f, indent=2)
        return 0
    leg = load_leg(args.leg, overrides=args.overrides)
    t0 = time.perf_counter()
    res = run_equivalence(
        args.samples,
        args.seed,
        args.duration,
        leg=leg,
        timestep=args.timestep,
        integrator=args.integrator,
        static_samples=args.static_samples,
        progress=lambda s: print(s, file=sys.stderr, flush=True),
        keep_traces=4 if args.plot else 0,
        stance=not args.no_stance,
    )
    print(format_table(res))
    print(f'({time.perf_counter() - t0:.1f} s wall)')
    if args.plot:
        plot(res, args.plot)
        print(f'plot: {args.plot}')
    if args.json:
        out = {k: v for k, v in res.items() if k != 'traces'}
        with open(args.json, 'w') as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == '__main__':
    sys.exit(main())
