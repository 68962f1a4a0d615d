"""Choose the leg model by held-out error: leave-one-pair-out over a ToCenter session.

    python -m equimus_identification.heldout TOCENTER.csv STATIC.csv --out heldout/

Data: every sample of every segment of the ToCenter file (each of its 36 pressure pairs: a fill
from the vented rest, a 5 s hold, a 5 s release) and the static set's pairs, each filled from the
vented rest (data.static_experiments(start='rest')); the static points of a session are its
holds' means, so they carry little new information (StaticPoint_all_36 IS the ToCenter session's
hold phase) but keep the loss honest about rest angles.

Candidates, valve model × friction × loss (all also fit Table V's ten and the knee stop):
  valve     lag       the authors' first-order lag: valve.time_constant
            chamber   dead time, fill and vent time constants per valve (equimus_description.valve)
            regulator chamber-per-valve and each valve's regulator (slack, integral gain and leak)
  friction  none      frictionless hinges
            friction  hinge dry friction (frictionloss) and armature
  loss      whole     every segment simulated from its first measured state, every sample
            shooting  windows of --horizon s, each started from the measured state (seeds/003),
                      so integration drift does not dominate the loss

For each candidate:
1. all data: least squares (dynamic.fit, refinement 'lm', no evolution) from the start set
   (--start: the authors' table_v_dynamic values or a fitted file, plus START for the
   parameters it leaves at the description's defaults), at
   most --iterations Jacobians;
2. in-sample figures: each segment replayed from its first measured state, the whole file
   replayed once from its first state (the paper's continuous protocol), the static pairs;
3. leave-one-pair-out: for each pair, the fit without that pair's segment and static point (warm
   start at the all-data fit, at most --fold-iterations Jacobians), scored on the held-out
   segment replayed from its first measured state and on its static point.
The chosen candidate has the lowest held-out criterion: the mean over folds of the held-out
segment's mean squared angle error (both joints, rad²). Every fit runs at --dt (0.01 s: within
0.001 rad of 0.005 s on these data); every figure is a replay at the authors' 0.005 s.

Writes heldout.md (the table), heldout.json, one params.yaml per candidate (its all-data fit, with
the command and its figures) and chosen.yaml (the winner's). Results are cached per candidate and
fold in <out>/cache/: the same command resumes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import shlex
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from equimus_description.valve import ACTUATORS

from . import data
from . import dynamic as D

EVAL_DT = 0.005  # every figure: a replay at the authors' identification step
STATIC_HOLD_S = 3.0  # a static pair held from rest (filled within ~1.5 s, scored on its last 0.5 s)
# Values for the parameters the start set does not have (neutral friction would leave the
# least squares at a kink: frictionloss has no gradient at 0).
START = {
    'valve.dead_time': 0.05,
    'valve.fill_time_constant': 0.2171,
    'valve.vent_time_constant': 0.2171,
    'valve.fill_time_constant.maa': 0.2171,
    'valve.fill_time_constant.baa': 0.2171,
    'valve.vent_time_constant.maa': 0.2171,
    'valve.vent_time_constant.baa': 0.2171,
    'valve.fill_rate': 200.0,
    **{f'valve.slack.{a}': 5.0 for a in ACTUATORS},
    **{f'valve.integral_gain.{a}': 1.0 for a in ACTUATORS},
    **{f'valve.integral_leak.{a}': 0.5 for a in ACTUATORS},
    **{f'valve.slack_rate.{a}': 60.0 for a in ACTUATORS},
    'joints.hip.frictionloss': 0.01,
    'joints.knee.frictionloss': 0.005,
    'joints.hip.armature': 0.001,
    'joints.knee.armature': 0.001,
}
VALVES = {
    'lag': ('valve.time_constant',),
    'chamber': D.VALVE_PARAMS,
    'chamber-rate': D.VALVE_PARAMS + D.RATE_PARAMS,  # and the fill rate limit
    'chamber-per-valve': D.VALVE_CHANNEL_PARAMS,  # fill and vent constants of each valve
    # and each valve's regulator: the muscle's slack, the integral's gain and leak
    'regulator': D.VALVE_CHANNEL_PARAMS + D.REGULATOR_PARAMS,
    # and the slack taken up at a least rate, whatever the setpoint
    'regulator-rate': D.VALVE_CHANNEL_PARAMS + D.REGULATOR_PARAMS + D.SLACK_RATE_PARAMS,
}
FRICTIONS = {'none': (), 'friction': D.FRICTION_PARAMS + D.ARMATURE_PARAMS}
#: the muscles' force: area S, or S(l); and damping that grows with the pressure
FORCES = {
    'constant': (),
    'stiffening': D.AREA_SLOPE_PARAMS,
    'stiffening-damped': D.AREA_SLOPE_PARAMS + D.PRESSURE_DAMPING_PARAMS,
}
LOSSES = ('whole', 'shooting')
REFERENCES = ('table_v_dynamic', 'table_v_static')
SET_B_PAIRS = [(p1, p2) for p1 in range(0, 60, 10) for p2 in range(0, 60, 10)]  # all 36


@dataclass(frozen=True)
class Candidate:
    valve: str
    friction: str
    loss: str
    fixed: tuple[tuple[str, float], ...] = ()  # (override key, value) held out of the fit
    force: str = 'constant'

    @property
    def name(self) -> str:
        fix = ','.join(k.split('.', 1)[1] for k, _ in self.fixed)
        force = '' if self.force == 'constant' else f'+{self.force}'
        return f'{self.valve}+{self.friction}+{self.loss}{force}' + (
            f'+fixed({fix})' if fix else ''
        )

    @property
    def params(self) -> list[str]:
        names = (
            list(D.PAPER_PARAMS)
            + list(VALVES[self.valve])
            + list(FRICTIONS[self.friction])
            + list(FORCES[self.force])
            + ['joints.knee.range.0']
        )
        held = {k for k, _ in self.fixed}
        return [n for n in names if n not in held]

    def leg(self, a: Any):
        """The start description with the fixed parameters applied."""
        leg = start_leg(a.start, a.leg)
        return leg.with_overrides(dict(self.fixed)) if self.fixed else leg


def pair_key(pair) -> str:
    return f'P{pair[0]:g}-{pair[1]:g}'


# ---------------------------------------------------------------------- data (per process)

_DATA: dict[tuple, dict] = {}


def load(tocenter: str, static: str) -> dict:
    """Segments and static pairs of the session (cached per process)."""
    key = (tocenter, static)
    if key not in _DATA:
        segments = data.load_trajectory_csv(tocenter)
        missing = [e.name for e in segments if 'pair' not in e.meta]
        if missing:
            raise data.DataError(f'{tocenter}: segments without start/end pairs: {missing[:3]}')
        holds = data.static_experiments(data.load_static_csv(static), STATIC_HOLD_S, start='rest')
        _DATA[key] = {'segments': segments, 'static': holds}
    return _DATA[key]


def start_leg(spec: str, leg_path=None):
    from .evaluate import load_params

    return load_params(spec, leg_path)


def start_values(cand: Candidate, leg, a: Any) -> np.ndarray:
    """The start of a candidate's fit: the start set's values, START's for the parameters it
    leaves at the description's defaults (a fitted file starts a richer model from its fit)."""
    from equimus_description.leg import load_leg

    default = load_leg(a.leg)
    return np.array(
        [
            START[n]
            if n in START and D.leg_value(leg, n) == D.leg_value(default, n)
            else D.leg_value(leg, n)
            for n in cand.params
        ]
    )


