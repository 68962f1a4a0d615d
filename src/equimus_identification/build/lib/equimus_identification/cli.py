"""`equimus identify <bag or csv>... --out fit/`: fit the leg model to recordings.

Static CSVs (StaticPoint_*.csv) give the static regression of (k, S); bags and ToCenter CSVs give
step experiments for the dynamic fit (differential evolution + local refinement, candidates
evaluated through a process pool). Writes into --out:
  params.yaml   leg_description overrides (load_leg(overrides=...); sim node parameter
                parameter_overrides, launch argument leg_overrides)
  report.md     parameters before/after, per-experiment RMSE and MaxAE per joint
  trajectories.png  measured vs simulated (before and after)
  checkpoint.pkl    DE state after every generation (rerun the same command to resume)
"""

from __future__ import annotations

import argparse
import pathlib
import shlex
import sys

import numpy as np

PRESETS = {
    'paper': None,  # Table V's ten: parse_params takes them from dynamic.PAPER_PARAMS
    'paper+valve': None,
    'static': ('actuators.maa.k', 'actuators.baa.k', 'actuators.maa.area', 'actuators.baa.area'),
}
ALIASES = {
    'valve.tau': 'valve.time_constant',
    'tau': 'valve.time_constant',
    'hip.damping': 'joints.hip.damping',
    'knee.damping': 'joints.knee.damping',
}


def parse_params(spec: str) -> list[str]:
    from equimus_identification.dynamic import BOUNDS, PAPER_PARAMS

    if spec == 'paper':
        return list(PAPER_PARAMS)
    if spec == 'paper+valve':
        return list(PAPER_PARAMS) + ['valve.time_constant']
    preset = PRESETS.get(spec)  # 'paper' and 'paper+valve' (None here) are handled above
    if preset is not None:
        return list(preset)
    out = []
    for s in spec.split(','):
        s = s.strip()
        key = ALIASES.get(s, s)
        if key not in BOUNDS and f'actuators.{key}' in BOUNDS:
            key = f'actuators.{key}'
        if key not in BOUNDS:
            raise SystemExit(
                f'equimus identify: unknown parameter {s!r}; use a preset '
                f'(paper, paper+valve, static) or names from {sorted(BOUNDS)}'
            )
        out.append(key)
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='equimus identify',
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        'inputs', nargs='+', help='rosbag2 folders, .mcap files, StaticPoint_*.csv, ToCenter_*.csv'
    )
    p.add_argument('--out', default='fit', help='output folder (default: fit/)')
    p.add_argument('--leg', default=None, help='leg YAML (default: config/leg.yaml)')
    p.add_argument(
        '--parameter-set',
        default='table_v_dynamic',
        help="starting parameter set in the leg YAML ('' for the file's values)",
    )
    p.add_argument(
        '--start',
        default=None,
        help='override YAML applied after the parameter set (e.g. a previous params.yaml): '
        'the fit starts from it and the report compares against it',
    )
    p.add_argument(
        '--groups', default='effective', help='ToCenter groups: effective (13) or all (36)'
    )
    p.add_argument('--duration', type=float, default=4.0, help='seconds per experiment (default 4)')
    p.add_argument(
        '--params',
        default='paper',
        help='free parameters: paper (Table V ten), paper+valve, static, or a comma list',
    )
    p.add_argument(
        '--loss',
        choices=('whole', 'shooting', 'both'),
        default='both',
        help="DE loss; 'both' = DE on multiple shooting, refinement on the whole trajectory",
    )
    p.add_argument(
        '--aggregate',
        choices=('mean', 'max'),
        default='mean',
        help='whole-trajectory loss over experiments: mean, or max (worst experiment)',
    )
    p.add_argument(
        '--horizon', type=float, default=0.3, help='multiple-shooting segment length (s)'
    )
    p.add_argument(
        '--sign-weight',
        type=float,
        default=0.0,
        help="λ of the paper's MSE(sign θ̇) term in the whole-trajectory loss (paper: 100)",
    )
    p.add_argument(
        '--dt',
        type=float,
        default=None,
        help="simulation step (s); default: the authors' 0.005 for their CSVs, the simulation "
        "node's 1/600 for 120 Hz recordings",
    )
    p.add_argument('--popsize', type=int, default=3, help='DE population = popsize × #parameters')
    p.add_argument('--maxiter', type=int, default=60, help='DE generations')
    p.add_argument(
        '--refine',
        default='auto',
        choices=('auto', 'lm', 'nelder-mead', 'lbfgsb', 'none'),
        help='local refinement; auto = lm (least squares) for --loss shooting, else nelder-mead',
    )
    p.add_argument('--refine-maxfev', type=int, default=400)
    p.add_argument(
        '--workers', type=int, default=None, help='parallel evaluators (default: all cores)'
    )
    p.add_argument('--mapper', default='process', choices=('process', 'serial', 'dask'))
    p.add_argument('--address', default=None, help='dask scheduler address for --mapper dask')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument(
        '--checkpoint', default=None, help='DE checkpoint (default: <out>/checkpoint.pkl)'
    )
    p.add_argument('--fresh', action='store_true', help='ignore an existing checkpoint')
    p.add_argument('--static-method', default='pressure', choices=('pressure', 'torque'))
    p.add_argument('--no-plots', action='store_true')
    return p


