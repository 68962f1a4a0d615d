#!/usr/bin/env python3
"""Gradient identification (`identify --method gradient`) against the search (`--method search`)
on the same data and the same multiple-shooting residuals.

    python benchmarks/bench_gradient.py --data synthetic --maxiter 10 --refine-maxfev 100 \
        --iterations 10 --out syn_fd.json          # search, then gradient with fd Jacobians
    python benchmarks/bench_gradient.py --data synthetic --methods mjx --iterations 5 \
        --out syn_mjx.json                         # gradient with MJX Jacobians (the mjx extra)
    python benchmarks/bench_gradient.py --data synthetic --merge syn_fd.json syn_mjx.json
    python benchmarks/bench_gradient.py --data tocenter --train 12 --held 6 --maxiter 5 \
        --refine-maxfev 100 --iterations 10
    python benchmarks/bench_gradient.py --data synthetic --jacobian-cost paper+lag

Figures and wall times: docs/identification.md ("Gradient identification").

Every simulated candidate of either method is traced (wall and CPU time, loss), in this one process
(serial evaluation for both, so neither gets more cores than the other). The loss is the mean
squared shooting residual (rad², `gradient.fit_gradient`'s objective; the search's differential
evolution ranks by the mean over windows, the same up to the windows' weights). Reported per
method: the final loss, the wall time at which it first reached the loss every method reached
(the worst of the final losses), the optimum, and the error on data no fit saw:
- synthetic: a session simulated with known parameters (synth.GROUND_TRUTH) and mocap-like
  noise, 11 parameters (Table V's ten + the valve's lag); held out: another session of random
  steps with the same truth, replayed from its first state; and each parameter's error to the truth.
- tocenter: the authors' ToCenter session, every sample of --train of the 36 segments, 14 parameters
  (Table V's ten + dead time, fill and vent constants + the knee stop); held out: --held others
  (spread over the grid as `heldout --folds N`), each replayed from its first state.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
# not determined by step data through mocap noise (docs/identification.md, "Identifiability")
UNDETERMINED = ('actuators.maa.c',)
SHARED = (ROOT / '..' / 'shared' / 'data' / 'equimus' / 'physical').resolve()


def traced_evaluator(*args, **kwargs):
    """An Evaluator that records (wall s, mean squared residual) of every simulated candidate."""
    from equimus_identification import dynamic as D

    class Traced(D.Evaluator):
        trace: list
        t0: float

        def _note(self, sims) -> None:
            self._add(self.residuals_of_sims(sims))

        def _add(self, r) -> None:
            self.trace.append(
                (time.monotonic() - self.t0, float(np.mean(r**2)), time.process_time() - self.c0)
            )

        def loss_of_sims(self, sims) -> float:
            self._note(sims)
            return super().loss_of_sims(sims)

        def residuals(self, x) -> np.ndarray:
            r = super().residuals(x)
            self._add(r)
            return r

    ev = Traced(*args, **kwargs)
    ev.trace, ev.t0, ev.c0 = [], time.monotonic(), time.process_time()
    return ev


def synthetic_data(noise: float) -> dict:
    from equimus_identification import data, synth

    truth = dict(synth.GROUND_TRUTH)

    def session(seed: int):
        sim = synth.simulate_steps(truth, steps_kpa=synth.random_steps(8, seed=seed), hold_s=1.2)
        with tempfile.TemporaryDirectory() as tmp:
            bag = synth.write_bag(pathlib.Path(tmp) / 'bag', sim, noise_rad=noise, seed=seed)
            return data.load_any([str(bag)], duration=1.2)['dynamic']

    return {
        'train': session(11),
        'held': session(12),
        'names': list(truth),
        'truth': truth,
        'dt': 1.0 / 600.0,
        'horizon': 0.3,
    }


def tocenter_data(n_train: int, n_held: int) -> dict:
    from equimus_identification import data
    from equimus_identification import dynamic as D

    segs = data.load_trajectory_csv(next((SHARED / 'dynamic').glob('ToCenter_*.csv')))
    held = set(np.linspace(0, len(segs) - 1, n_held).round().astype(int).tolist())
    rest = [i for i in range(len(segs)) if i not in held]
    train = [rest[i] for i in np.linspace(0, len(rest) - 1, n_train).round().astype(int)]
    return {
        'train': [segs[i] for i in train],
        'held': [segs[i] for i in sorted(held)],
        'names': list(D.PAPER_PARAMS) + list(D.VALVE_PARAMS) + ['joints.knee.range.0'],
        'truth': None,
        'dt': 0.01,
        'horizon': 0.5,
    }


def run_method(method: str, d: dict, a) -> dict:
    from equimus_description.leg import load_leg
    from equimus_identification import dynamic as D
    from equimus_identification import gradient as G
    from equimus_identification.cli import fit_start

    leg = load_leg(parameter_set='table_v_dynamic')
    names = d['names']
    ev = traced_evaluator(
        d['train'],
        names,
        leg=leg,
        loss='shooting',
        horizon=d['horizon'],
        dt=d['dt'],
        sign_weight=0.0,
    )
    x_before = np.clip([D.leg_value(leg, n) for n in names], ev.lower, ev.upper)
    x0 = fit_start(ev, names, x_before)
    quiet = (lambda _m: None) if not a.verbose else print
    ev.t0, ev.c0 = time.monotonic(), time.process_time()
    extra: dict = {}
    if method == 'search':
        r = D.fit(
            ev,
            popsize=a.popsize,
            maxiter=a.maxiter,
            seed=0,
            refine='lm',
            refine_maxfev=a.refine_maxfev,
            x0=x0,
            log=quiet,
        )
        x, wall = r.x, r.wall_s
    else:
        g = G.fit_gradient(
            ev, x0, jacobian=method.split('-')[1], iterations=a.iterations, log=quiet
        )
        x, wall = g.x, g.wall_s
        extra = {'jacobians': g.jacobians, 'compile_s': g.compile_s}
        if g.jacobian == 'mjx':  # the MJX residuals are not traced: take its own iterates
            ev.trace = [(t, loss, math.nan) for t, loss, _u in g.trace]
    final = float(np.mean(ev.residuals(x) ** 2))
    m = D.metrics(d['held'], x, names, leg=leg, dt=d['dt'])
    held = np.mean([mm['rmse'] for mm in m], axis=0)
    out = {
        'method': method,
        'loss': final,
        'wall_s': wall,
        'trace': ev.trace[:-1],
        'x': dict(zip(names, map(float, x), strict=True)),
        'held_rmse': held.tolist(),
        'start_loss': ev.trace[0][1] if ev.trace else math.nan,
        **extra,
    }
    if d['truth']:
        out['rel_error'] = {n: abs(out['x'][n] / d['truth'][n] - 1.0) for n in names}
    return out


def jacobian_cost(d: dict, params: str) -> None:
    """Seconds of one residual vector and one Jacobian, C simulator (finite differences) vs MJX
    (compilation apart), and how far MJX's figures are from the C simulator's, at the start."""
    from equimus_description.leg import load_leg
    from equimus_identification import dynamic as D
    from equimus_identification import gradient as G
    from equimus_identification.cli import fit_start
    from equimus_identification.options import parse_params

    leg = load_leg(parameter_set='table_v_dynamic')
    names = parse_params(params)
    ev = D.Evaluator(
        d['train'],
        names,
        leg=leg,
        loss='shooting',
        horizon=d['horizon'],
        dt=d['dt'],
        sign_weight=0.0,
    )
    x0 = fit_start(ev, names, np.clip([D.leg_value(leg, n) for n in names], ev.lower, ev.upper))
    u0 = ev.to_unit(x0)

    def timed(fn):
        t = time.monotonic()
        out = fn()
        return out, time.monotonic() - t

    r_c, t_c = timed(lambda: ev.residuals(x0))
    J_fd, t_fd = timed(lambda: G.fd_jacobian(ev, u0, r_c))
    print(f'{len(names)} parameters, {r_c.size} residuals, {ev.steps_per_eval} steps')
    print(f'C simulator: residuals {t_c:.3f} s, finite-difference Jacobian {t_fd:.2f} s')
    mj, t_build = timed(lambda: G.MjxResiduals(ev, u0))
    r_j, t_rc = timed(lambda: mj.residuals(u0))
    _, t_r = timed(lambda: mj.residuals(u0))
    (J, _), t_jc = timed(lambda: mj.jacobian(u0))
    _, t_j = timed(lambda: mj.jacobian(u0))
    rel = np.linalg.norm(J - J_fd, axis=0) / np.linalg.norm(J_fd, axis=0)
    print(
        f'MJX: model {t_build:.1f} s; residuals first call {t_rc:.1f} s, then {t_r:.3f} s; '
        f'Jacobian first call {t_jc:.1f} s, then {t_j:.2f} s'
    )
    print(
        f'MJX vs C: residuals max |diff| {np.max(np.abs(r_j - r_c)):.2e} rad; Jacobian '
        f'columns vs finite differences: relative difference ≤ {np.max(rel):.2e}'
    )


def time_to(trace, target: float) -> float:
    """Wall time at which the best loss so far first reached target (nan if never)."""
    for t, loss, _cpu in trace:
        if loss <= target:
            return t
    return math.nan


def cpu_to(trace, target: float) -> float:
    """CPU time of this process at the same point (the figure a loaded machine moves least)."""
    for _t, loss, cpu in trace:
        if loss <= target:
            return cpu
    return math.nan


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--data', choices=('synthetic', 'tocenter'), default='synthetic')
    p.add_argument(
        '--methods', default='search,fd', help='search, fd (gradient), mjx (gradient), comma-joined'
    )
    p.add_argument('--iterations', type=int, default=20)
    p.add_argument('--popsize', type=int, default=3)
    p.add_argument('--maxiter', type=int, default=60)
    p.add_argument('--refine-maxfev', type=int, default=400)
    p.add_argument('--noise', type=float, default=0.002, help='synthetic mocap noise (rad)')
    p.add_argument('--train', type=int, default=24, help='ToCenter segments fitted')
    p.add_argument('--held', type=int, default=12, help='ToCenter segments held out')
    p.add_argument('--out', default=None, help='JSON with every figure and trace')
    p.add_argument('--verbose', action='store_true')
    p.add_argument(
        '--jacobian-cost',
        default=None,
        metavar='PARAMS',
        help='only time one residual and one Jacobian, C vs MJX, for these --params',
    )
    p.add_argument('--merge', nargs='*', default=None, help='tabulate earlier --out files together')
    a = p.parse_args(argv)
    d = synthetic_data(a.noise) if a.data == 'synthetic' else tocenter_data(a.train, a.held)
    if a.jacobian_cost:
        jacobian_cost(d, a.jacobian_cost)
        return 0
    methods = [m if m == 'search' else f'gradient-{m}' for m in a.methods.split(',') if m]
    res = []
    for f in a.merge or []:
        res += json.loads(pathlib.Path(f).read_text())
    for mth in methods if a.merge is None else []:
        print(f'{a.data}: {mth} ...', flush=True)
        res.append(run_method(mth, d, a))
    target = max(r['loss'] for r in res) * (1.0 + 1e-3)
    print(
        f'\n{a.data}: {len(d["train"])} experiments fitted, {len(d["held"])} held out; '
        f'{len(d["names"])} parameters; equal loss = {target:.6g} rad²\n'
    )
    print(
        '| method | final loss (rad²) | wall (CPU) to equal loss (s) | wall total (s) | '
        'held-out RMSE θ1 / θ2 (rad) |'
        + (' largest parameter error, c_MAA apart |' if d['truth'] else '')
    )
    print('|---|---|---|---|---|' + ('---|' if d['truth'] else ''))
    for r in res:
        r['wall_to_equal_s'] = time_to(r['trace'], target)
        r['cpu_to_equal_s'] = cpu_to(r['trace'], target)
        worst = ''
        if d['truth']:
            n, e = max(
                ((k, v) for k, v in r['rel_error'].items() if k not in UNDETERMINED),
                key=lambda kv: kv[1],
            )
            worst = f' {100 * e:.1f} % ({n}) |'
        print(
            f'| {r["method"]} | {r["loss"]:.6g} | {r["wall_to_equal_s"]:.1f} '
            f'({r["cpu_to_equal_s"]:.1f}) | '
            f'{r["wall_s"]:.1f} | {r["held_rmse"][0]:.4f} / {r["held_rmse"][1]:.4f} |' + worst
        )
    print('\noptima:')
    names = d['names']
    print(
        '| parameter | '
        + ' | '.join(r['method'] for r in res)
        + (' | truth |' if d['truth'] else ' |')
    )
    print('|---|' + '---|' * (len(res) + (1 if d['truth'] else 0)))
    for n in names:
        row = ' | '.join(f'{r["x"][n]:.5g}' for r in res)
        print(f'| {n} | {row} |' + (f' {d["truth"][n]:.5g} |' if d['truth'] else ''))
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == '__main__':
    sys.exit(main())