# ---------------------------------------------------------------------- fitting and scoring


def fit(cand: Candidate, exps, leg, x0, iterations: int, a: Any) -> D.FitResult:
    ev = D.Evaluator(
        exps,
        cand.params,
        leg=leg,
        loss=cand.loss,
        horizon=a.horizon,
        dt=a.dt,
        sign_weight=0.0,
        static_weight=a.static_weight,
        bounds=a.bounds,
    )
    return D.fit(
        ev,
        popsize=1,
        maxiter=0,
        refine='lm',
        refine_maxfev=(len(cand.params) + 1) * iterations,
        x0=np.clip(x0, ev.lower, ev.upper),
        log=lambda _msg: None,
    )


def rmse(err) -> list[float]:
    return np.sqrt(np.mean(np.square(err), axis=0)).tolist()


def score(leg, names, x, segments, static, whole_file: bool) -> dict:
    """Figures of a parameter set: each segment from its first measured state, each static pair
    from rest, and (whole_file) the whole session replayed once."""
    out: dict[str, Any] = {}
    if segments:
        m = D.metrics(segments, x, names, leg=leg, dt=EVAL_DT)
        out['segments'] = {
            pair_key(e.meta['pair']): mm['rmse'].tolist() for e, mm in zip(segments, m, strict=True)
        }
        out['phases'] = {}
        for ph in data.PHASES:
            errs = [
                mm['q_sim'][k] - mm['q'][k]
                for mm, e in zip(m, segments, strict=True)
                for k in [D.phase_masks(e).get(ph)]
                if k is not None and k.any()
            ]
            if errs:
                out['phases'][ph] = rmse(np.concatenate(errs))
    if static:
        m = D.metrics(static, x, names, leg=leg, dt=EVAL_DT)
        out['static'] = {
            pair_key(e.meta['pair']): (mm['q_rest'] - e.q[0]).tolist()
            for e, mm in zip(static, m, strict=True)
        }
    if whole_file and segments:
        mc = D.metrics([data.continuous(segments)], x, names, leg=leg, dt=EVAL_DT)[0]
        out['continuous'] = mc['rmse'].tolist()
        out['continuous_phases'] = {k: v['rmse'].tolist() for k, v in mc['phases'].items()}
    return out


