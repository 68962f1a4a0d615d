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

from .options import OptionError, parse_bounds, parse_params, portable_path


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
        '--tocenter',
        choices=('segments', 'releases'),
        default='segments',
        help='ToCenter files: every sample of every segment (fill, hold, release; default) or '
        "the authors' prepared releases (--groups, --duration)",
    )
    p.add_argument(
        '--groups',
        default='effective',
        help='ToCenter groups with --tocenter releases: effective (13) or all (36)',
    )
    p.add_argument('--duration', type=float, default=4.0, help='seconds per experiment (default 4)')
    p.add_argument(
        '--bags',
        choices=('steps', 'whole'),
        default='steps',
        help="cut bags at command steps (default) or keep each whole ('whole': for ramped "
        'excitation from equimus excite; use with --loss shooting)',
    )
    p.add_argument(
        '--params',
        default='paper',
        help='free parameters: presets joined with + (paper: Table V ten; lag or valve: the '
        "valve's one time constant; chamber: dead time, fill and vent time constants; "
        'chamber-per-valve: the same for each valve; rate: the fill rate limit; regulator: '
        "each valve's slack, integral gain and leak; friction; "
        'armature; stop: the knee stop; static) and/or names, e.g. paper+chamber+friction or '
        'paper,valve.dead_time',
    )
    p.add_argument(
        '--bound',
        action='append',
        default=[],
        metavar='NAME=LO:HI',
        help='search range of a parameter (repeatable), e.g. actuators.maa.c=0.5:200',
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
    p.add_argument(
        '--method',
        choices=('search', 'gradient'),
        default='search',
        help='search: differential evolution, then a local refinement (default); gradient: '
        'trust-region Gauss-Newton from the start set on the same residuals, one residual '
        'Jacobian per iteration (--jacobian, --iterations; needs --sign-weight 0)',
    )
    p.add_argument(
        '--jacobian',
        choices=('fd', 'mjx', 'auto'),
        default='fd',
        help='--method gradient: fd = finite differences through mujoco.rollout (default; no '
        'extra), mjx = exact forward-mode derivatives through MuJoCo XLA (the mjx extra; slower '
        'on a CPU, docs/identification.md), auto = mjx where jax has a GPU, else fd',
    )
    p.add_argument(
        '--iterations',
        type=int,
        default=20,
        help='--method gradient: at most this many Jacobians (Gauss-Newton iterations)',
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
    p.add_argument(
        '--scheduler',
        '--address',
        dest='address',
        default=None,
        help='Dask scheduler for --mapper dask (tcp://host:8786; default: a LocalCluster of '
        '--workers processes on this machine)',
    )
    p.add_argument('--seed', type=int, default=0)
    p.add_argument(
        '--checkpoint', default=None, help='DE checkpoint (default: <out>/checkpoint.pkl)'
    )
    p.add_argument('--fresh', action='store_true', help='ignore an existing checkpoint')
    p.add_argument('--static-method', default='pressure', choices=('pressure', 'torque'))
    p.add_argument(
        '--static-weight',
        type=float,
        default=1.0,
        help='joint fit: with static CSVs and dynamic data, the first static set is held in the '
        'simulation and its rest-angle MSE enters the dynamic loss with this weight '
        '(0: dynamic data only; the static regression is reported either way)',
    )
    p.add_argument(
        '--static-start',
        choices=('rest', 'measured'),
        default='rest',
        help='joint fit: each static pair filled from the vented rest pose (default; what the '
        'ToCenter session did, and what dry friction needs) or held from the measured pose',
    )
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


def fit_start(ev, names, x_before) -> np.ndarray:
    """Where the fit starts: the start set's values, except a parameter that sits exactly on a
    bound there and has a neutral value (no dead time, no friction): a least-squares start at
    a kink or bound does not move, so it starts from heldout.START instead."""
    from equimus_identification.heldout import START

    x0 = np.array(x_before, float)
    for i, n in enumerate(names):
        if n in START and (x0[i] <= ev.lower[i] or x0[i] >= ev.upper[i]):
            x0[i] = np.clip(START[n], ev.lower[i], ev.upper[i])
    return x0


def default_dt(exps) -> float:
    """The authors' 0.005 s when every experiment's sample period is a multiple of it (their
    100 Hz CSVs), else the simulation node's 1/600 s (five steps per 120 Hz mocap frame)."""

    def fits(step):
        return all(abs(e.dt / step - round(e.dt / step)) < 1e-6 for e in exps)

    return 0.005 if fits(0.005) else 1.0 / 600.0


def run_dynamic(exps, leg, a, out: pathlib.Path, log, holds=()) -> dict:
    from equimus_identification import dynamic as D
    from equimus_identification.parallel import Mapper

    exps = list(exps) + list(holds)

    names = parse_params(a.params)
    dt = a.dt or default_dt(exps)
    refine = {'auto': 'lm' if a.loss == 'shooting' else 'nelder-mead', 'none': ''}.get(
        a.refine, a.refine
    )
    de_loss = 'shooting' if a.loss in ('shooting', 'both') else 'whole'
    bounds = parse_bounds(a.bound)
    ev = D.Evaluator(
        exps,
        names,
        leg=leg,
        loss=de_loss,
        horizon=a.horizon,
        dt=dt,
        sign_weight=a.sign_weight if de_loss == 'whole' else 0.0,
        aggregate=a.aggregate if de_loss == 'whole' else 'mean',
        static_weight=a.static_weight,
        bounds=bounds,
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
            static_weight=a.static_weight,
            bounds=bounds,
        )
        if a.loss == 'both'
        else None
    )
    x_before = np.clip([D.leg_value(leg, n) for n in names], ev.lower, ev.upper)
    ck = pathlib.Path(a.checkpoint) if a.checkpoint else out / 'checkpoint.pkl'
    if a.fresh and ck.exists():
        ck.unlink()
    budget = (
        f'≤ {a.iterations} Gauss-Newton iterations ({a.jacobian} Jacobians)'
        if a.method == 'gradient'
        else f'population {a.popsize * len(names)}, ≤ {a.maxiter} generations'
    )
    log(
        f'dynamic fit: {len(exps)} experiments, {len(ev.rollouts)} rollouts, '
        f'{ev.steps_per_eval} steps per candidate, {len(names)} parameters, '
        f'{budget}, loss {a.loss}'
    )
    if a.method == 'gradient':
        from equimus_identification import gradient as G

        with Mapper(a.mapper, a.workers, a.address) as mapper:
            g = G.fit_gradient(
                ev,
                fit_start(ev, names, x_before),
                jacobian=a.jacobian,
                iterations=a.iterations,
                mapper=mapper,
                log=log,
            )
        return finish_dynamic(exps, leg, a, ev, names, x_before, dt, g, log)
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
            x0=fit_start(ev, names, x_before),
            log=log,
            progress=True,
        )
    return finish_dynamic(exps, leg, a, ev, names, x_before, dt, r, log)


