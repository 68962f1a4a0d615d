"""Identification outputs: the override YAML, a Markdown report and measured-vs-simulated plots."""

from __future__ import annotations

import datetime
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import yaml

PAPER = {
    'static_pressure_rmse_kpa': (0.887, 0.861),
    'static_set_a_rmse': (0.0170, 0.0566),
    'static_set_a_maxae': (0.0336, 0.1463),
    'static_set_b_rmse': (0.0203, 0.0416),
    'static_set_b_maxae': (0.0418, 0.1463),
    'dynamic_rmse_max': 0.03253,
}


def write_params_yaml(path, parameters: dict, info: dict | None = None) -> pathlib.Path:
    """The fitted parameters as a leg_description override file.

    `parameters` holds dotted override keys (actuators.maa.k, joints.hip.damping, ...), which
    equimus_description.leg.load_overrides / load_leg(overrides=path) apply directly; the
    `identification` block is provenance only and is ignored by the loader.
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        'parameters': {k: float(v) for k, v in parameters.items()},
        'identification': dict(
            info or {}, written=datetime.datetime.now().isoformat(timespec='seconds')
        ),
    }
    with open(path, 'w') as f:
        f.write(
            '# EquiMus leg parameters fitted by `equimus identify` (leg_description overrides).\n'
            '# Use: load_leg(overrides=<this file>), '
            'sim node parameter parameter_overrides:=<this file>, '
            'launch argument leg_overrides:=<this file>.\n'
        )
        yaml.safe_dump(doc, f, sort_keys=False)
    return path


def _fmt(v, nd=4):
    return 'nan' if v is None or not np.isfinite(v) else f'{v:.{nd}f}'


def dynamic_table(before: Sequence[dict], after: Sequence[dict]) -> str:
    lines = [
        '| experiment | RMSE θ1 before | RMSE θ2 before | MaxAE θ1 before | MaxAE θ2 before '
        '| RMSE θ1 after | RMSE θ2 after | MaxAE θ1 after | MaxAE θ2 after | RMSE after |',
        '|---|---|---|---|---|---|---|---|---|---|',
    ]
    for b, a in zip(before, after, strict=True):
        lines.append(
            f'| {a["name"]} | '
            + ' | '.join(
                _fmt(v) for v in [*b['rmse'], *b['maxae'], *a['rmse'], *a['maxae'], a['rmse_all']]
            )
            + ' |'
        )
    rb = np.array([m['rmse_all'] for m in before])
    ra = np.array([m['rmse_all'] for m in after])
    lines.append(
        '| **mean / max RMSE (rad)** | | | | | | | | | '
        f'before {_fmt(np.mean(rb))} / {_fmt(np.max(rb))}, '
        f'after {_fmt(np.mean(ra))} / {_fmt(np.max(ra))} |'
    )
    return '\n'.join(lines)


def summary(metrics: Sequence[dict]) -> dict:
    r = np.array([m['rmse_all'] for m in metrics])
    per = np.array([m['rmse'] for m in metrics])
    mx = np.array([m['maxae'] for m in metrics])
    return {
        'rmse_mean': float(np.mean(r)),
        'rmse_max': float(np.max(r)),
        'rmse_joint_mean': np.mean(per, axis=0).tolist(),
        'maxae_joint_max': np.max(mx, axis=0).tolist(),
    }


def markdown(
    title: str, static: dict | None = None, dynamic: dict | None = None, command: str = ''
) -> str:
    out = [f'# {title}', '']
    if command:
        out += ['Command:', '', f'    {command}', '']
    if static:
        out += [
            '## Static identification (linear regression on equilibria)',
            '',
            f'Method: {static["method"]}, l0 fixed at {static["l0"]}; '
            f'fitted on {static["fit_set"]}.',
            '',
            '| parameter | value |',
            '|---|---|',
        ]
        out += [f'| {k} | {v:.6g} |' for k, v in static['parameters'].items()]
        out += [
            '',
            f'Pressure RMSE (kPa): P1 {static["pressure_rmse"][0]:.3f}, '
            f'P2 {static["pressure_rmse"][1]:.3f} (paper 0.887 / 0.861)',
            '',
            '| set | RMSE θ1 | RMSE θ2 | MaxAE θ1 | MaxAE θ2 |',
            '|---|---|---|---|---|',
        ]
        for name, e in static['angles'].items():
            out.append(
                f'| {name} ({e["n"]} poses) | '
                + ' | '.join(_fmt(v) for v in [*e['rmse'], *e['maxae']])
                + ' |'
            )
        out.append('')
    if dynamic:
        out += [
            '## Dynamic identification',
            '',
            f'Free parameters: {", ".join(dynamic["names"])}.',
            f'Loss: {dynamic["loss"]}; '
            + (
                f'Gauss-Newton iterations {dynamic["jacobians"]} '
                f'({dynamic["jacobian"]} Jacobians), '
                if dynamic.get('method') == 'gradient'
                else f'DE generations {dynamic["generations"]}, '
            )
            + f'evaluations {dynamic["evaluations"]}, wall time {dynamic["wall_s"]:.1f} s'
            + (' (interrupted)' if dynamic.get('interrupted') else '')
            + '.',
            '',
            '| parameter | before | after | relative std. error | determined by the data |',
            '|---|---|---|---|---|',
        ]
        ident = dynamic.get('identifiability') or {}
        rse = ident.get('relative_std_error', {})
        for k, v in dynamic['parameters'].items():
            e = rse.get(k)
            out.append(
                f'| {k} | {dynamic["before"][k]:.6g} | {v:.6g} | '
                + (
                    f'{100 * e:.2f} % | {"yes" if e <= ident["threshold"] else "**no**"} |'
                    if e is not None
                    else '– | – |'
                )
            )
        if ident:
            weak = ', '.join(f'{k} {v:+.2f}' for k, v in ident['weakest_direction'].items())
            out += [
                '',
                f'Relative standard errors from the Gauss-Newton covariance at the fit (lower '
                f"bounds: residuals are treated as white). 'Determined' means under "
                f'{100 * ident["threshold"]:g} %. '
                f'Condition number {ident["condition_number"]:.3g}; '
                f'the least determined combination of log-parameters: {weak}. Parameters '
                'marked **no** need richer excitation (or fixing), not a longer search.',
            ]
        if dynamic.get('at_bounds'):
            out += [
                '',
                '**On a bound:** ' + ', '.join(dynamic['at_bounds']) + '. The data push these '
                'beyond the search range: widen the range (--bound) when that is physical, or fix '
                'the parameter; do not ship the fit without saying why.',
            ]
        if ident.get('correlation'):
            out += ['', uncertainty_markdown(ident)]
        out += [
            '',
            'Per experiment, whole-trajectory simulation from the measured start (rad):',
            '',
            dynamic_table(dynamic['metrics_before'], dynamic['metrics_after']),
            '',
        ]
    return '\n'.join(out) + '\n'


def short_name(name: str) -> str:
    """actuators.maa.k -> maa.k, joints.hip.damping -> hip.damping, valve.time_constant -> tau."""
    if name == 'valve.time_constant':
        return 'tau'
    return name.split('.', 1)[1] if name.startswith(('actuators.', 'joints.')) else name


def uncertainty_markdown(ident: dict) -> str:
    """Value ± standard error (95 % interval), the correlation matrix and the singular values."""
    names = ident['names']
    out = [
        '### Uncertainty at the optimum',
        '',
        'From the residual Jacobian in log-parameter coordinates: covariance σ²(JᵀJ)⁻¹ with σ² '
        'the residual variance (a lower bound: residuals are treated as white).',
        '',
        '| parameter | value | std. error | 95 % interval |',
        '|---|---|---|---|',
    ]
    for n, v in zip(names, ident['value'], strict=True):
        se = ident['std_error'][n]
        out.append(f'| {n} | {v:.5g} | {se:.3g} | [{v - 1.96 * se:.5g}, {v + 1.96 * se:.5g}] |')
    short = [short_name(n) for n in names]
    out += ['', 'Correlation matrix:', '', '| | ' + ' | '.join(short) + ' |']
    out.append('|---' * (len(short) + 1) + '|')
    for n, row in zip(short, ident['correlation'], strict=True):
        out.append(f'| {n} | ' + ' | '.join(f'{c:+.2f}' for c in row) + ' |')
    sv = ident['singular_values']
    out += [
        '',
        'Singular values of the Jacobian (relative to the largest) and the combination of '
        'log-parameters each determines (components over 0.3):',
        '',
        '| # | singular value | direction |',
        '|---|---|---|',
    ]
    for i, (v, vec) in enumerate(zip(sv, ident['singular_vectors'], strict=True)):
        comb = ', '.join(f'{short[j]} {c:+.2f}' for j, c in enumerate(vec) if abs(c) > 0.3)
        out.append(f'| {i + 1} | {v:.3g} | {comb} |')
    return '\n'.join(out)


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, imported when a plot is asked for."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | pathlib.Path, title: str = '') -> pathlib.Path:
    """`fig` as a PNG at `path` (its folder made), `title` above it when given; frees `fig`."""
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    pyplot().close(fig)
    return path


def plot_uncertainty(ident: dict, path) -> pathlib.Path:
    """Correlation matrix and singular values of the identification at the optimum."""
    plt = pyplot()

    short = [short_name(n) for n in ident['names']]
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(11, 4.5))
    im = a0.imshow(np.asarray(ident['correlation']), vmin=-1, vmax=1, cmap='RdBu_r')
    a0.set_xticks(range(len(short)), short, rotation=60, fontsize=7)
    a0.set_yticks(range(len(short)), short, fontsize=7)
    a0.set_title('parameter correlation', fontsize=9)
    fig.colorbar(im, ax=a0, fraction=0.046)
    a1.semilogy(range(1, len(ident['singular_values']) + 1), ident['singular_values'], 'o-')
    a1.set_xlabel('singular value #', fontsize=8)
    a1.set_ylabel('σᵢ / σ₁ (log-parameter Jacobian)', fontsize=8)
    a1.set_title('what the data determine', fontsize=9)
    a1.grid(True, which='both', lw=0.3)
    return save_figure(fig, path)


def plot_experiments(
    before: Sequence[dict], after: Sequence[dict], path, title: str = ''
) -> pathlib.Path:
    """One PNG: a row per experiment, θ1 and θ2 measured vs simulated before/after."""
    plt = pyplot()

    n = len(after)
    fig, axes = plt.subplots(n, 2, figsize=(10, 1.9 * n + 0.6), squeeze=False, sharex=True)
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        for j in range(2):
            ax = axes[i, j]
            ax.plot(a['t'], a['q'][:, j], 'k-', lw=1.4, label='measured')
            ax.plot(b['t'], b['q_sim'][:, j], 'C1--', lw=1.0, label='before')
            ax.plot(a['t'], a['q_sim'][:, j], 'C0-', lw=1.0, label='after')
            ax.set_ylabel(f'{a["name"]}\nθ{j + 1} (rad)', fontsize=7)
            ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=7, loc='best')
    for ax in axes[-1]:
        ax.set_xlabel('time from step (s)')
    return save_figure(fig, path, title)