def full_task(args) -> dict:
    """The all-data fit of one candidate and its in-sample figures."""
    cand, a = args
    d = load(a.tocenter, a.static)
    leg = cand.leg(a)
    x0 = start_values(cand, leg, a)
    t0 = time.monotonic()
    r = fit(cand, d['segments'] + d['static'], leg, x0, a.iterations, a)
    ev = D.Evaluator(d['segments'][:1], cand.params, leg=leg, dt=a.dt, bounds=a.bounds)
    out = {
        'params': dict(cand.fixed) | dict(zip(cand.params, map(float, r.x), strict=True)),
        'at_bounds': D.at_bounds(ev, r.x),
        'loss': float(r.loss),
        'fit_wall_s': time.monotonic() - t0,
        'evaluations': int(r.evaluations),
    }
    out['in_sample'] = score(leg, cand.params, r.x, d['segments'], d['static'], True)
    return out


def fold_task(args) -> dict:
    """One fold: the fit without `pair`, scored on the held-out pair."""
    cand, a, pair, x_all = args
    d = load(a.tocenter, a.static)
    leg = cand.leg(a)
    train = [e for e in d['segments'] + d['static'] if e.meta['pair'] != pair]
    seg = [e for e in d['segments'] if e.meta['pair'] == pair]
    sta = [e for e in d['static'] if e.meta['pair'] == pair]
    t0 = time.monotonic()
    r = fit(cand, train, leg, np.asarray(x_all, float), a.fold_iterations, a)
    out = score(leg, cand.params, r.x, seg, sta, False)
    out['params'] = r.x.tolist()
    out['fit_wall_s'] = time.monotonic() - t0
    return out


def reference_task(args) -> dict:
    """A parameter set that is not refitted: its figures are held-out figures everywhere."""
    spec, a = args
    d = load(a.tocenter, a.static)
    leg = start_leg(spec, a.leg)
    names = list(D.BOUNDS)
    x = [D.leg_value(leg, n) for n in names]
    return score(leg, names, x, d['segments'], d['static'], True)


# ---------------------------------------------------------------------- summary


def summary(res: dict) -> dict:
    """Table figures of one row (a candidate's in-sample and held-out results)."""

    def seg_stats(per: dict) -> dict:
        v = np.array(list(per.values()))
        return {'mean': v.mean(axis=0).tolist(), 'worst': v.max(axis=0).tolist()}

    def static_rmse(per: dict) -> list[float]:
        return rmse(np.array(list(per.values())))

    ins = res['in_sample']
    out = {
        'in_sample': seg_stats(ins['segments']),
        'continuous': ins['continuous'],
        'static': static_rmse(ins['static']),
        'phases': ins['phases'],
    }
    if res.get('folds'):
        folds = res['folds']
        held = {k: f['segments'][k] for k, f in folds.items()}
        out['held_out'] = seg_stats(held)
        out['held_out_static'] = static_rmse({k: f['static'][k] for k, f in folds.items()})
        out['criterion'] = float(np.mean([np.mean(np.square(v)) for v in held.values()]))
        out['worst_pair'] = max(held, key=lambda k: max(held[k]))
    return out


