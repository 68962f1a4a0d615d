"""Where a command's CPU time goes, process by process: every Python process the command starts
(node processes, test workers, pool workers, command-line tools) notes its CPU seconds as it
exits, and the totals are printed by kind of process.

    python benchmarks/profile_processes.py -- \
        python -m pytest -q -n 3 --dist loadfile -m 'not serial' tests
    python benchmarks/profile_processes.py --top 15 -- python -m equimus_bringup.main_job --out run

How: a `sitecustomize` module, put first on PYTHONPATH from a temporary folder, registers an
atexit hook in every Python process. Processes that end by `os._exit` or a signal (a pool's
workers, a node killed by launch) never run it, so the table's sum is below the command's own
CPU time (its children's rusage), printed beside it. A `sitecustomize` of the environment itself
is shadowed while this runs.

Why: the suite is CPU-bound on two cores (docs/benchmarks.md, "The suite"), so what shortens it
is less computing, and this says in which processes: the test workers' own work, each kind of
node process (most of whose cost at start is importing), or the tools the tests run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOOK = """\
import atexit, json, os, resource, sys, time
_T0 = time.monotonic()
def _equimus_note_cpu():
    try:
        r = resource.getrusage(resource.RUSAGE_SELF)
        row = {
            'cpu_s': r.ru_utime + r.ru_stime,
            'wall_s': time.monotonic() - _T0,
            'argv': sys.argv,
            'scipy': 'scipy' in sys.modules,
            'mujoco': 'mujoco' in sys.modules,
        }
        with open(os.path.join(os.environ['EQUIMUS_PROCESS_LOG'], str(os.getpid())), 'a') as f:
            f.write(json.dumps(row) + '\\n')
    except Exception:
        pass
atexit.register(_equimus_note_cpu)
"""


def kind(argv: list[str]) -> str:
    """A process's kind from its command line: the script or module it ran."""
    if not argv or argv == ['']:
        return 'python (stdin or interactive)'
    if argv[0] == '-c':
        return 'python -c (test workers, spawned helpers)'
    name = Path(argv[0]).name  # `python -m pkg.mod` runs as the module's file
    return name[:-3] if name.endswith('.py') else name


def table(rows: list[dict], top: int) -> list[str]:
    by: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0, 0])
    for r in rows:
        agg = by[kind(r['argv'])]
        agg[0] += 1
        agg[1] += r['cpu_s']
        agg[2] += r['wall_s']
        agg[3] += bool(r['scipy'])
    total = sum(a[1] for a in by.values()) or 1.0
    out = [
        f'{"kind of process":44s} {"processes":>9s} {"CPU s":>8s} {"share":>6s} '
        f'{"CPU s each":>10s} {"wall s each":>11s} {"with scipy":>10s}'
    ]
    for name, (n, cpu, wall, scipy) in sorted(by.items(), key=lambda kv: -kv[1][1])[:top]:
        out.append(
            f'{name[:44]:44s} {n:9d} {cpu:8.1f} {100 * cpu / total:5.1f}% {cpu / n:10.2f} '
            f'{wall / n:11.2f} {scipy:10d}'
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('--top', type=int, default=25, help='kinds of process listed (default 25)')
    p.add_argument('command', nargs=argparse.REMAINDER, help='the command, after --')
    ns = p.parse_args(argv)
    command = ns.command[1:] if ns.command[:1] == ['--'] else ns.command
    if not command:
        print('profile_processes: give the command to run after --', file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix='profile_processes_') as tmp:
        hook, log = Path(tmp, 'hook'), Path(tmp, 'log')
        hook.mkdir()
        log.mkdir()
        (hook / 'sitecustomize.py').write_text(HOOK)
        env = dict(os.environ, EQUIMUS_PROCESS_LOG=str(log))
        env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(hook), env.get('PYTHONPATH')]))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        try:
            rc = subprocess.call(command, env=env)
        except FileNotFoundError:
            print(f'profile_processes: no such command: {command[0]}', file=sys.stderr)
            return 2
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        rows = [
            json.loads(line)
            for f in sorted(log.iterdir())
            for line in f.read_text().splitlines()
            if line
        ]
    children = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    noted = sum(r['cpu_s'] for r in rows)
    print(
        f'\n{" ".join(command)}\nexit {rc}; {wall:.1f} s wall; the command and everything it '
        f'waited for used {children:.1f} CPU s; {len(rows)} Python processes noted '
        f'{noted:.1f} CPU s at their exit (the rest: processes ended by a signal or os._exit, '
        'and programs that are not Python)'
    )
    print('\n'.join(table(rows, ns.top)))
    return rc


if __name__ == '__main__':
    sys.exit(main())
