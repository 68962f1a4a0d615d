"""`equimus evaluate PARAMS RECORDING...`: score a parameter set on recordings it was not fitted to.

Open-loop replay: the recorded pressures (commanded, through the valve model, or the measured
valve pressures) drive the model from the recording's initial state, and the simulated angles are
compared with the measured ones: RMSE and MaxAE per joint over the whole recording, per segment
and per phase (fill, hold, release), and each fill's onset (when the rig's joint and the model's
started and got halfway after the command, how far each overshot), and how much of each
segment's error is timing (`timing`: the error left once each fill and release is shifted in
time to fit). This is the sim-to-real gap of a parameter set.

--protocol continuous (default; the EquiMus authors' protocol, the figure comparable with the
paper): a recording is ONE open-loop replay from its first measured state — a dynamic CSV's
segments end to end, a bag whole; a static set's pairs are each filled from the set's vented rest
pose (as the ToCenter session reached them). --protocol segments: every segment of a dynamic CSV
restarts from its own measured state (hides drift), and a static set's pairs are held from the
measured poses.

Recordings: rosbag2 folders or .mcap files (sim or hardware; one replay of the whole bag, its
pressure steps as segments), the EquiMus dynamic CSVs (ToCenter or any trajectory with
relative_time restarting per segment, with the command log current_pressure1/2 or only the
segment pairs pressure1_start, pressure2_start, pressure1_end, pressure2_end — the end pair
commanded data.HOLD_S after the segment's start; measured-pressure columns optional) and static
CSVs (StaticPoint_*.csv; the resting angles scored). Any other layout is refused with one line
listing the usable columns.

PARAMS: a params.yaml written by `equimus identify` (or any leg override file), or the name of a
parameter set in the leg YAML (table_v_dynamic, table_v_static, ...), or `default`.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

from . import data
from . import dynamic as D
from .report import pyplot, save_figure

CSV_DT = 0.005  # the authors' identification step, for 100 Hz-resampled CSVs
ONSET_MIN_RAD = 0.05  # a joint whose fill moves it less than this (about 3°) has no onset
SETTLED_S = 0.5  # the end of a hold averaged over this long: where a fill settled
BAG_DT = 1.0 / 600.0  # the simulation node's step: five per 120 Hz mocap frame
PLOT_ROWS = 12  # experiments drawn at most (the table lists all)
SHIFT_MAX_S = 0.15  # `timing`: the model shifted by at most this, either way
SHIFT_STEP_S = 0.005  # ... on this grid (the authors' identification step)


def load_params(spec: str, leg_path=None):
    """A LegDescription from a parameter file or a parameter-set name (see module doc)."""
    from equimus_description import yamlfile
    from equimus_description.leg import load_leg

    p = pathlib.Path(spec)
    if p.suffix in ('.yaml', '.yml') or p.exists():
        if not p.exists():
            raise FileNotFoundError(f'{spec}: no such parameter file')
        doc = yamlfile.load(p)[0]  # YamlFileError (a ValueError): one line, file and line
        ident = doc.get('identification') if isinstance(doc, dict) else None
        start = (ident if isinstance(ident, dict) else {}).get(
            'start_parameter_set', 'table_v_dynamic'
        )
        return load_leg(leg_path, parameter_set=start or None, overrides=str(p))
    return load_leg(leg_path, parameter_set=None if spec == 'default' else spec)


PROTOCOLS = ('continuous', 'segments')
STATIC_HOLD_S = {'continuous': data.HOLD_S, 'segments': 3.0}  # a ToCenter hold / the fit's


def load_recording(path, protocol: str = 'continuous') -> tuple[list, float, str]:
    """(experiments, simulation step, kind) of one recording, prepared for open-loop replay."""
    if protocol not in PROTOCOLS:
        raise ValueError(f'protocol must be one of {PROTOCOLS}, got {protocol!r}')
    p = pathlib.Path(path)
    if p.is_dir() or p.suffix == '.mcap':
        return [data.bag_trajectory(data.load_bag(data.bag_folder(p)))], BAG_DT, 'bag'
    if p.suffix == '.csv':
        kind = data.csv_kind(p)
        if kind == 'static':
            s = data.load_static_csv(p)
            start = 'rest' if protocol == 'continuous' else 'measured'
            return (
                data.static_experiments(s, STATIC_HOLD_S[protocol], start=start),
                CSV_DT,
                'static',
            )
        segments = data.load_trajectory_csv(p)
        if protocol == 'continuous':
            return [data.continuous(segments)], CSV_DT, 'dynamic'
        return segments, CSV_DT, 'dynamic'
    raise data.DataError(f'{p}: not a rosbag2 folder, .mcap file or EquiMus CSV')


def evaluate(leg, paths, pressure: str = 'command', protocol: str = 'continuous') -> list[dict]:
    """One entry per recording: kind, per-experiment metrics, the pooled figures and the fills'
    onsets (`fills`)."""
    names = list(D.BOUNDS)
    x = [D.leg_value(leg, n) for n in names]
    out = []
    for path in paths:
        exps, dt, kind = load_recording(path, protocol)
        m = D.metrics(exps, x, names, leg=leg, dt=dt, pressure=pressure)
        fills = [f for e, mm in zip(exps, m, strict=True) for f in fill_onsets(e, mm['q_sim'])]
        shifts = [s for e, mm in zip(exps, m, strict=True) for s in timing(e, mm['q_sim'])]
        out.append(
            {
                'path': str(path),
                'kind': kind,
                'metrics': m,
                'fills': fills,
                'timing': shifts,
                **pooled(m),
            }
        )
    return out


def _onset(t: np.ndarray, y: np.ndarray, change: float) -> tuple[float, float, float]:
    """(t10, t50, overshoot) of a response y over t (t[0] = 0): when it first covered 10 % and
    50 % of `change` (nan if never), and how far it went past its own settled value (the mean of
    its last SETTLED_S), in the direction of `change` (rad, ≥ 0)."""
    frac = (y - y[0]) / change
    t10 = t[np.argmax(frac >= 0.1)] if np.any(frac >= 0.1) else np.nan
    t50 = t[np.argmax(frac >= 0.5)] if np.any(frac >= 0.5) else np.nan
    settled = y[t >= t[-1] - SETTLED_S].mean()
    overshoot = max(0.0, float(np.max(np.sign(change) * (y - settled))))
    return float(t10), float(t50), overshoot


def fill_onsets(e: data.Experiment, q_sim: np.ndarray) -> list[dict]:
    """For each fill of `e` (its phases: fill, then the hold up to the release) and each joint
    the fill moves by ONSET_MIN_RAD or more on the rig: when the rig's joint and the model's
    started (t10) and got halfway (t50), s after the command, and how far each went past where
    it settled (rad). A linear valve model starts at the same time at every pressure; where the
    rig does not (issue 25), this table shows it."""
    phases = e.meta.get('phases', ())
    out = []
    for i, ph in enumerate(phases):
        if ph[0] != 'fill':
            continue
        hold = next((h for h in phases[i + 1 :] if h[0] == 'hold'), None)
        if hold is None or (len(ph) > 3 and hold[3:] != ph[3:]):
            continue
        w = (e.t >= ph[1] - 1e-9) & (e.t < hold[2] - 1e-9)
        if w.sum() < 3:
            continue
        t = e.t[w] - e.t[w][0]
        q, qs = e.q[w], q_sim[w]
        for j in range(2):
            change = float(q[t >= t[-1] - SETTLED_S, j].mean() - q[0, j])
            if abs(change) < ONSET_MIN_RAD:
                continue
            rig, model = _onset(t, q[:, j], change), _onset(t, qs[:, j], change)
            out.append(
                {
                    'segment': ph[3] if len(ph) > 3 else e.name,
                    'command_kpa': [float(v) for v in e.command_kpa[np.flatnonzero(w)[0]]],
                    'joint': j,
                    'change': change,
                    'rig': dict(zip(('t10', 't50', 'overshoot'), rig, strict=True)),
                    'model': dict(zip(('t10', 't50', 'overshoot'), model, strict=True)),
                }
            )
    return out


def timing(
    e: data.Experiment,
    q_sim: np.ndarray,
    max_shift_s: float = SHIFT_MAX_S,
    step_s: float = SHIFT_STEP_S,
) -> list[dict]:
    """How much of each segment's error is *when* rather than *what*: each fill (with its hold)
    and each release, the model's angles shifted in time by the one shift within ±max_shift_s
    (both joints) that fits that window best, positive where the model was early. Returns one
    row per segment: the shift of each window the rig moved in (ONSET_MIN_RAD or more; None
    otherwise) and the segment's RMSE per joint as replayed and with those shifts. A per-window
    shift knows the answer: what it leaves is error of shape, a floor for timing models."""
    phases = e.meta.get('phases', ())
    grid = np.arange(-max_shift_s, max_shift_s + step_s / 2, step_s)
    rows: dict[str, dict] = {}
    for ph in phases:
        name = ph[3] if len(ph) > 3 else e.name
        row = rows.setdefault(name, {'segment': name, 'start': ph[1], 'end': ph[2]})
        row['start'], row['end'] = min(row['start'], ph[1]), max(row['end'], ph[2])
        if ph[0] == 'release':
            row['release_at'] = ph[1]
    out = []
    for row in rows.values():
        seg = (e.t >= row['start'] - 1e-9) & (e.t < row['end'] - 1e-9)
        aligned = q_sim.copy()
        cut = row.get('release_at', row['end'])
        for window, a, b in (('fill', row['start'], cut), ('release', cut, row['end'])):
            w = seg & (e.t >= a - 1e-9) & (e.t < b - 1e-9)
            row[f'{window}_shift_s'] = None
            if w.sum() < 3 or np.ptp(e.q[w], axis=0).max() < ONSET_MIN_RAD:
                continue
            t, q = e.t[w], e.q[w]
            trials = [
                np.stack([np.interp(t - d, e.t, q_sim[:, j]) for j in range(2)], axis=1)
                for d in grid
            ]
            best = int(np.argmin([((q - m) ** 2).sum() for m in trials]))
            row[f'{window}_shift_s'] = float(grid[best])
            aligned[w] = trials[best]
        row['rmse'] = np.sqrt(((e.q[seg] - q_sim[seg]) ** 2).mean(axis=0))
        row['rmse_aligned'] = np.sqrt(((e.q[seg] - aligned[seg]) ** 2).mean(axis=0))
        out.append(row)
    return out


def pooled(metrics) -> dict:
    """RMSE and MaxAE per joint over every sample (static: every pose) of a recording, and per
    phase (fill, hold, release) over the samples of that phase."""
    sq, mx, n = np.zeros(2), np.zeros(2), 0
    ph: dict = {}
    for m in metrics:
        k = 1 if m['static'] else len(m['t'])
        sq += m['rmse'] ** 2 * k
        mx = np.maximum(mx, m['maxae'])
        n += k
        for name, e in m.get('phases', {}).items():
            acc = ph.setdefault(name, [np.zeros(2), np.zeros(2), 0])
            acc[0] += e['rmse'] ** 2 * e['n']
            acc[1] = np.maximum(acc[1], e['maxae'])
            acc[2] += e['n']
    phases = {
        name: {'rmse': np.sqrt(s / max(k, 1)), 'maxae': m_, 'samples': k}
        for name, (s, m_, k) in sorted(ph.items(), key=lambda kv: data.PHASES.index(kv[0]))
    }
    return {'rmse': np.sqrt(sq / max(n, 1)), 'maxae': mx, 'samples': n, 'phases': phases}


def _f(v) -> str:
    return 'nan' if not np.isfinite(v) else f'{v:.4f}'


def markdown(results, params: str, pressure: str, protocol: str = 'continuous') -> str:
    out = [
        f'# Open-loop evaluation of {params}',
        '',
        f'Protocol: {protocol}. Pressures replayed: {pressure}. Angles in rad (θ1 hip, θ2 knee).',
        '',
    ]
    for r in results:
        out += [
            f'## {r["path"]} ({r["kind"]})',
            '',
            f'Whole recording: RMSE θ1 {_f(r["rmse"][0])}, θ2 {_f(r["rmse"][1])}; '
            f'MaxAE θ1 {_f(r["maxae"][0])}, θ2 {_f(r["maxae"][1])}.',
            '',
        ]
        if r['phases']:
            out += ['| phase | RMSE θ1 | RMSE θ2 | MaxAE θ1 | MaxAE θ2 |', '|---|---|---|---|---|']
            for name, e in r['phases'].items():
                out.append(
                    f'| {name} | ' + ' | '.join(_f(v) for v in [*e['rmse'], *e['maxae']]) + ' |'
                )
            out.append('')
        if r.get('fills'):
            out += [
                "Fills (`fill_onsets`): s from the command to 10 % and 50 % of the joint's "
                'move, and how far it went past where it settled (rad).',
                '',
                '| segment | command kPa | joint | rig t10 / t50 | model t10 / t50 | '
                'rig overshoot | model overshoot |',
                '|---|---|---|---|---|---|---|',
            ]
            for f in r['fills']:
                a, b = f['rig'], f['model']
                kpa = '/'.join(f'{v:g}' for v in f['command_kpa'])
                out.append(
                    f'| {f["segment"]} | {kpa} | θ{f["joint"] + 1} | {a["t10"]:.2f} / '
                    f'{a["t50"]:.2f} | {b["t10"]:.2f} / {b["t50"]:.2f} | {a["overshoot"]:.3f} | '
                    f'{b["overshoot"]:.3f} |'
                )
            out.append('')
        out += _timing_markdown(r.get('timing', []))
        out += [
            '| segment | RMSE θ1 | RMSE θ2 | MaxAE θ1 | MaxAE θ2 |',
            '|---|---|---|---|---|',
        ]
        for m in r['metrics']:
            rows = m['segments'] if len(m['segments']) > 1 else [m]
            for s in rows:
                out.append(
                    f'| {s["name"]} | '
                    + ' | '.join(_f(v) for v in [*s['rmse'], *s['maxae']])
                    + ' |'
                )
        out.append('')
    return '\n'.join(out)


def _timing_markdown(rows) -> list[str]:
    if not rows:
        return []

    def shifts(key):
        v = np.array([r[key] for r in rows if r[key] is not None])
        return f'{v.mean():+.3f} ± {v.std():.3f} s' if len(v) else '–'

    def sec(v):
        return '–' if v is None else f'{v:+.3f}'

    before = np.mean([r['rmse'] for r in rows], axis=0)
    after = np.mean([r['rmse_aligned'] for r in rows], axis=0)
    out = [
        f'Timing (`timing`): each fill (with its hold) and each release replayed with the model '
        f'shifted by the best time within ±{SHIFT_MAX_S:g} s (positive: the model was early). '
        f'Mean per-segment RMSE θ1 / θ2: {_f(before[0])} / {_f(before[1])} as replayed, '
        f'{_f(after[0])} / {_f(after[1])} aligned; shifts of the fills {shifts("fill_shift_s")}, '
        f'of the releases {shifts("release_shift_s")}. What alignment leaves is error of shape.',
        '',
        '| segment | fill shift s | release shift s | RMSE θ1 / θ2 | aligned θ1 / θ2 |',
        '|---|---|---|---|---|',
    ]
    for r in rows:
        out.append(
            f'| {r["segment"]} | {sec(r["fill_shift_s"])} | {sec(r["release_shift_s"])} | '
            f'{_f(r["rmse"][0])} / {_f(r["rmse"][1])} | '
            f'{_f(r["rmse_aligned"][0])} / {_f(r["rmse_aligned"][1])} |'
        )
    out.append('')
    return out


def plot(results, path, title: str = '') -> pathlib.Path:
    """Simulated vs measured angles (and the replayed pressures) of each dynamic experiment;
    model vs measured rest angles of each static set."""
    plt = pyplot()

    dyn = [m for r in results for m in r['metrics'] if not m['static']][:PLOT_ROWS]
    stat = [r for r in results if r['kind'] == 'static']
    rows = len(dyn) + (1 if stat else 0)
    fig, axes = plt.subplots(max(rows, 1), 3, figsize=(13, 2.0 * max(rows, 1) + 0.6), squeeze=False)
    for i, m in enumerate(dyn):
        for j in range(2):
            ax = axes[i, j]
            ax.plot(m['t'], m['q'][:, j], 'k-', lw=1.2, label='measured')
            ax.plot(m['t'], m['q_sim'][:, j], 'C0-', lw=1.0, label='simulated')
            ax.set_ylabel(f'{m["name"][-14:]}\nθ{j + 1} (rad)', fontsize=7)
        ax = axes[i, 2]
        ax.plot(m['t'], m['command'], '--', lw=0.8)
        if 'pressure' in m:
            ax.plot(m['t'], m['pressure'], '-', lw=0.8)
        ax.set_ylabel('kPa', fontsize=7)
        for ax in axes[i]:
            ax.tick_params(labelsize=7)
    if stat:
        ax_row = axes[len(dyn)]
        for r in stat:
            qm = np.array([m['q'][0] for m in r['metrics']])
            qs = np.array([m['q_rest'] for m in r['metrics']])
            for j in range(2):
                ax_row[j].plot(qm[:, j], qs[:, j], 'o', ms=3, label=pathlib.Path(r['path']).stem)
                lim = [min(qm[:, j].min(), qs[:, j].min()), max(qm[:, j].max(), qs[:, j].max())]
                ax_row[j].plot(lim, lim, 'k:', lw=0.8)
                ax_row[j].set_xlabel(f'measured rest θ{j + 1} (rad)', fontsize=7)
                ax_row[j].set_ylabel('model rest (rad)', fontsize=7)
        ax_row[0].legend(fontsize=6)
        ax_row[2].axis('off')
    if dyn:
        axes[0, 0].legend(fontsize=7)
    return save_figure(fig, path, title)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='equimus evaluate',
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument('params', help='params.yaml / override file, or a parameter-set name')
    p.add_argument('recordings', nargs='+', help='rosbag2 folders, .mcap files, EquiMus CSVs')
    p.add_argument(
        '--pressure',
        choices=D.PRESSURE_SOURCES,
        default='command',
        help='replay the commanded pressures through the valve model (default) or the measured '
        'ones',
    )
    p.add_argument(
        '--protocol',
        choices=PROTOCOLS,
        default='continuous',
        help='continuous (default, the paper-comparable figure): one open-loop replay of each '
        'recording from its first measured state; segments: every segment restarted from its '
        'measured state',
    )
    p.add_argument('--leg', default=None, help='leg YAML (default: the packaged one)')
    p.add_argument('--out', default=None, help='folder for evaluation.md and evaluation.png')
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    from equimus_description.leg import LegDescriptionError

    try:
        leg = load_params(a.params, a.leg)
        results = evaluate(leg, a.recordings, a.pressure, a.protocol)
    except (data.DataError, LegDescriptionError, FileNotFoundError, ValueError) as exc:
        print(f'equimus evaluate: {exc}', file=sys.stderr)
        return 2
    md = markdown(results, a.params, a.pressure, a.protocol)
    print(md)
    if a.out:
        out = pathlib.Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / 'evaluation.md').write_text(md)
        png = plot(
            results,
            out / 'evaluation.png',
            title=f'{a.params} ({a.protocol}, {a.pressure} pressures)',
        )
        print(f'report: {out / "evaluation.md"}\nplot: {png}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
