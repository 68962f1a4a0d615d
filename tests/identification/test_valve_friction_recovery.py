"""Identification recovers the valve model and dry friction: a bag synthesised with a known dead
time, fill and vent time constants and hinge frictionloss (mocap-like noise, the recorder's
topics) goes through `equimus identify`, started 30-40 % off, and every one of them comes back
within 5 %; so does the valves' regulator (slack, integral gain and leak). Small on purpose (8
pressure steps, least squares only): seconds, not minutes."""

import numpy as np
import pytest
import yaml

from equimus_identification import cli as identify_cli
from equimus_identification import synth

VALVE_FRICTION = {
    'valve.dead_time': 0.08,
    'valve.fill_time_constant': 0.22,
    'valve.vent_time_constant': 0.07,
    'joints.hip.frictionloss': 0.03,
    'joints.knee.frictionloss': 0.012,
}
# the rest of the model at the ground-truth set (the valve's lag constant replaced)
OTHERS = {k: v for k, v in synth.GROUND_TRUTH.items() if k != 'valve.time_constant'}
START_FACTOR = {
    'valve.dead_time': 1.4,
    'valve.fill_time_constant': 0.65,
    'valve.vent_time_constant': 1.4,
    'joints.hip.frictionloss': 0.6,
    'joints.knee.frictionloss': 1.4,
}


def fit(tmp_path, bag, begin: dict, params: str, *options: str) -> dict:
    """`equimus identify` on the bag from the parameters `begin`, `params` free, the whole
    rollout's loss: the params.yaml it wrote."""
    start = tmp_path / 'start.yaml'
    start.write_text(yaml.safe_dump({'parameters': begin}))
    out = tmp_path / 'fit'
    rc = identify_cli.main(
        [str(bag), '--out', str(out), '--start', str(start), '--params', params, '--loss',
         'whole', *options, '--maxiter', '0', '--refine', 'lm', '--mapper', 'serial',
         '--no-plots']
    )  # fmt: skip
    assert rc == 0
    return yaml.safe_load((out / 'params.yaml').read_text())


@pytest.mark.timeout(600)
def test_identify_recovers_dead_time_fill_vent_and_friction(tmp_path):
    steps = synth.random_steps(8, seed=11)
    sim = synth.simulate_steps({**OTHERS, **VALVE_FRICTION}, steps_kpa=steps, hold_s=1.2)
    bag = synth.write_bag(tmp_path / 'bag', sim, noise_rad=0.0005, seed=2)
    begin = {**OTHERS, **{k: v * START_FACTOR[k] for k, v in VALVE_FRICTION.items()}}
    doc = fit(
        tmp_path,
        bag,
        begin,
        'chamber+friction',
        '--duration',
        '1.2',
        '--popsize',
        '1',
        '--refine-maxfev',
        '150',
    )
    fitted = doc['parameters']
    errors = {k: abs(fitted[k] - v) / v for k, v in VALVE_FRICTION.items()}
    assert all(e < 0.05 for e in errors.values()), errors
    assert not doc['identification']['at_bounds']
    assert np.isfinite(doc['identification']['rmse_mean_rad'])


STIFFENING = {
    'actuators.maa.area_slope': -8.0,
    'actuators.baa.area_slope': 3.0,
    'actuators.maa.area': 4.4e-4,
    'actuators.baa.area': 4.0e-4,
}


@pytest.mark.timeout(600)
def test_identify_recovers_the_muscles_area_against_length(tmp_path):
    """The area slopes, started at 0 (a constant area), come back within 5 % together with the
    areas they trade against, from steps that reach poses over the whole workspace."""
    truth = {**OTHERS, **VALVE_FRICTION, **STIFFENING}
    steps = synth.random_steps(12, seed=5)
    sim = synth.simulate_steps(truth, steps_kpa=steps, hold_s=1.2)
    bag = synth.write_bag(tmp_path / 'bag', sim, noise_rad=0.0005, seed=3)
    begin = {**truth, 'actuators.maa.area_slope': 0.0, 'actuators.baa.area_slope': 0.0}
    begin['actuators.maa.area'] *= 0.8
    begin['actuators.baa.area'] *= 1.2
    fitted = fit(
        tmp_path,
        bag,
        begin,
        'stiffening,actuators.maa.area,actuators.baa.area',
        '--duration',
        '1.2',
        '--popsize',
        '2',
        '--refine-maxfev',
        '100',
    )['parameters']
    errors = {k: abs(fitted[k] - v) / abs(v) for k, v in STIFFENING.items()}
    assert all(e < 0.05 for e in errors.values()), errors


