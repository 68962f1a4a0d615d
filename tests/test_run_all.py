"""benchmarks/run_all.py (`make bench`): runs each benchmark that has a standard run, lists the
ones with arguments of their own instead of failing on them, and leaves docs/benchmarks.md (the
project's record of measurements) alone unless told to write it."""

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / 'benchmarks'
sys.path.insert(0, str(BENCHMARKS))

import run_all  # noqa: E402  (a script of the benchmarks folder)


@pytest.mark.parametrize(
    ('name', 'standard'),
    [
        ('bench_machine', True),  # run(quick: bool = False)
        ('bench_speed', True),  # issue 30's table
        ('bench_chain', False),  # no run(); --frames of its own
        ('bench_latency', False),  # run(modes, seconds, ...)
        ('bench_dds_transport', False),  # run(label, env, count)
    ],
)
def test_a_benchmark_runs_here_only_with_a_run_of_quick_alone(name, standard):
    assert (run_all.standard_run(run_all.load(BENCHMARKS / f'{name}.py')) is not None) is standard


def test_writes_the_figures_it_ran_and_names_the_rest_without_touching_the_record(
    tmp_path, repo_dir
):
    """Its default output is a new file under out/bench/, never the record."""
    record = repo_dir / 'docs' / 'benchmarks.md'
    before = hashlib.sha256(record.read_bytes()).hexdigest()
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / 'run_all.py'), '--quick', '--only', 'machine', 'chain'],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    wrote = [line.split('wrote ', 1)[1] for line in proc.stdout.splitlines() if 'wrote ' in line]
    assert len(wrote) == 1, proc.stdout
    out = Path(wrote[0])
    try:
        assert out.parent == repo_dir / 'out' / 'bench', out
        text = out.read_text()
    finally:
        out.unlink(missing_ok=True)
    assert '## machine' in text and '| frame_physics_us_back_to_back_p50 |' in text, text
    assert 'FAILED' not in text
    assert '`python benchmarks/bench_chain.py --help`' in text
    assert 'not run here (arguments of its own): python benchmarks/bench_chain.py' in proc.stdout
    assert hashlib.sha256(record.read_bytes()).hexdigest() == before
