"""`equimus excite`: the designed pressure trajectory respects the valve limits, and on synthetic
data from the simulator with known parameters every parameter is recovered within 2 % and all but
the MAA damping are determined, which ToCenter-style releases of the same length determine less
than half as well.

The design itself is the output of the command in docs/identification.md (a few minutes on two
cores), stored beside this test; `test_design_improves_the_criterion` runs the optimiser small.
"""

import pathlib

import numpy as np
import pytest
import yaml

from equimus_description.leg import load_leg
from equimus_description.valve import HARD_MAX_KPA, P_MIN_KPA
from equimus_identification import cli as identify_cli
from equimus_identification import dynamic, excite, synth

DESIGN = yaml.safe_load((pathlib.Path(__file__).parent / 'excite_design.yaml').read_text())
TRUTH = synth.GROUND_TRUTH
NAMES = list(TRUTH)
NOISE = 0.0003  # rad: see docs/identification.md (what 2 mrad would give)


def _command(levels):
    return excite.command_from_levels(levels, DESIGN['hold_s'], DESIGN['slew_kpa_s'])


def test_trajectory_within_range_and_slew():
    cmd = _command(DESIGN['levels_kpa'])
    assert cmd.min() >= P_MIN_KPA and cmd.max() <= HARD_MAX_KPA
    per_sample = np.abs(np.diff(cmd, axis=0)).max()
    assert per_sample <= DESIGN['slew_kpa_s'] / excite.RATE_HZ + 1e-9
    assert len(cmd) / excite.RATE_HZ == pytest.approx(DESIGN['duration_s'])
    np.testing.assert_allclose(cmd[[0, -1]], 0.0)  # starts and ends vented


def test_design_improves_the_criterion():
    nominal = {n: dynamic.leg_value(load_leg(parameter_set='table_v_dynamic'), n) for n in NAMES}
    r = excite.design(
        nominal, NAMES, 4, 1.0, DESIGN['slew_kpa_s'], 'logdet', iterations=3, progress=False
    )
    assert r['history'] == sorted(r['history'])  # (1+1): never worse
    ref = excite.criteria(excite.information(_command(excite.tocenter_levels(4)), nominal, NAMES))
    assert r['criteria']['logdet'] > ref['logdet']


def _identify(tmp_path, levels, name):
    sim = synth.simulate_command(TRUTH, _command(levels))
    bag = synth.write_bag(tmp_path / name, sim, noise_rad=NOISE, seed=2)
    out = tmp_path / f'fit_{name}'
    argv = [str(bag), '--out', str(out), '--bags', 'whole', '--params', ','.join(NAMES)]
    argv += ['--loss', 'shooting', '--horizon', str(excite.HORIZON_S), '--popsize', '2']
    argv += ['--maxiter', '2', '--refine-maxfev', '500', '--workers', '2', '--no-plots']
    assert identify_cli.main(argv) == 0
    return yaml.safe_load((out / 'params.yaml').read_text())


def test_designed_trajectory_recovers_every_parameter_within_2_percent(tmp_path):
    doc = _identify(tmp_path, DESIGN['levels_kpa'], 'designed')
    err = {k: abs(doc['parameters'][k] - v) / v for k, v in TRUTH.items()}
    assert max(err.values()) < 0.02, err
    # every parameter determined but the MAA damping (docs/identification.md: its predicted
    # error is 1.4 % here), which the design determines better than releases do (below)
    assert set(doc['identification']['not_determined']) <= {'actuators.maa.c'}
    designed_rse = doc['identification']['relative_std_error']['actuators.maa.c']
    # the same length of ToCenter-style releases, the same noise: the identifiability analysis
    # (at the truth) leaves the MAA damping undetermined, at over twice the design's error
    sim = synth.simulate_command(TRUTH, _command(excite.tocenter_levels(len(DESIGN['levels_kpa']))))
    sim['q'] = sim['q'] + np.random.default_rng(2).normal(0.0, NOISE, sim['q'].shape)
    ev = dynamic.Evaluator(
        [excite.experiment(sim)],
        NAMES,
        leg=sim['leg'],
        loss='shooting',
        horizon=excite.HORIZON_S,
        dt=synth.SIM_DT,
    )
    rse = dynamic.identifiability(ev, [TRUTH[n] for n in NAMES])['relative_std_error']
    assert rse['actuators.maa.c'] > dynamic.DETERMINED_RSE, rse
    assert rse['actuators.maa.c'] > 2.0 * designed_rse, (rse, designed_rse)
