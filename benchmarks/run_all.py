"""Run every benchmark of the project and write docs/benchmarks.md.

    make bench                 # full run (minutes)
    python benchmarks/run_all.py --quick --out /tmp/bench.md

Each `benchmarks/bench_*.py` exposes `run(quick: bool) -> dict` of named figures (numbers or
strings); this script runs them one after another (never in parallel: they measure time) and
writes each figure with the command that produced it and the machine it ran on.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def machine() -> str:
    cpu = platform.processor() or 'unknown CPU'
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    cpu = line.split(':', 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import mujoco

        mj = mujoco.__version__
    except ImportError:
        mj = 'n/a'
    mem = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30
    return (
        f'{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB; Python {platform.python_version()}, '
        f'MuJoCo {mj}; {platform.system()} {platform.release()}'
    )


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(mod)
    return mod


def fmt(v) -> str:
    if isinstance(v, float):
        return f'{v:.4g}'
    return str(v)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument('--quick', action='store_true', help='short runs (for a smoke check)')
    p.add_argument('--only', nargs='*', default=None, help='bench names, e.g. sim natnet')
    p.add_argument('--out', default=str(REPO / 'docs' / 'benchmarks.md'))
    ns = p.parse_args(argv)
    benches = sorted(HERE.glob('bench_*.py'))
    if ns.only:
        benches = [b for b in benches if b.stem[len('bench_') :] in ns.only]
    sections = []
    failed = []
    for path in benches:
        name = path.stem[len('bench_') :]
        cmd = f'python benchmarks/{path.name}' + (' --quick' if ns.quick else '')
        print(f'[bench] {name}: running ({cmd})', flush=True)
        t0 = time.monotonic()
        try:
            figures = load(path).run(quick=ns.quick)
        except Exception:
            failed.append(name)
            sections.append(f'## {name}\n\nFAILED:\n\n```\n{traceback.format_exc()}```\n')
            print(f'[bench] {name}: FAILED', flush=True)
            continue
        wall = time.monotonic() - t0
        rows = '\n'.join(f'| {k} | {fmt(v)} |' for k, v in figures.items())
        sections.append(
            f'## {name}\n\nCommand: `{cmd}` ({wall:.0f} s)\n\n'
            f'| figure | value |\n|---|---|\n{rows}\n'
        )
        print(f'[bench] {name}: done in {wall:.0f} s', flush=True)
    stamp = time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())
    head = (
        f'# Benchmarks\n\nWritten by `make bench` (`python benchmarks/run_all.py'
        f'{" --quick" if ns.quick else ""}`) on {stamp}.\n\n'
        f'Machine: {machine()}.\n\n'
        'Every ratio compares figures measured side by side in the same run.\n\n'
    )
    Path(ns.out).write_text(head + '\n'.join(sections))
    print(f'[bench] wrote {ns.out}')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