def finish_dynamic(exps, leg, a, ev, names, x_before, dt, r, log) -> dict:
    """Figures before and after, and the uncertainty at the optimum, of either method's result."""
    from equimus_identification import dynamic as D

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
    at_bounds = D.at_bounds(ev, r.x)
    for n in at_bounds:
        log(
            f'  {n} ENDS ON A BOUND: the data push it beyond the search range; widen the range '
            '(--bound) if that is physical, or fix the parameter'
        )
    return {
        'at_bounds': at_bounds,
        'names': names,
        'loss': ev.loss_kind if a.method == 'gradient' else a.loss,
        'parameters': r.parameters(),
        'before': dict(zip(names, map(float, x_before), strict=True)),
        'method': a.method,
        'generations': getattr(r, 'generations', 0),
        'jacobians': getattr(r, 'jacobians', 0),
        'jacobian': getattr(r, 'jacobian', ''),
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
    from equimus_identification.gradient import MethodError
    from equimus_record.bag import BagError

    def log(msg):
        print(msg, flush=True)

    try:  # the options first: a typo must not wait for the data to load
        parse_params(a.params)
        parse_bounds(a.bound)
    except OptionError as exc:
        print(f'equimus identify: {exc}', file=sys.stderr)
        return 2
    try:
        leg = load_leg(a.leg, parameter_set=a.parameter_set or None, overrides=a.start)
        inputs = data.load_any(
            a.inputs, groups=a.groups, duration=a.duration, bags=a.bags, tocenter=a.tocenter
        )
    except (data.DataError, LegDescriptionError, FileNotFoundError, BagError) as exc:
        print(f'equimus identify: {exc}', file=sys.stderr)
        return 2
    if not inputs['static'] and not inputs['dynamic']:
        print('equimus identify: nothing to identify from', file=sys.stderr)
        return 2
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    command = 'equimus identify ' + ' '.join(
        shlex.quote(portable_path(x)) for x in (argv if argv is not None else sys.argv[1:])
    )
    static = run_static(inputs['static'], leg, a.static_method, log) if inputs['static'] else None
    dynamic = None
    try:
        if inputs['dynamic']:
            holds = (
                data.static_experiments(inputs['static'][0], start=a.static_start)
                if inputs['static'] and a.static_weight > 0
                else ()
            )
            if holds:
                log(
                    f'joint fit: {len(holds)} static holds of {inputs["static"][0].name}, '
                    f'static weight {a.static_weight:g}'
                )
            dynamic = run_dynamic(inputs['dynamic'], leg, a, out, log, holds)
    except MethodError as exc:
        print(f'equimus identify: {exc}', file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        log('stopped')
        return 130
    params = dict(static['parameters']) if static and not dynamic else {}
    if dynamic:
        params.update(dynamic['parameters'])
    info = {
        'command': command,
        'inputs': [portable_path(str(x)) for x in a.inputs],
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
            at_bounds=dynamic['at_bounds'],
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
        unc = report.plot_uncertainty(dynamic['identifiability'], out / 'uncertainty.png')
        log(f'uncertainty: {unc}')
    log(f'parameters: {yml}\nreport: {out / "report.md"}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