def run_static(sets, leg, method, log) -> dict:
    from equimus_identification import static as S

    base = S.static_params_from_leg(leg)
    base = S.published_params(base)  # l0 fixed at the static Table V values as in the paper
    fit_set = sets[0]
    f = S.fit(fit_set, base, method=method)
    angles = {s.name or f'set{i}': S.angle_errors(s, f.params) for i, s in enumerate(sets)}
    log(
        f'static fit on {fit_set.name}: k = {f.k.round(2)}, S = {f.S}, '
        f'pressure RMSE {f.pressure_rmse_kpa.round(3)} kPa'
    )
    for name, e in angles.items():
        log(f'  {name}: angle RMSE {e["rmse"].round(4)} rad, MaxAE {e["maxae"].round(4)} rad')
    return {
        'method': method,
        'l0': list(map(float, f.l0)),
        'fit_set': fit_set.name,
        'parameters': f.overrides(),
        'pressure_rmse': f.pressure_rmse_kpa.tolist(),
        'angles': angles,
    }


def default_dt(exps) -> float:
    """The authors' 0.005 s when every experiment's sample period is a multiple of it (their
    100 Hz CSVs), else the simulation node's 1/600 s (five steps per 120 Hz mocap frame)."""

    def fits(step):
        return all(abs(e.dt / step - round(e.dt / step)) < 1e-6 for e in exps)

    return 0.005 if fits(0.005) else 1.0 / 600.0


