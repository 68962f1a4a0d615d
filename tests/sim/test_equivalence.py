"""Table III in small: EquiMus must match the Lagrangian model at least as well as the paper's
published swing/static RMSE, and the massless baseline must be clearly worse."""

import json
import subprocess
import sys

import numpy as np
import pytest

from equimus_sim.equivalence import PAPER, run_equivalence


@pytest.fixture(scope='module')
def result():
    return run_equivalence(samples=4, static_samples=4, seed=3, duration=1.5)


def test_equimus_swing_at_or_below_paper(result):
    sw = result['swing']
    assert result['swing_valid'] >= 3
    assert 0 < result['max_loop_residual_m'] < 1e-4
    assert np.all(np.array(sw['equimus']['rmse']) <= np.array(PAPER['swing']['rmse'])), sw[
        'equimus'
    ]
    assert np.all(np.array(sw['equimus']['maxae']) <= np.array(PAPER['swing']['maxae'])), sw[
        'equimus'
    ]


def test_equimus_static_at_or_below_paper(result):
    st = result['static']['equimus']
    assert st['n'] == 4
    assert np.all(np.array(st['rmse']) <= np.array(PAPER['static']['rmse'])), st


def test_report_has_the_stance_row_within_paper(result):
    from equimus_sim.equivalence import format_table
    from equimus_sim.stance import PAPER_STANCE

    st = result['stance']['equimus']
    assert np.all(np.array(st['rmse']) <= np.array(PAPER_STANCE['rmse'])), st
    assert np.all(np.array(st['maxae']) <= np.array(PAPER_STANCE['maxae'])), st
    table = format_table(result)
    assert 'stance   paper' in table and 'solref' in table and 'condim' in table


def test_pure_baseline_is_clearly_worse(result):
    for test in ('swing', 'static'):
        eq = np.array(result[test]['equimus']['rmse'])
        pure = np.array(result[test]['pure']['rmse'])
        assert np.all(pure >= 5 * eq), (test, pure, eq)


def test_cli_prints_table_and_writes_plot_and_json(tmp_path):
    png, js = tmp_path / 'eq.png', tmp_path / 'eq.json'
    out = subprocess.run(
        [
            sys.executable,
            '-m',
            'equimus_sim.equivalence',
            '--samples',
            '1',
            '--seed',
            '5',
            '--duration',
            '0.5',
            '--plot',
            str(png),
            '--json',
            str(js),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert 'paper' in out.stdout and 'equimus' in out.stdout and 'pure' in out.stdout
    assert 'swing 1/1' in out.stderr  # progress output
    assert png.stat().st_size > 10000
    data = json.loads(js.read_text())
    assert data['samples'] == 1 and len(data['swing']['equimus']['rmse']) == 2
    assert len(data['stance']['equimus']['rmse']) == 2


def test_cli_rejects_bad_arguments():
    out = subprocess.run(
        [sys.executable, '-m', 'equimus_sim.equivalence', '--samples', '0'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and 'samples' in out.stderr
