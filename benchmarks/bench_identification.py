#!/usr/bin/env python3
"""Identification speed and accuracy on this machine.

    python benchmarks/bench_identification.py           # full: ~10 min on 2 cores
    python benchmarks/bench_identification.py --quick   # ~1 min

Measures, side by side in one run:
- rollout throughput (simulated steps/s): a single-threaded Python mj_step loop on the leg model vs
  the candidate evaluator (mujoco.rollout per candidate) in this process vs the same evaluator
  mapped over a population through the process pool (all cores);
- wall time of the dynamic identification of the 13 effective ToCenter groups (the paper's ten
  parameters + valve τ; quick mode: a few generations only) and its mean / max RMSE;
- candidates per second through the three mappers, side by side on one population: serial, the
  process pool, and a Dask LocalCluster of as many worker processes (skipped without the
  `dask[distributed]` extra);
- the independent cross-check: the whole-trajectory least-squares problem of the ToCenter releases
  (11 parameters from Table V) solved by ours and by mujoco.sysid (`crosscheck.py`): both optima,
  their 95 % intervals, whether they agree, and the two wall times (skipped without the
  `mujoco[sysid]` extra); quick mode: 3 groups of 1 s and 5 sysid iterations, a smoke run whose
  optima have not converged (its agreement figure means nothing);
- full mode only: the full ground truth (all eleven parameters from a synthetic bag with mocap
  noise): the largest relative error among the parameters the data determine, and the ones they
  do not (identifiability analysis at the fit).
"""

import argparse
import pathlib
import sys
import tempfile
import time

import mujoco
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOCENTER = (ROOT / '..' / 'shared' / 'data/equimus/physical/dynamic').resolve()


def _tocenter():
    from equimus_identification import data

    return data.load_tocenter(next(TOCENTER.glob('ToCenter_*.csv')))


def throughput(exps, workers=2, population=20) -> dict:
    from equimus_description.leg import load_leg
    from equimus_identification import dynamic as D
    from equimus_identification.parallel import Mapper
    from equimus_sim.leg_model import LegModel

    lm = LegModel(load_leg(parameter_set='table_v_dynamic').with_timestep(D.DT))
    m, d = lm.model, mujoco.MjData(lm.model)
    lm.reset(d, exps[0].q[0])
    n = 20000
    t = time.perf_counter()
    for _ in range(n):
        mujoco.mj_step(m, d)
    loop = n / (time.perf_counter() - t)
    names = list(D.PAPER_PARAMS)
    ev = D.Evaluator(exps, names, loss='whole', sign_weight=0.0)
    rng = np.random.default_rng(0)
    u0 = ev.to_unit([D.leg_value(lm.leg, k) for k in names])
    pts = [np.clip(u0 + 0.05 * rng.standard_normal(len(names)), 0, 1) for _ in range(population)]
    ev(pts[0])
    t = time.perf_counter()
    for p in pts[:5]:
        ev(p)
    single = 5 * ev.steps_per_eval / (time.perf_counter() - t)
    with Mapper('process', workers=workers) as mp:
        mp(ev, pts[:workers])  # start workers, compile their models
        t = time.perf_counter()
        mp(ev, pts)
        pooled = population * ev.steps_per_eval / (time.perf_counter() - t)
    return {
        'mj_step_loop_steps_per_s': loop,
        'evaluator_1proc_steps_per_s': single,
        'evaluator_pool_steps_per_s': pooled,
        'pool_workers': workers,
        'steps_per_candidate': ev.steps_per_eval,
    }


def mappers(exps, workers=2, population=24) -> dict:
    """Candidates/s of one population through serial, process pool and Dask LocalCluster."""
    from equimus_description.leg import load_leg
    from equimus_identification import dynamic as D
    from equimus_identification.parallel import Mapper

    leg = load_leg(parameter_set='table_v_dynamic')
    names = list(D.PAPER_PARAMS)
    ev = D.Evaluator(exps, names, leg=leg, loss='shooting')
    rng = np.random.default_rng(1)
    u0 = ev.to_unit([D.leg_value(leg, k) for k in names])
    pts = [np.clip(u0 + 0.05 * rng.standard_normal(len(names)), 0, 1) for _ in range(population)]
    kinds = ['serial', 'process']
    try:
        import dask.distributed  # noqa: F401

        kinds.append('dask')
    except ImportError:
        pass
    out, ref = {}, None
    for kind in kinds:
        with Mapper(kind, workers=workers) as mp:
            mp(ev, pts[:workers])  # warm up: workers started, models compiled
            t = time.perf_counter()
            losses = mp(ev, pts)
            out[f'candidates_per_s_{kind}'] = population / (time.perf_counter() - t)
        ref = losses if ref is None else ref
        out[f'same_losses_{kind}'] = bool(np.array_equal(losses, ref))
    return out