REGULATOR = {
    'valve.slack.maa': 12.0,
    'valve.slack.baa': 6.0,
    'valve.integral_gain.maa': 1.8,
    'valve.integral_gain.baa': 0.9,
    'valve.integral_leak.maa': 1.4,
    'valve.integral_leak.baa': 1.2,
}
CHAMBER = {k: v for k, v in VALVE_FRICTION.items() if k.startswith('valve.')}


@pytest.mark.timeout(600)
def test_identify_recovers_the_valves_regulator(tmp_path):
    """Each valve's slack, integral gain and leak, started 30 % off, come back within 5 % from
    fills from vented (the slack only shows there) to levels over the whole range."""
    levels = np.random.default_rng(4).uniform(10.0, 45.0, (8, 2)).round(1)
    steps = ((0.0, 0.0),) + sum(((tuple(level), (0.0, 0.0)) for level in levels), ())
    truth = {**OTHERS, **CHAMBER, **REGULATOR}
    sim = synth.simulate_steps(truth, steps_kpa=steps, hold_s=1.5)
    bag = synth.write_bag(tmp_path / 'bag', sim, noise_rad=0.0005, seed=2)
    off = dict(zip(REGULATOR, (1.3, 0.7, 0.7, 1.3, 1.3, 0.7), strict=True))
    begin = {**OTHERS, **CHAMBER, **{k: v * off[k] for k, v in REGULATOR.items()}}
    fitted = fit(
        tmp_path,
        bag,
        begin,
        'regulator',
        '--duration',
        '3.0',
        '--popsize',
        '1',
        '--refine-maxfev',
        '120',
    )['parameters']
    errors = {k: abs(fitted[k] - v) / v for k, v in REGULATOR.items()}
    assert all(e < 0.05 for e in errors.values()), errors


@pytest.mark.timeout(600)
def test_identify_recovers_the_slacks_least_rate(tmp_path):
    """Each valve's slack_rate, started 30 % off, comes back within 5 % from fills from vented
    at low setpoints (below about rate · τ_fill, 22-26 kPa here, the rate, not the inflow, takes
    the slack up: above it the rate has no effect) and high ones."""
    rates = {'valve.slack_rate.maa': 120.0, 'valve.slack_rate.baa': 100.0}
    levels = np.random.default_rng(5).uniform(8.0, 40.0, (8, 2)).round(1)
    steps = ((0.0, 0.0),) + sum(((tuple(level), (0.0, 0.0)) for level in levels), ())
    truth = {**OTHERS, **CHAMBER, **REGULATOR, **rates}
    sim = synth.simulate_steps(truth, steps_kpa=steps, hold_s=1.5)
    bag = synth.write_bag(tmp_path / 'bag', sim, noise_rad=0.0005, seed=3)
    begin = {
        **OTHERS,
        **CHAMBER,
        **REGULATOR,
        **{k: v * f for (k, v), f in zip(rates.items(), (1.3, 0.7), strict=True)},
    }
    fitted = fit(
        tmp_path,
        bag,
        begin,
        'slack-rate',
        '--duration',
        '3.0',
        '--popsize',
        '3',
        '--refine-maxfev',
        '60',
    )['parameters']
    errors = {k: abs(fitted[k] - v) / v for k, v in rates.items()}
    assert all(e < 0.05 for e in errors.values()), errors


@pytest.mark.timeout(600)
def test_identify_recovers_the_muscles_damping_per_kpa(tmp_path):
    """Each muscle's c_per_kpa, started 30 % off, comes back within 5 % together with the
    constant damping it trades against (its c), from steps over the whole pressure range: the
    fit's in-place model (identification) and the built one (the simulator) agree."""
    truth_damping = {
        'actuators.maa.c': 4.0,
        'actuators.baa.c': 2.0,
        'actuators.maa.c_per_kpa': 0.5,
        'actuators.baa.c_per_kpa': 1.5,
    }
    steps = synth.random_steps(8, seed=6)
    truth = {**OTHERS, **CHAMBER, **truth_damping}
    sim = synth.simulate_steps(truth, steps_kpa=steps, hold_s=1.2)
    bag = synth.write_bag(tmp_path / 'bag', sim, noise_rad=0.0005, seed=4)
    off = dict(zip(truth_damping, (0.7, 1.3, 1.3, 0.7), strict=True))
    begin = {**OTHERS, **CHAMBER, **{k: v * off[k] for k, v in truth_damping.items()}}
    fitted = fit(
        tmp_path,
        bag,
        begin,
        'pressure-damping,actuators.maa.c,actuators.baa.c',
        '--duration',
        '1.2',
        '--popsize',
        '2',  # DE needs a population above the 4 parameters
        '--refine-maxfev',
        '120',
    )['parameters']
    errors = {k: abs(fitted[k] - v) / v for k, v in truth_damping.items()}
    assert all(e < 0.05 for e in errors.values()), errors
