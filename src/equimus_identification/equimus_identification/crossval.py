"""Choose a fit by held-out error: k-fold cross-validation of the joint static + dynamic fit.

    python -m equimus_identification.crossval TOCENTER.csv STATIC_SET_A.csv [STATIC_SET_B.csv]
        --folds 3 --weights 0,1,3 --out cv/

Folds are pressure pairs: fold f holds out the ToCenter releases AND the static equilibria of the
pairs i with i mod K = f (Set A's 13 pairs are the 13 effective groups' start pressures), so a
held-out figure is for pressures the fit never saw. For each static weight w (the joint loss is
MSE_dynamic + w · MSE_static, see dynamic.Evaluator) and fold: fit on the rest, score train and
held-out. The selection criterion is weight-free: held-out MSE_dynamic + MSE_static (equal
weights, rad²). The winning weight is refitted on all data (`final/params.yaml`); further static
sets (Set B) are validation only. Reference parameter sets are scored on the same data.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import sys
import time
from typing import Any

import numpy as np

from . import data
from . import dynamic as D

REFERENCES = {
    'paper Table V (dynamic)': ('table_v_dynamic', None),
    'paper Table V (static)': ('table_v_static', None),
}


def score(exps, leg, names, x) -> dict:
    """Dynamic whole-trajectory MSE (pooled over the releases) and static rest-angle MSE."""
    if not exps:
        return {'dyn_rmse': float('nan'), 'static_rmse': float('nan'), 'criterion': float('nan')}
    m = D.metrics(exps, x, names, leg=leg)
    dyn = [r for r in m if not r['static']]
    sta = [r for r in m if r['static']]
    dmse = float(np.mean([r['rmse_all'] ** 2 for r in dyn])) if dyn else 0.0
    smse = float(np.mean([r['rmse_all'] ** 2 for r in sta])) if sta else 0.0
    return {
        'dyn_rmse': float(np.sqrt(dmse)) if dyn else float('nan'),
        'dyn_rmse_max': float(max(r['rmse_all'] for r in dyn)) if dyn else float('nan'),
        'static_rmse': float(np.sqrt(smse)) if sta else float('nan'),
        'static_rmse_joint': (
            np.sqrt(np.mean([r['rmse'] ** 2 for r in sta], axis=0)).tolist() if sta else None
        ),
        'criterion': dmse + smse,
    }


def fit_one(exps, leg, names, weight, a, workers) -> D.FitResult:
    ev = D.Evaluator(exps, names, leg=leg, loss='shooting', horizon=a.horizon, static_weight=weight)
    x0 = np.array([D.leg_value(leg, n) for n in names])
    return D.fit(
        ev,
        popsize=a.popsize,
        maxiter=a.maxiter,
        workers=workers,
        seed=a.seed,
        refine='lm',
        refine_maxfev=a.refine_maxfev,
        x0=x0,
        log=lambda msg: None,
        progress=True,
    )


def report_markdown(doc: dict) -> str:
    """The cross-validation table: per static weight the mean over folds of the train and
    held-out figures, then every parameter set on all pairs and on the validation sets."""

    def f(v):
        return '–' if v is None or not np.isfinite(v) else f'{v:.4f}'

    out = [
        '| static weight w | dynamic RMSE train | dynamic RMSE held-out | static RMSE train | '
        'static RMSE held-out | held-out criterion (rad²) | held-out after DE only |',
        '|---|---|---|---|---|---|---|',
    ]
    for w, sm in doc['summary'].items():
        chosen = ' (chosen)' if float(w) == float(doc['chosen_weight']) else ''
        out.append(
            f'| {float(w):g}{chosen} | {f(sm["train.dyn_rmse"])} | {f(sm["held_out.dyn_rmse"])} | '
            f'{f(sm["train.static_rmse"])} | {f(sm["held_out.static_rmse"])} | '
            f'{sm["held_out.criterion"]:.5f} | {sm["held_out_de.criterion"]:.5f} |'
        )
    out += [
        '',
        '| parameter set | dynamic RMSE (pooled / worst release) | static RMSE Set A θ1 / θ2 | '
        'static RMSE Set B θ1 / θ2 (validation) |',
        '|---|---|---|---|',
    ]
    for name, sc in doc['scores_all'].items():
        a = sc.get('static_rmse_joint') or [float('nan')] * 2
        b = (doc['validation_sets'].get(name) or [{}])[0].get('static_rmse_joint') or [
            float('nan')
        ] * 2
        out.append(
            f'| {name} | {f(sc["dyn_rmse"])} / {f(sc["dyn_rmse_max"])} | {f(a[0])} / {f(a[1])} | '
            f'{f(b[0])} / {f(b[1])} |'
        )
    return '\n'.join(out) + '\n'


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog='python -m equimus_identification.crossval',
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument('tocenter')
    ap.add_argument('static', nargs='+', help='Set A (fitting), then validation-only sets')
    ap.add_argument('--folds', type=int, default=3)
    ap.add_argument('--weights', default='0,1', help='static weights to compare')
    ap.add_argument('--params', default='paper+valve')
    ap.add_argument('--maxiter', type=int, default=25)
    ap.add_argument('--popsize', type=int, default=3)
    ap.add_argument('--horizon', type=float, default=0.3)
    ap.add_argument('--refine-maxfev', type=int, default=300)
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--workers', type=int, default=None)
    ap.add_argument('--compare', nargs='*', default=[], help='more params.yaml files to score')
    ap.add_argument('--out', default='cv')
    a = ap.parse_args(argv)
    from equimus_description.leg import load_leg

    from .evaluate import load_params
    from .options import OptionError, parse_params
    from .parallel import Mapper
    from .report import write_params_yaml

    try:
        names = parse_params(a.params)
    except OptionError as exc:
        print(f'crossval: {exc}', file=sys.stderr)
        return 2
    weights = [float(w) for w in a.weights.split(',')]
    try:
        rel = data.load_tocenter(a.tocenter)
        sets = [data.load_static_csv(p) for p in a.static]
    except data.DataError as exc:
        print(f'crossval: {exc}', file=sys.stderr)
        return 2
    holds = data.static_experiments(sets[0])
    if len(holds) != len(rel):
        print('crossval: Set A must list the same pressure pairs as the releases', file=sys.stderr)
        return 2
    valid = [data.static_experiments(s) for s in sets[1:]]
    leg = load_leg(parameter_set='table_v_dynamic')
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    folds = [[i for i in range(len(rel)) if i % a.folds == f] for f in range(a.folds)]

    def part(idx):
        return [rel[i] for i in idx] + [holds[i] for i in idx]

    rows: list[dict[str, Any]] = []
    t_start = time.monotonic()
    with Mapper('process', a.workers) as mapper:
        for w in weights:
            for f, test in enumerate(folds):
                train = [i for i in range(len(rel)) if i not in test]
                t0 = time.monotonic()
                r = fit_one(part(train), leg, names, w, a, mapper)
                fl = load_leg(parameter_set='table_v_dynamic', overrides=r.parameters())
                xx = [D.leg_value(fl, n) for n in names]
                row: dict[str, Any] = {
                    'weight': w,
                    'fold': f,
                    'train': score(part(train), fl, names, xx),
                    'held_out': score(part(test), fl, names, xx),
                    'held_out_de': score(
                        part(test),
                        load_leg(
                            parameter_set='table_v_dynamic',
                            overrides=dict(zip(names, map(float, r.x_de), strict=True)),
                        ),
                        names,
                        r.x_de,
                    ),
                    'wall_s': time.monotonic() - t0,
                }
                rows.append(row)
                print(
                    f'w={w:g} fold {f}: held-out dyn {row["held_out"]["dyn_rmse"]:.4f} '
                    f'static {row["held_out"]["static_rmse"]:.4f} rad '
                    f'(train {row["train"]["dyn_rmse"]:.4f} / {row["train"]["static_rmse"]:.4f}), '
                    f'{row["wall_s"]:.0f} s',
                    flush=True,
                )
                (out / 'cv.json').write_text(json.dumps(rows, indent=1))
        summary = {}
        for w in weights:
            rw = [r for r in rows if r['weight'] == w]
            summary[w] = {
                k: float(np.mean([r[part_][key] for r in rw]))
                for part_ in ('train', 'held_out', 'held_out_de')
                for key in ('dyn_rmse', 'static_rmse', 'criterion')
                for k in [f'{part_}.{key}']
            }
        best = min(weights, key=lambda w: summary[w]['held_out.criterion'])
        print(f'chosen static weight {best:g}; final fit on all pressure pairs ...', flush=True)
        t0 = time.monotonic()
        r = fit_one(rel + holds, leg, names, best, a, mapper)
        final_wall = time.monotonic() - t0
    from .options import portable_path  # no machine's absolute path in the recorded command

    command = 'python -m equimus_identification.crossval ' + ' '.join(
        shlex.quote(portable_path(x)) for x in (argv if argv is not None else sys.argv[1:])
    )
    final = load_leg(parameter_set='table_v_dynamic', overrides=r.parameters())
    ev = D.Evaluator(rel + holds, names, leg=final, loss='shooting', static_weight=best)
    ident = D.identifiability(ev, r.x)
    all_scores = {'ours (final, joint)': score(rel + holds, final, names, r.x)}
    sets_for_refs = {
        name: load_leg(parameter_set=ps, overrides=ov) for name, (ps, ov) in REFERENCES.items()
    }
    for path in a.compare:
        sets_for_refs[f'{path}'] = load_params(path)
    for name, lg in sets_for_refs.items():
        all_scores[name] = score(rel + holds, lg, names, [D.leg_value(lg, n) for n in names])
    valid_scores = {
        name: [score(v, lg, names, [D.leg_value(lg, n) for n in names]) for v in valid]
        for name, lg in {'ours (final, joint)': final, **sets_for_refs}.items()
    }
    info = {
        'command': command,
        'inputs': [pathlib.Path(p).name for p in [a.tocenter, *a.static]],
        'start_parameter_set': 'table_v_dynamic',
        'static_weight': best,
        'cv_summary': {str(w): s for w, s in summary.items()},
        'relative_std_error': ident['relative_std_error'],
        'wall_s_total': time.monotonic() - t_start,
        'wall_s_final': final_wall,
    }
    write_params_yaml(out / 'final' / 'params.yaml', r.parameters(), info)
    (out / 'cv.json').write_text(
        json.dumps(
            {
                'folds': rows,
                'summary': {str(w): s for w, s in summary.items()},
                'chosen_weight': best,
                'scores_all': all_scores,
                'validation_sets': {k: v for k, v in valid_scores.items()},
                'identifiability': ident,
                'final_parameters': r.parameters(),
            },
            indent=1,
        )
    )
    md = report_markdown(json.loads((out / 'cv.json').read_text()))
    (out / 'cv.md').write_text(md)
    print(md)
    return 0


if __name__ == '__main__':
    sys.exit(main())