def markdown(doc: dict) -> str:
    """The held-out table: one row per candidate (and per reference set, not refitted)."""

    def f(v):
        return f'{v:.4f}'

    def pair(v):
        return f'{f(v[0])} / {f(v[1])}'

    def spread(st):
        return f'{pair(st["mean"])} ({f(max(st["worst"]))})'

    out = [
        '| model | in-sample per segment: mean θ1 / θ2 (worst) | whole file, continuous θ1 / θ2 '
        '| static from rest θ1 / θ2 | **held-out** per segment: mean θ1 / θ2 (worst) | '
        'held-out static θ1 / θ2 | criterion (rad²) | on a bound |',
        '|---|---|---|---|---|---|---|---|',
    ]
    for name, s in doc['summary'].items():
        row = [spread(s['in_sample']), pair(s['continuous']), pair(s['static'])]
        if name in doc['candidates']:
            chosen = ' **(chosen)**' if name == doc.get('chosen') else ''
            bounds = ', '.join(doc['candidates'][name].get('at_bounds', [])) or '–'
            if 'held_out' in s:
                row = [f'{name}{chosen}', *row, spread(s['held_out']), pair(s['held_out_static'])]
                row += [f'{s["criterion"]:.5f}', bounds]
            else:
                row = [f'{name} (in-sample only)', *row, '–', '–', '–', bounds]
        else:
            row = [f'{name} (not refitted)', *row, 'as in-sample', '–', '–', '–']
        out.append('| ' + ' | '.join(row) + ' |')
    if doc.get('chosen'):
        out += ['', table_iv(doc)]
    return '\n'.join(out) + '\n'


def table_iv(doc: dict) -> str:
    """The paper's Table IV (rest-angle RMSE and MaxAE on Set A and Set B) for the chosen model
    with every static point held out: predicted by the fit of its fold (without that pair's
    segment and static point), the leg filled from the vented rest."""
    from .report import PAPER

    folds = doc['candidates'][doc['chosen']]['folds']
    err = {k: np.asarray(f['static'][k]) for k, f in folds.items()}
    set_a = [pair_key(p) for p in data.EFFECTIVE_13]
    rows = [
        '| set | paper RMSE θ1 / θ2 | ours, held out | paper MaxAE θ1 / θ2 | ours, held out |',
        '|---|---|---|---|---|',
    ]
    for label, keys, pk in (('A', set_a, 'a'), ('B', [pair_key(p) for p in SET_B_PAIRS], 'b')):
        e = np.array([err[k] for k in keys if k in err])
        if not len(e):
            continue
        label = f'{label} ({len(e)} of {len(keys)} points held out)'
        r, m = np.sqrt(np.mean(e**2, axis=0)), np.max(np.abs(e), axis=0)
        pr: tuple = PAPER[f'static_set_{pk}_rmse']  # type: ignore[assignment]
        pm: tuple = PAPER[f'static_set_{pk}_maxae']  # type: ignore[assignment]
        rows.append(
            f'| {label} | {pr[0]:.4f} / {pr[1]:.4f} | {r[0]:.4f} / {r[1]:.4f} | '
            f'{pm[0]:.4f} / {pm[1]:.4f} | {m[0]:.4f} / {m[1]:.4f} |'
        )
    return '\n'.join(rows) + '\n'


# ---------------------------------------------------------------------- driver


def _cache(out: pathlib.Path, *parts: str) -> pathlib.Path:
    p = out / 'cache' / ('__'.join(parts).replace('/', '_') + '.json')
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


def run_all(fn, jobs: list, paths: list[pathlib.Path], workers: int, log, label) -> None:
    """fn(job) for every job whose cache file is missing, `workers` processes at a time; each
    result is written to its cache file as soon as it arrives (an interrupted run resumes)."""
    todo = [(j, p) for j, p in zip(jobs, paths, strict=True) if not p.exists()]
    t0 = time.monotonic()

    def done(k, job, path, res):
        path.write_text(json.dumps(res))
        el = time.monotonic() - t0
        left = el / k * (len(todo) - k) / 60
        log(f'{label(job, res)}; {k}/{len(todo)} done, about {left:.0f} min left')

    if workers <= 1:
        for k, (job, path) in enumerate(todo, 1):
            done(k, job, path, fn(job))
        return
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from equimus_description.workers import init_worker

    with ProcessPoolExecutor(max_workers=workers, initializer=init_worker) as pool:
        futures = {pool.submit(fn, job): (job, path) for job, path in todo}
        for k, fut in enumerate(as_completed(futures), 1):
            job, path = futures[fut]
            done(k, job, path, fut.result())


