"""benchmarks/profile_tests.py: each test file's CPU, its worker's own and that of the processes
its tests waited for, beside its wall time; the exit code is pytest's."""

import re
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parent.parent / 'benchmarks' / 'profile_tests.py'
BURN = 'import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end:\n    pass\n'


def test_own_and_started_cpu_by_file_and_pytests_exit_code(tmp_path):
    (tmp_path / 'test_own.py').write_text(
        'def test_burns():\n' + ''.join(f'    {line}\n' for line in BURN.splitlines())
    )
    (tmp_path / 'test_started.py').write_text(
        'import subprocess, sys\n'
        f'def test_child():\n    subprocess.run([sys.executable, "-c", {BURN!r}], check=True)\n'
        'def test_fails():\n    assert False\n'
    )
    proc = subprocess.run(
        [sys.executable, str(TOOL), '--', '-q', '-p', 'no:cacheprovider', str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # pytest's: one test failed
    assert '3 tests in ' in proc.stdout, proc.stdout
    rows = {}
    for line in proc.stdout.splitlines():
        m = re.match(r'\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\S+)$', line)
        if m:
            rows[Path(m[6]).name] = [float(m[i]) for i in range(1, 6)]
    own, started = rows['test_own.py'], rows['test_started.py']
    assert own[1] >= 0.35 and own[2] < 0.1 and own[4] == 1, rows
    assert started[2] >= 0.35 and started[1] < 0.2 and started[4] == 2, rows


def test_no_pytest_arguments_is_a_usage_error():
    proc = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and 'after --' in proc.stderr, proc.stderr
