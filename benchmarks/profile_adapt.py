#!/usr/bin/env python3
"""`equimus adapt`'s identify and retune steps on one process and on every core, side by side.

    python benchmarks/profile_adapt.py RUN [--budget short]

RUN is an `equimus adapt --out` folder: its excitation (bag_excite) is identified and the PID
retuned on the result exactly as the loop does (`adapt.identify`, `adapt.retune` with the loop
delay it measured, from RUN/adapt.json), once with one worker and once with one per core. Printed:
each step's wall time both ways, their ratio, and whether both ways wrote the same parameters and
gains (they must: the work is split, not changed).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import time


def steps(run: pathlib.Path, out: pathlib.Path, budget: str, workers: int) -> dict[str, float]:
    from equimus_bringup import adapt

    b = adapt.BUDGETS[budget]
    delay = float(json.loads((run / 'adapt.json').read_text()).get('loop_delay_s', 0.0))
    t0 = time.monotonic()
    adapt.identify(run / 'bag_excite', out, b, lambda _: None, workers=workers)
    t1 = time.monotonic()
    adapt.retune(out / 'params.yaml', out, b, lambda _: None, delay, workers=workers)
    return {'identify': t1 - t0, 'retune': time.monotonic() - t1}


def written(out: pathlib.Path) -> tuple[str, str]:
    """identified.yaml and the gains of params_pid.yaml (its comments and paths differ)."""
    pid = [
        line
        for line in (out / 'params_pid.yaml').read_text().splitlines()
        if not line.startswith('#') and 'leg_overrides' not in line
    ]
    return (out / 'identified.yaml').read_text(), '\n'.join(pid)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('run', help='an equimus adapt --out folder')
    p.add_argument('--budget', default='short')
    a = p.parse_args(argv)
    from equimus_identification.parallel import default_workers

    run = pathlib.Path(a.run)
    if not (run / 'bag_excite').is_dir() or not (run / 'adapt.json').is_file():
        print(f'profile_adapt: {run} is not an equimus adapt --out folder', file=sys.stderr)
        return 2
    n = default_workers()
    with tempfile.TemporaryDirectory() as tmp:
        one, every = pathlib.Path(tmp, 'one'), pathlib.Path(tmp, 'every')
        one.mkdir()
        every.mkdir()
        t1 = steps(run, one, a.budget, 1)
        tn = steps(run, every, a.budget, n)
        same = written(one) == written(every)
    print(f'{"step":10s} {"1 process":>10s} {f"{n} processes":>12s} {"ratio":>6s}')
    for k in t1:
        print(f'{k:10s} {t1[k]:9.1f}s {tn[k]:11.1f}s {t1[k] / tn[k]:6.2f}')
    print(f'same parameters and gains both ways: {"yes" if same else "NO"}')
    return 0 if same else 1


if __name__ == '__main__':
    raise SystemExit(main())
