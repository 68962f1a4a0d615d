"""python -m equimus_identification.leg_fit RUN: an adapt run's excitation refitted with other
settings, each parameter scored against the run's truth."""

import subprocess
import sys

import pytest
import yaml

from equimus_identification import synth

TRUTH = {'actuators.maa.k': 230.0, 'actuators.baa.area': 3.6e-4, 'joints.hip.damping': 0.4}


def _cli(*args):
    return subprocess.run(
        [sys.executable, '-m', 'equimus_identification.leg_fit', *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize('lag', ['free', 'fixed'])
def test_a_synthetic_run_is_refitted_and_scored_against_its_truth(tmp_path, lag):
    sim = synth.simulate_steps(TRUTH, synth.random_steps(6, seed=4), hold_s=1.0)
    synth.write_bag(tmp_path / 'bag_excite', sim, noise_rad=0.0)
    (tmp_path / 'truth.yaml').write_text(yaml.safe_dump({'parameters': TRUTH}))
    # the fixed-lag fit in this process; the free one's Jacobians on the default pool (every
    # usable core)
    fixed = ['--fixed-lag', '--workers', '1'] if lag == 'fixed' else []
    proc = _cli(tmp_path, '--nfev', '8', '--horizon', '2', *fixed)
    assert proc.returncode == 0, proc.stderr
    rows = {ln.split()[0]: ln for ln in proc.stdout.splitlines() if ln.startswith('actuators.')}
    assert 'truth 230' in rows['actuators.maa.k'], proc.stdout
    assert ('timing.pressure_lag' in proc.stdout) == (
        lag == 'free'
    ) and 'horizon 2 s' in proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    assert "at the truth's own parameters" in last and 'holding the truth' in last, last


def test_a_folder_without_an_excitation_is_one_line(tmp_path):
    proc = _cli(tmp_path / 'nothing')
    assert proc.returncode == 2 and 'Traceback' not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and 'no such bag' in proc.stderr
    proc = _cli(tmp_path, '--workers', '0')
    assert proc.returncode == 2 and proc.stderr.strip() == 'leg_fit: --workers must be 1 or more'


def test_from_truth_starts_the_fit_at_the_truths_own_parameters(tmp_path):
    sim = synth.simulate_steps(TRUTH, synth.random_steps(6, seed=4), hold_s=1.0)
    synth.write_bag(tmp_path / 'bag_excite', sim, noise_rad=0.0)
    proc = _cli(tmp_path, '--from-truth')
    assert proc.returncode == 2 and 'Traceback' not in proc.stderr, proc.stderr
    assert 'truth.yaml' in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    (tmp_path / 'truth.yaml').write_text(yaml.safe_dump({'parameters': TRUTH}))

    def errors(*args):  # one evaluation, no step: the values are where the fit started
        proc = _cli(tmp_path, '--nfev', '1', '--horizon', '2', '--workers', '1', *args)
        assert proc.returncode == 0, proc.stderr
        rows = [ln for ln in proc.stdout.splitlines() if ln.split()[:1] and ln.split()[0] in TRUTH]
        return [float(row.rsplit('(', 1)[1].split()[0]) for row in rows]  # '(+0.0 %)'

    assert errors('--from-truth') == [0.0, 0.0, 0.0]
    assert max(map(abs, errors())) > 5.0  # from the description's values


def test_ctrl_c_during_a_pooled_fit_is_one_line(tmp_path):
    """Ctrl-C while the fit's Jacobians run on two processes (which ignore it): exit 130, one
    line, no traceback (a worker still starting printed one), and no worker left behind."""
    import os
    import signal
    import time

    sim = synth.simulate_steps(TRUTH, synth.random_steps(6, seed=4), hold_s=1.0)
    synth.write_bag(tmp_path / 'bag_excite', sim, noise_rad=0.0)
    proc = subprocess.Popen(
        [sys.executable, '-m', 'equimus_identification.leg_fit', str(tmp_path), '--nfev', '200',
         '--horizon', '2', '--workers', '2'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, 'PYTHONUNBUFFERED': '1'}, start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert 'fitting' in proc.stdout.readline()
        time.sleep(1.5)  # the pool's workers started and evaluating
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, (out, err)
    assert err.strip() == 'leg_fit: interrupted; nothing written', err
    end = time.monotonic() + 10.0  # the workers (and the resource tracker) end with it

    def alive() -> bool:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return False
        return True

    while alive() and time.monotonic() < end:
        time.sleep(0.1)
    assert not alive(), 'a process of the fit outlived it'
