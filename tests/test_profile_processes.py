"""benchmarks/profile_processes.py: every Python process a command starts is counted, by kind,
and the command's exit code is its own."""

import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parent.parent / 'benchmarks' / 'profile_processes.py'
CHILD = (
    'import subprocess, sys; '
    'sys.exit(3 + subprocess.call([sys.executable, "-m", "json.tool", "-h"]))'
)


def test_a_command_and_its_python_children_are_counted_by_kind():
    proc = subprocess.run(
        [sys.executable, str(TOOL), '--', sys.executable, '-c', CHILD],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr  # the command's own code (0 + 3)
    assert '2 Python processes noted' in proc.stdout, proc.stdout
    lines = proc.stdout.splitlines()
    assert any(line.startswith('tool ') for line in lines), proc.stdout  # python -m json.tool
    assert any(line.startswith('python -c ') for line in lines), proc.stdout


def test_no_command_is_a_usage_error():
    proc = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and 'after --' in proc.stderr, proc.stderr