def crosscheck(quick: bool) -> dict:
    from equimus_description.leg import load_leg
    from equimus_identification import crosscheck as C
    from equimus_identification import dynamic as D

    why = C.available()
    if why:
        return {'crosscheck': f'skipped: {why}'}
    exps = _tocenter()
    exps = [e.head(1.0) for e in exps[:3]] if quick else exps
    names = list(D.BOUNDS)
    c = C.compare(
        exps, load_leg(parameter_set='table_v_dynamic'), names, max_iters=5 if quick else 40
    )
    print(C.markdown(c))
    return {
        'crosscheck_agree': f'{sum(c["agree"])}/{len(names)}',
        'crosscheck_wall_s_ours': c['ours']['wall_s'],
        'crosscheck_wall_s_sysid': c['sysid']['wall_s'],
        'crosscheck_rms_ours_rad': c['ours']['residual_rms'],
        'crosscheck_rms_sysid_rad': c['sysid']['residual_rms'],
        'crosscheck_max_rel_diff': max(c['relative_difference']),
    }


def dynamic_fit(quick: bool) -> dict:
    from equimus_identification import cli as identify_cli

    with tempfile.TemporaryDirectory() as tmp:
        argv = [
            str(next(TOCENTER.glob('ToCenter_*.csv'))),
            '--tocenter',
            'releases',  # the 13 releases, as this figure has always been measured
            '--out',
            tmp,
            '--params',
            'paper+valve',
            '--no-plots',
            '--fresh',
        ]
        argv += ['--maxiter', '3', '--refine-maxfev', '20'] if quick else []
        t = time.perf_counter()
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = identify_cli.main(argv)
        wall = time.perf_counter() - t
        import yaml

        doc = yaml.safe_load((pathlib.Path(tmp) / 'params.yaml').read_text())
    info = doc['identification']
    return {
        'fit_rc': rc,
        'fit_wall_s': wall,
        'fit_rmse_mean_rad': info['rmse_mean_rad'],
        'fit_rmse_max_rad': info['rmse_max_rad'],
        'fit_budget': 'quick (3 gen)' if quick else 'CLI default',
    }


def ground_truth_full() -> dict:
    """All eleven parameters from a synthetic bag (20 random 1 s steps, 0.002 rad mocap noise)."""
    import contextlib
    import io

    import yaml

    from equimus_identification import cli as identify_cli
    from equimus_identification import synth

    truth = synth.GROUND_TRUTH
    with tempfile.TemporaryDirectory() as tmp:
        sim = synth.simulate_steps(truth, steps_kpa=synth.random_steps(20, seed=3), hold_s=1.0)
        bag = synth.write_bag(pathlib.Path(tmp) / 'gt_bag', sim, noise_rad=0.002)
        t = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            identify_cli.main(
                [
                    str(bag),
                    '--out',
                    f'{tmp}/fit',
                    '--params',
                    ','.join(truth),
                    '--loss',
                    'shooting',
                    '--horizon',
                    '0.6',
                    '--duration',
                    '1.0',
                    '--popsize',
                    '4',
                    '--maxiter',
                    '30',
                    '--no-plots',
                    '--fresh',
                ]
            )
        wall = time.perf_counter() - t
        doc = yaml.safe_load((pathlib.Path(tmp) / 'fit/params.yaml').read_text())
    fitted, undetermined = doc['parameters'], doc['identification']['not_determined']
    rel = {k: abs(fitted[k] - v) / v for k, v in truth.items()}
    determined = {k: e for k, e in rel.items() if k not in undetermined}
    worst = max(determined, key=determined.get)
    return {
        'gt_wall_s': wall,
        'gt_determined_max_rel_error': determined[worst],
        'gt_determined_worst_param': worst,
        'gt_not_determined': ', '.join(undetermined) or 'none',
        'gt_rel_errors': rel,
    }


def run(quick: bool) -> dict:
    exps = _tocenter()
    out = throughput(exps if not quick else [e.head(2.0) for e in exps])
    out['pool_speedup_vs_mj_step_loop'] = (
        out['evaluator_pool_steps_per_s'] / out['mj_step_loop_steps_per_s']
    )
    out.update(mappers(exps if not quick else [e.head(2.0) for e in exps]))
    out.update(crosscheck(quick))
    out.update(dynamic_fit(quick))
    if not quick:
        out.update(ground_truth_full())
    return out


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument('--quick', action='store_true')
    r = run(ap.parse_args().quick)
    print(f'{"measure":40s} value')
    for k, v in r.items():
        if isinstance(v, dict):
            v = ', '.join(f'{a.split(".", 1)[-1]} {b:.3f}' for a, b in v.items())
        elif isinstance(v, float | int) and not isinstance(v, bool):
            v = f'{v:,.4g}'
        print(f'{k:40s} {v}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
