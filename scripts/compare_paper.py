#!/usr/bin/env python3
"""Print this project's identification figures next to the EquiMus paper's (Tables IV-VI).

    python scripts/compare_paper.py [--fit fit/ --fit config/leg_fit.yaml]

Static: the regression runs here (a second or two). Dynamic: per-experiment whole-trajectory RMSE
on the 13 effective ToCenter groups for the paper's Table V parameters in our model, and for the
fitted parameters in each --fit; then the static equilibria (Set A, Set B) held in the MuJoCo model
for every parameter set (filled from the vented rest, as the ToCenter session reached them).
"""

import argparse
import pathlib
import sys

import numpy as np

SHARED = pathlib.Path(__file__).resolve().parents[1] / '..' / 'shared'
DATA = (SHARED / 'data/equimus/physical').resolve()


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        '--fit',
        action='append',
        default=[],
        help='folder with params.yaml from equimus identify, or a parameter file (repeatable)',
    )
    ap.add_argument('--data', default=str(DATA), help='folder holding static/ and dynamic/')
    a = ap.parse_args(argv)
    from equimus_description.leg import load_leg
    from equimus_description.statics import StaticParams
    from equimus_identification import data
    from equimus_identification import dynamic as D
    from equimus_identification import static as S
    from equimus_identification.report import PAPER

    root = pathlib.Path(a.data)
    set_a = data.load_static_csv(root / 'static/StaticPoint_effective_13.csv')
    set_b = data.load_static_csv(root / 'static/StaticPoint_all_36.csv')
    base = S.published_params(StaticParams())
    f = S.fit(set_a, base, method='pressure')
    ea, eb = S.angle_errors(set_a, f.params), S.angle_errors(set_b, f.params)
    pub = S.published_params(StaticParams(), root / 'static/published_static_sysid_parameters.csv')
    pub_p = np.sqrt(np.mean(S.pressure_residuals(set_a, pub) ** 2, axis=0))
    print('STATIC (Set A regression, l0 fixed at 0.1642 / 0.2579 m)')
    print(f'{"quantity":34s} {"paper":>16s} {"ours":>16s}')
    rows = [
        ('k1, k2 (N/m)', (203.95, 105.07), f.k),
        ('S1, S2 (1e-4 m²)', (4.11, 3.24), f.S * 1e4),
        ('pressure RMSE P1, P2 (kPa)', PAPER['static_pressure_rmse_kpa'], f.pressure_rmse_kpa),
        ('Set A RMSE θ1, θ2 (rad)', PAPER['static_set_a_rmse'], ea['rmse']),
        ('Set A MaxAE θ1, θ2 (rad)', PAPER['static_set_a_maxae'], ea['maxae']),
        ('Set B RMSE θ1, θ2 (rad)', PAPER['static_set_b_rmse'], eb['rmse']),
        ('Set B MaxAE θ1, θ2 (rad)', PAPER['static_set_b_maxae'], eb['maxae']),
    ]
    for name, p, o in rows:
        print(f'{name:34s} {p[0]:7.4g} / {p[1]:<7.4g} {o[0]:7.4g} / {o[1]:<7.4g}')
    print(
        f"(the paper's own k, S give pressure RMSE {pub_p[0]:.2f} / {pub_p[1]:.2f} kPa "
        'in our static model)'
    )

    exps = data.load_tocenter(next((root / 'dynamic').glob('ToCenter_*.csv')))
    names = list(D.BOUNDS)  # every model parameter from each set (valve model, friction, stop)
    cols = [
        ('paper Table V (dynamic) in our model', load_leg(parameter_set='table_v_dynamic')),
        ('paper Table V (static) in our model', load_leg(parameter_set='table_v_static')),
    ]
    for fit in a.fit:
        path = pathlib.Path(fit)
        path = path / 'params.yaml' if path.is_dir() else path
        from equimus_identification.evaluate import load_params

        fitted = load_params(str(path))
        cols.append((f'fitted ({fit})', fitted))
    print(
        '\nDYNAMIC (13 effective ToCenter groups, 4 s after the release, '
        'whole-trajectory RMSE, rad)'
    )
    print(
        f'paper: RMSE under {PAPER["dynamic_rmse_max"]} for all experiments '
        '(Table VI EquiMus 0.032522)'
    )
    res = []
    for label, leg in cols:
        x = [D.leg_value(leg, n) for n in names]
        res.append((label, D.metrics(exps, x, names, leg=leg)))
    print(f'{"experiment":12s}' + ''.join(f'{lbl[:30]:>32s}' for lbl, _ in res))
    for i, e in enumerate(exps):
        print(f'{e.name:12s}' + ''.join(f'{m[i]["rmse_all"]:32.4f}' for _, m in res))
    for stat, fn in (('mean', np.mean), ('max', np.max)):
        print(f'{stat:12s}' + ''.join(f'{fn([r["rmse_all"] for r in m]):32.4f}' for _, m in res))
    print(
        "\nSTATIC IN THE SIMULATION (each pressure pair filled from the set's vented rest pose "
        'in MuJoCo and held 5 s, as the ToCenter session reached it; rest-angle RMSE θ1 / θ2, '
        'rad; Set B is the ToCenter holds, so a fit to ToCenter has seen it)'
    )
    print(f'{"set":12s}' + ''.join(f'{lbl[:30]:>32s}' for lbl, _ in cols))
    for s_ in (set_a, set_b):
        row = []
        for _, leg in cols:
            x = [D.leg_value(leg, n) for n in names]
            held = data.static_experiments(s_, data.HOLD_S, start='rest')
            m = D.metrics(held, x, names, leg=leg)
            r = np.sqrt(np.mean([mm['rmse'] ** 2 for mm in m], axis=0))
            row.append(f'{r[0]:.4f} / {r[1]:.4f}')
        print(f'{s_.name.replace("StaticPoint_", "")[:12]:12s}' + ''.join(f'{v:>32s}' for v in row))
    return 0


if __name__ == '__main__':
    sys.exit(main())
