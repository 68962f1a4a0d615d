"""Run every benchmark of the project that has a standard run, and write its figures to a file.

    make bench                 # full run (about 35 minutes); out/bench/benchmarks-<UTC time>.md
    python benchmarks/run_all.py --quick --out /tmp/bench.md

A `benchmarks/bench_*.py` with `run(quick: bool) -> dict` of named figures (numbers or strings)
is run here, one after another (never in parallel: they measure time), and each figure is written
with the command that produced it and the machine it ran on. The others take arguments of their
own (a run folder, modes, a frame count); they are listed at the end with their commands.
docs/benchmarks.md is the project's record of measurements, each quoted with its command: this
script does not write it unless told to (`--out docs/benchmarks.md`).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
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


def standard_run(mod):
    """The module's `run` if it can be called as run(quick=...) alone, else None."""
    run = getattr(mod, 'run', None)
    if not callable(run):
        return None
    params = inspect.signature(run).parameters
    if 'quick' not in params:
        return None
    others = [p for name, p in params.items() if name != 'quick']
    if any(p.default is inspect.Parameter.empty for p in others):
        return None
    return run


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
    p.add_argument(
        '--out',
        default='',
        help='the file to write (default: out/bench/benchmarks-<UTC time>.md)',
    )
    ns = p.parse_args(argv)
    now = time.gmtime()
    stamp = time.strftime('%Y-%m-%d %H:%M UTC', now)
    default = REPO / 'out' / 'bench' / f'benchmarks-{time.strftime("%Y%m%dT%H%M%SZ", now)}.md'
    out = Path(ns.out) if ns.out else default
    benches = sorted(HERE.glob('bench_*.py'))
    if ns.only:
        benches = [b for b in benches if b.stem[len('bench_') :] in ns.only]
    sections = []
    failed = []
    own_command = []
    for path in benches:
        name = path.stem[len('bench_') :]
        cmd = f'python benchmarks/{path.name}' + (' --quick' if ns.quick else '')
        t0 = time.monotonic()
        try:
            run = standard_run(load(path))
            if run is None:
                own_command.append(f'python benchmarks/{path.name} --help')
                continue
            print(f'[bench] {name}: running ({cmd})', flush=True)
            figures = run(quick=ns.quick)
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
    if own_command:
        sections.append(
            '## Benchmarks with arguments of their own (not run here)\n\n'
            + '\n'.join(f'- `{c}`' for c in own_command)
            + '\n'
        )
    head = (
        f'# Benchmarks\n\nWritten by `make bench` (`python benchmarks/run_all.py'
        f'{" --quick" if ns.quick else ""}`) on {stamp}.\n\n'
        f'Machine: {machine()}.\n\n'
        'Every ratio compares figures measured side by side in the same run.\n\n'
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(head + '\n'.join(sections))
    print(f'[bench] wrote {out}')
    for c in own_command:
        print(f'[bench] not run here (arguments of its own): {c}')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