def write_params(
    path: pathlib.Path, cand: Candidate, res: dict, s: dict, info: dict, start_values: dict
) -> None:
    """A candidate's all-data fit as a leg override file (start values under the fit)."""
    from .report import write_params_yaml

    meta = dict(info)
    meta.update(
        model=cand.name,
        free_parameters=cand.params,
        at_bounds=res['at_bounds'],
        figures={
            'in_sample_per_segment_mean_rad': [round(v, 5) for v in s['in_sample']['mean']],
            'whole_file_continuous_rad': [round(v, 5) for v in s['continuous']],
            **(
                {
                    'held_out_per_segment_mean_rad': [round(v, 5) for v in s['held_out']['mean']],
                    'held_out_worst_segment_rad': [round(v, 5) for v in s['held_out']['worst']],
                }
                if 'held_out' in s
                else {}
            ),
        },
    )
    write_params_yaml(path, start_values | res['params'], meta)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog='python -m equimus_identification.heldout',
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument('tocenter', help='the ToCenter session (segments with start/end pairs)')
    ap.add_argument('static', help='the static set of the same session (StaticPoint_all_36.csv)')
    ap.add_argument('--out', default='heldout')
    ap.add_argument('--valves', default='lag,chamber')
    ap.add_argument('--frictions', default='none,friction')
    ap.add_argument('--losses', default='whole,shooting')
    ap.add_argument(
        '--forces',
        default='constant',
        help="the muscles' force: constant (area S), stiffening (area S(l), "
        'actuators.*.area_slope) and/or stiffening-damped (and a damping c + c_per_kpa·P)',
    )
    ap.add_argument('--references', default=','.join(REFERENCES), help='parameter sets or files')
    ap.add_argument('--start', default='table_v_dynamic', help='start parameter set or file')
    ap.add_argument('--leg', default=None)
    ap.add_argument('--dt', type=float, default=0.01, help='simulation step of the fits (s)')
    ap.add_argument('--horizon', type=float, default=0.5, help='shooting window (s)')
    ap.add_argument('--static-weight', type=float, default=1.0)
    ap.add_argument('--iterations', type=int, default=15, help='Jacobians of the all-data fit')
    ap.add_argument('--fold-iterations', type=int, default=2, help='Jacobians per fold')
    ap.add_argument(
        '--folds', default='all', help="'all' or a number of pairs (spread); 0: in-sample only"
    )
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--bound', action='append', default=[], metavar='NAME=LO:HI')
    ap.add_argument(
        '--fix',
        action='append',
        default=[],
        metavar='NAME=VALUE',
        help='hold a parameter at a value in every candidate (repeatable), e.g. '
        'actuators.maa.c=10.8',
    )
    a = ap.parse_args(argv)
    from .options import OptionError, parse_bounds, parse_params

    unknown = [
        f'{what} {x!r} (known: {", ".join(known)})'
        for what, given, known in (
            ('--valves', a.valves, VALVES),
            ('--frictions', a.frictions, FRICTIONS),
            ('--losses', a.losses, LOSSES),
            ('--forces', a.forces, FORCES),
        )
        for x in given.split(',')
        if x not in known
    ]
    if unknown:
        print(f'heldout: unknown {"; ".join(unknown)}', file=sys.stderr)
        return 2
    try:
        a.bounds = parse_bounds(a.bound)
    except OptionError as exc:
        print(f'heldout: {exc}', file=sys.stderr)
        return 2
    fixed = []
    for spec in a.fix:
        name, _, value = spec.partition('=')
        try:
            fixed.append((parse_params(name)[0], float(value)))
        except OptionError as exc:
            print(f'heldout: --fix {spec!r}: {exc}', file=sys.stderr)
            return 2
        except ValueError:
            print(f'heldout: --fix {spec!r}: expected NAME=VALUE', file=sys.stderr)
            return 2
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(msg, flush=True)

    try:
        d = load(a.tocenter, a.static)
    except (data.DataError, FileNotFoundError) as exc:
        print(f'heldout: {exc}', file=sys.stderr)
        return 2
    pairs = [e.meta['pair'] for e in d['segments']]
    if a.folds != 'all':
        k = int(a.folds)
        pairs = [pairs[i] for i in np.linspace(0, len(pairs) - 1, k).round().astype(int)]
    cands = [
        Candidate(v, fr, lo, tuple(fixed), fo)
        for v, fr, lo, fo in itertools.product(
            a.valves.split(','), a.frictions.split(','), a.losses.split(','), a.forces.split(',')
        )
    ]
    command = 'python -m equimus_identification.heldout ' + ' '.join(
        shlex.quote(os.path.relpath(x) if os.path.exists(x) else x)
        for x in (argv if argv is not None else sys.argv[1:])
    )
    doc: dict[str, Any] = {'command': command, 'candidates': {}, 'references': {}, 'summary': {}}
    refs = [r for r in a.references.split(',') if r]
    ref_paths = [_cache(out, 'ref', r) for r in refs]
    run_all(
        reference_task,
        [(r, a) for r in refs],
        ref_paths,
        a.workers,
        log,
        lambda job, res: f'reference {job[0]}: continuous {np.round(res["continuous"], 4)}',
    )
    for r, path in zip(refs, ref_paths, strict=True):
        doc['references'][r] = json.loads(path.read_text())
    log(f'{len(cands)} candidates, {len(pairs)} folds each')
    run_all(
        full_task,
        [(c, a) for c in cands],
        [_cache(out, c.name, 'all') for c in cands],
        a.workers,
        log,
        lambda job, res: (
            f'{job[0].name}: all data fitted in {res["fit_wall_s"]:.0f} s, in-sample continuous '
            f'{np.round(res["in_sample"]["continuous"], 4)}, at bounds {res["at_bounds"]}'
        ),
    )
    full = {c.name: json.loads(_cache(out, c.name, 'all').read_text()) for c in cands}
    jobs = [(c, a, p, [full[c.name]['params'][n] for n in c.params]) for c in cands for p in pairs]
    run_all(
        fold_task,
        jobs,
        [_cache(out, j[0].name, pair_key(j[2])) for j in jobs],
        a.workers,
        log,
        lambda job, res: (
            f'fold {job[0].name} {pair_key(job[2])}: held-out '
            f'{np.round(res["segments"][pair_key(job[2])], 4).tolist()} rad '
            f'({res["fit_wall_s"]:.0f} s)'
        ),
    )
    for c in cands:
        res = dict(full[c.name])
        res['folds'] = {
            pair_key(p): json.loads(_cache(out, c.name, pair_key(p)).read_text()) for p in pairs
        }
        doc['candidates'][c.name] = res
        doc['summary'][c.name] = summary(res)
    for r, res in doc['references'].items():
        doc['summary'][r] = summary({'in_sample': res})
    ranked = sorted(
        (n for n in doc['summary'] if 'criterion' in doc['summary'][n]),
        key=lambda n: doc['summary'][n]['criterion'],
    )
    chosen = doc['chosen'] = ranked[0] if ranked else None
    info = {
        'command': command,
        'inputs': [os.path.relpath(a.tocenter), os.path.relpath(a.static)],
        'start_parameter_set': a.start,
    }
    start_values: dict = {}
    if pathlib.Path(a.start).is_file():
        # a start file: its values and its own parameter set go into every params.yaml, so each
        # loads on its own
        import yaml

        from equimus_description.leg import load_overrides

        start_values = load_overrides(a.start)
        start_doc = yaml.safe_load(pathlib.Path(a.start).read_text()) or {}
        info['start_parameter_set'] = (start_doc.get('identification') or {}).get(
            'start_parameter_set', 'table_v_dynamic'
        )
        info['start'] = os.path.relpath(a.start)
    for c in cands:
        write_params(
            out / c.name / 'params.yaml',
            c,
            doc['candidates'][c.name],
            doc['summary'][c.name],
            info,
            start_values,
        )
    if chosen:
        (out / 'chosen.yaml').write_text((out / chosen / 'params.yaml').read_text())
    md = markdown(doc)
    (out / 'heldout.md').write_text(f'Command: `{command}`\n\n' + md)
    (out / 'heldout.json').write_text(json.dumps(doc, indent=1))
    print(md)
    log(f'chosen: {chosen} -> {out / "chosen.yaml"}' if chosen else 'no held-out folds run')
    return 0


if __name__ == '__main__':
    sys.exit(main())
