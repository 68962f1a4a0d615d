"""config/leg_fit.yaml, the shipped fit: it loads as the leg, carries its reproducing command, no
parameter sits on a bound, and one continuous replay of the whole ToCenter file stays within
issue 25's goal (0.045 / 0.055 rad)."""

import numpy as np
import yaml

from equimus_identification import dynamic, evaluate

TOCENTER = 'data/equimus/physical/dynamic/ToCenter_2025-02-20_21-06-20_A2B_data.csv'


def test_shipped_fit_loads_and_says_how_it_was_made(repo_dir):
    path = repo_dir / 'config' / 'leg_fit.yaml'
    doc = yaml.safe_load(path.read_text())
    info = doc['identification']
    assert 'python -m equimus_identification.heldout' in info['command']
    assert info['at_bounds'] == []
    leg = evaluate.load_params(str(path))
    assert not leg.valve.is_lag and leg.valve.dead_time > 0
    for n in info['free_parameters']:
        lo, hi = dynamic.BOUNDS[n]
        assert lo <= doc['parameters'][n] <= hi, n


def test_shipped_fit_replays_the_tocenter_file_within_the_goal(repo_dir, shared_dir):
    res = evaluate.evaluate(
        evaluate.load_params(str(repo_dir / 'config' / 'leg_fit.yaml')), [shared_dir / TOCENTER]
    )[0]
    assert np.all(res['rmse'] <= [0.045, 0.055]), res['rmse']
    old = evaluate.evaluate(
        evaluate.load_params(str(repo_dir / 'config/superseded/leg_fit_joint.yaml')),
        [shared_dir / TOCENTER],
    )[0]
    assert np.all(res['rmse'] < old['rmse'])
