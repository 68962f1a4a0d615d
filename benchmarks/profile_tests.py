"""Where a pytest run's time goes, test file by test file: each test's CPU seconds (its worker's
own and those of the processes it started and waited for) beside its wall time.

    python benchmarks/profile_tests.py -- -n 3 --dist loadfile -m 'not serial' tests
    python benchmarks/profile_tests.py --top 10 -- tests/soak

How: a pytest plugin, put on PYTHONPATH from a temporary folder and loaded with `-p`, reads
`resource.getrusage` (this process and its waited-for children) before and after each test and
notes the difference. A module's fixtures count towards its first test. Processes a test
leaves running, or that a launched process does not wait for, are not counted; the command's
own CPU time is printed beside the sum.

Why: on two cores the suite is bounded by its CPU and by tests that wait in real time
(docs/benchmarks.md, "The suite"); the table says which files cost which, and whether the run
used the cores it had.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLUGIN_NAME = 'equimus_test_cpu'
PLUGIN = """\
import os, resource, time
import pytest

def _now():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime, time.monotonic()

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    a = _now()
    yield
    b = _now()
    path = os.path.join(os.environ['EQUIMUS_TEST_CPU_LOG'], str(os.getpid()))
    with open(path, 'a') as f:
        f.write(f'{item.nodeid}\\t{b[0] - a[0]:.3f}\\t{b[1] - a[1]:.3f}\\t{b[2] - a[2]:.3f}\\n')
"""


def table(folder: Path) -> dict[str, list[float]]:
    """{test file: [own CPU s, children's CPU s, wall s, tests]} from the plugin's notes."""
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for f in folder.iterdir():
        for line in f.read_text().splitlines():
            nodeid, own, children, wall = line.rsplit('\t', 3)
            row = by_file[nodeid.split('::')[0]]
            row[0] += float(own)
            row[1] += float(children)
            row[2] += float(wall)
            row[3] += 1
    return dict(by_file)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--top', type=int, default=25, help='files to list, by CPU (default 25)')
    p.add_argument('pytest_args', nargs=argparse.REMAINDER, help='-- then pytest arguments')
    ns = p.parse_args(argv)
    args = ns.pytest_args[1:] if ns.pytest_args[:1] == ['--'] else ns.pytest_args
    if not args:
        p.error('give the pytest arguments after --')
    with tempfile.TemporaryDirectory(prefix='equimus_test_cpu_') as tmp:
        tmp_path = Path(tmp)
        (tmp_path / f'{PLUGIN_NAME}.py').write_text(PLUGIN)
        log = tmp_path / 'log'
        log.mkdir()
        env = dict(os.environ, EQUIMUS_TEST_CPU_LOG=str(log))
        env['PYTHONPATH'] = os.pathsep.join(filter(None, [tmp, env.get('PYTHONPATH', '')]))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        cmd = [sys.executable, '-m', 'pytest', '-p', PLUGIN_NAME, *args]
        rc = subprocess.call(cmd, env=env)
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        rows = table(log)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    own = sum(r[0] for r in rows.values())
    children = sum(r[1] for r in rows.values())
    walls = sum(r[2] for r in rows.values())
    n = int(sum(r[3] for r in rows.values()))
    cores = os.cpu_count() or 1
    print(
        f'\n{n} tests in {wall:.1f} s wall; the command used {cpu:.1f} CPU s '
        f'({100 * cpu / (wall * cores):.0f} % of {cores} cores);\nthe tests {own + children:.1f} '
        f'CPU s (their workers {own:.1f}, the processes they waited for {children:.1f}); their '
        f'wall times add up to {walls:.1f} s'
    )
    print(f'\n{"CPU s":>8} {"own":>7} {"started":>8} {"wall s":>8} {"tests":>6}  file')
    for name, r in sorted(rows.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[: ns.top]:
        print(f'{r[0] + r[1]:8.1f} {r[0]:7.1f} {r[1]:8.1f} {r[2]:8.1f} {int(r[3]):6d}  {name}')
    return rc


if __name__ == '__main__':
    sys.exit(main())
