"""Ground truth: a bag synthesised from the simulation with known parameters (and mocap-like noise)
goes through `equimus identify`, which must recover every parameter the data determine within 5 %
and say which ones they do not determine.

CI-sized: all eleven parameters, 16 random steps of 1 s, a small DE budget plus least squares.
The benchmark (benchmarks/bench_identification.py) runs the same with 20 steps and more generations.
"""

import numpy as np
import pytest
import yaml

from equimus_description.leg import load_leg
from equimus_identification import cli as identify_cli
from equimus_identification import data, dynamic, synth

TRUTH = synth.GROUND_TRUTH
STEPS = synth.random_steps(16, seed=3)


@pytest.fixture(scope='module')
def truth_bag(tmp_path_factory):
    sim = synth.simulate_steps(TRUTH, steps_kpa=STEPS, hold_s=1.0)
    path = tmp_path_factory.mktemp('gt') / 'truth_bag'
    synth.write_bag(path, sim, noise_rad=0.002)
    return path, sim


def test_bag_reads_back_as_step_experiments(truth_bag):
    path, sim = truth_bag
    rec = data.load_bag(path)
    assert rec.joint_topic == '/joint_states' and rec.command_topic == '/valve/applied'
    exps = data.segment_steps(rec, max_duration=1.0)
    assert len(exps) == len(STEPS) - 1  # the first hold is not a step
    e = exps[0]
    assert e.dt == pytest.approx(1 / 120)
    np.testing.assert_allclose(e.command_kpa[-1], STEPS[1])
    np.testing.assert_allclose(e.p0_kpa, STEPS[0], atol=0.05)
    truth_q = data.resample(sim['t'], sim['q'], e.t + e.meta['t_step'])
    raw = np.sqrt(np.mean((e.q - truth_q) ** 2))
    start = np.sqrt(np.mean((e.start_q - truth_q) ** 2))
    assert 0.0015 < raw < 0.0025  # the fit compares with the raw angles (noise 0.002)
    assert start < 0.6 * raw  # restart states come from the local cubic fit


# Compute-bound (differential evolution on 2 workers): 211 s wall at load ~10 on 2 cores, past the
# suite's 300 s at load ~14; its wall time is the machine's share, not a property of the fit.
# Six generations: the least-squares refinement ends at the same optimum after 3, 6 or 12 of them
# (seeds 1-3 at 6, 1 and 4 at 12, 4 and 5 at 3: the largest error 2.366 % on actuators.maa.k
# each time); 21-24 s alone against 30-37 s at 12 (2026-12-05).
@pytest.mark.timeout(900)
def test_identify_recovers_every_determined_parameter_within_5_percent(truth_bag, tmp_path):
    path, _ = truth_bag
    out = tmp_path / 'fit'
    rc = identify_cli.main(
        [
            str(path),
            '--out',
            str(out),
            '--params',
            ','.join(TRUTH),
            '--loss',
            'shooting',
            '--horizon',
            '0.6',
            '--duration',
            '1.0',
            '--popsize',
            '4',
            '--maxiter',
            '6',
            '--workers',
            '2',
            '--seed',
            '1',
            '--no-plots',
        ]
    )
    assert rc == 0
    doc = yaml.safe_load((out / 'params.yaml').read_text())
    fitted, info = doc['parameters'], doc['identification']
    assert info['timestep_s'] == pytest.approx(1 / 600)  # the simulation node's step
    start = load_leg(parameter_set='table_v_dynamic')
    undetermined = set(info['not_determined'])
    # maa damping acts on the hip almost exactly like hip damping (J_A barely varies): only their
    # combination is seen through 0.002 rad of mocap noise, and the analysis must say so.
    assert 'actuators.maa.c' in undetermined
    assert len(undetermined) <= 2, undetermined
    for k, v in TRUTH.items():
        if k in undetermined:
            continue
        err = abs(fitted[k] - v) / v
        assert err < 0.05, (k, fitted[k], v)
        off = abs(dynamic.leg_value(start, k) - v) / v
        assert err < 0.5 * off, (k, 'did not move towards the truth from the start set')
    leg = load_leg(parameter_set='table_v_dynamic', overrides=str(out / 'params.yaml'))
    assert leg.actuators['baa'].area == pytest.approx(fitted['actuators.baa.area'])
    report = (out / 'report.md').read_text()
    assert report.count('truth_bag#') == len(STEPS) - 1
    assert '| actuators.maa.c |' in report and '**no**' in report