def run_dynamic(exps, leg, a, out: pathlib.Path, log) -> dict:
    from equimus_identification import dynamic as D
    from equimus_identification.parallel import Mapper

    names = parse_params(a.params)
    dt = a.dt or default_dt(exps)
    refine = {'auto': 'lm' if a.loss == 'shooting' else 'nelder-mead', 'none': ''}.get(
        a.refine, a.refine
    )
    de_loss = 'shooting' if a.loss in ('shooting', 'both') else 'whole'
    ev = D.Evaluator(
        exps,
        names,
        leg=leg,
        loss=de_loss,
        horizon=a.horizon,
        dt=dt,
        sign_weight=a.sign_weight if de_loss == 'whole' else 0.0,
        aggregate=a.aggregate if de_loss == 'whole' else 'mean',
    )
    ref = (
        D.Evaluator(
            exps,
            names,
            leg=leg,
            loss='whole',
            dt=dt,
            sign_weight=a.sign_weight,
            aggregate=a.aggregate,
        )
        if a.loss == 'both'
        else None
    )
    x_before = np.array([D.leg_value(leg, n) for n in names])
    ck = pathlib.Path(a.checkpoint) if a.checkpoint else out / 'checkpoint.pkl'
    if a.fresh and ck.exists():
        ck.unlink()
    log(
        f'dynamic fit: {len(exps)} experiments, {len(ev.rollouts)} rollouts, '
        f'{ev.steps_per_eval} steps per candidate, {len(names)} parameters, '
        f'population {a.popsize * len(names)}, ≤ {a.maxiter} generations, loss {a.loss}'
    )
    with Mapper(a.mapper, a.workers, a.address) as mapper:
        r = D.fit(
            ev,
            popsize=a.popsize,
            maxiter=a.maxiter,
            workers=mapper,
            seed=a.seed,
            checkpoint=str(ck),
            refine=refine,
            refine_maxfev=a.refine_maxfev,
            refine_evaluator=ref,
            x0=x_before,
            log=log,
        )
    before = D.metrics(exps, x_before, names, leg=leg, dt=dt)
    after = D.metrics(exps, r.x, names, leg=leg, dt=dt)
    log(f'identifiability at the fit ({len(names) + 1} simulations) ...')
    ident = D.identifiability(ev, r.x)
    ident['threshold'] = D.DETERMINED_RSE
    for n, e in ident['relative_std_error'].items():
        log(
            f'  {n:28s} relative std. error {100 * e:7.2f} %'
            + ('' if e <= D.DETERMINED_RSE else '  NOT determined by these data')
        )
    return {
        'names': names,
        'loss': a.loss,
        'parameters': r.parameters(),
        'before': dict(zip(names, map(float, x_before), strict=True)),
        'generations': r.generations,
        'evaluations': r.evaluations,
        'wall_s': r.wall_s,
        'interrupted': r.interrupted,
        'metrics_before': before,
        'metrics_after': after,
        'result': r,
        'identifiability': ident,
        'dt': dt,
    }


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    from equimus_description.leg import LegDescriptionError, load_leg
    from equimus_identification import data, report

    def log(msg):
        print(msg, flush=True)

    try:
        leg = load_leg(a.leg, parameter_set=a.parameter_set or None, overrides=a.start)
        inputs = data.load_any(a.inputs, groups=a.groups, duration=a.duration)
    except (data.DataError, LegDescriptionError, FileNotFoundError) as exc:
        print(f'equimus identify: {exc}', file=sys.stderr)
        return 2
    if not inputs['static'] and not inputs['dynamic']:
        print('equimus identify: nothing to identify from', file=sys.stderr)
        return 2
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    command = 'equimus identify ' + ' '.join(
        shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:])
    )
    static = run_static(inputs['static'], leg, a.static_method, log) if inputs['static'] else None
    dynamic = None
    try:
        if inputs['dynamic']:
            dynamic = run_dynamic(inputs['dynamic'], leg, a, out, log)
    except KeyboardInterrupt:
        log('stopped')
        return 130
    params = dict(static['parameters']) if static and not dynamic else {}
    if dynamic:
        params.update(dynamic['parameters'])
    info = {
        'command': command,
        'inputs': [str(x) for x in a.inputs],
        'start_parameter_set': a.parameter_set,
    }
    if dynamic:
        s = report.summary(dynamic['metrics_after'])
        ident = dynamic['identifiability']
        info.update(
            rmse_mean_rad=s['rmse_mean'],
            rmse_max_rad=s['rmse_max'],
            interrupted=bool(dynamic['interrupted']),
            timestep_s=dynamic['dt'],
            relative_std_error=ident['relative_std_error'],
            not_determined=[
                n for n, e in ident['relative_std_error'].items() if e > ident['threshold']
            ],
        )
    if static:
        info['static'] = {
            'parameters': static['parameters'],
            'pressure_rmse_kpa': static['pressure_rmse'],
        }
    yml = report.write_params_yaml(out / 'params.yaml', params, info)
    md = report.markdown('EquiMus identification report', static, dynamic, command)
    (out / 'report.md').write_text(md)
    print(md)
    if dynamic and not a.no_plots:
        png = report.plot_experiments(
            dynamic['metrics_before'],
            dynamic['metrics_after'],
            out / 'trajectories.png',
            title=command[:120],
        )
        log(f'plot: {png}')
    log(f'parameters: {yml}\nreport: {out / "report.md"}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
