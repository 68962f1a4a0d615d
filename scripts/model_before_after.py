#!/usr/bin/env python3
"""Measured joint angles of a few ToCenter segments beside two parameter sets' replays.

    python scripts/model_before_after.py --before config/superseded/leg_fit_joint.yaml \
        --after config/leg_fit.yaml --out docs/figures/identification_before_after.png

Both sets replay the whole ToCenter file once from its first measured state (the continuous
protocol of `equimus evaluate`); the figure shows the chosen segments (fill at 0 s, release at
5 s) cut from those replays, with each set's RMSE on the segment.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOCENTER = ROOT / '..' / 'shared' / 'data/equimus/physical/dynamic'


def replay(spec: str, exp):
    from equimus_identification import dynamic as D
    from equimus_identification.evaluate import CSV_DT, load_params

    leg = load_params(spec)
    names = list(D.BOUNDS)
    return D.metrics([exp], [D.leg_value(leg, n) for n in names], names, leg=leg, dt=CSV_DT)[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--before', required=True)
    ap.add_argument('--after', required=True)
    ap.add_argument('--segments', default='P0-20,P20-10,P50-0,P30-40')
    ap.add_argument('--tocenter', default=None, help='default: the shared ToCenter file')
    ap.add_argument('--out', required=True)
    a = ap.parse_args(argv)
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    from equimus_identification import data

    path = pathlib.Path(a.tocenter) if a.tocenter else next(TOCENTER.glob('ToCenter_*.csv'))
    segs = data.load_trajectory_csv(path)
    joined = data.continuous(segs)
    runs = {'before': replay(a.before, joined), 'after': replay(a.after, joined)}
    labels = {'before': a.before, 'after': a.after}
    want = a.segments.split(',')
    names = {f'P{e.meta["pair"][0]:g}-{e.meta["pair"][1]:g}': k for k, e in enumerate(segs)}
    missing = [w for w in want if w not in names]
    if missing:
        print(f'model_before_after: no segment {missing} (have {sorted(names)})', file=sys.stderr)
        return 2
    fig, axes = plt.subplots(2, len(want), figsize=(4.2 * len(want), 5.6), squeeze=False)
    starts = joined.meta['segments'] + [joined.t[-1] + joined.dt]
    for col, w in enumerate(want):
        k = names[w]
        sl = (joined.t >= starts[k] - 1e-9) & (joined.t < starts[k + 1] - 1e-9)
        t = joined.t[sl] - starts[k]
        for j in range(2):
            ax = axes[j, col]
            ax.plot(t, np.degrees(joined.q[sl, j]), 'k-', lw=1.2, label='measured')
            for run, style in (('before', 'C3--'), ('after', 'C0-')):
                q = runs[run]['q_sim'][sl, j]
                err = np.sqrt(np.mean((q - joined.q[sl, j]) ** 2))
                ax.plot(t, np.degrees(q), style, lw=1.0, label=f'{run} ({err:.3f} rad)')
            ax.set_title(f'{w} θ{j + 1}', fontsize=9)
            ax.set_xlabel('s', fontsize=8)
            ax.set_ylabel('deg', fontsize=8)
            ax.tick_params(labelsize=7)
            ax.legend(fontsize=6)
    fig.suptitle(
        f'continuous replay of {path.name}: before = {labels["before"]}, after = {labels["after"]}',
        fontsize=9,
    )
    fig.tight_layout()
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=70)
    print(out)
    return 0


if __name__ == '__main__':
    sys.exit(main())
