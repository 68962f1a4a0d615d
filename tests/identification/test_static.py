"""Static identification on the authors' equilibria (paper Table IV / Sec. IV-D)."""

import numpy as np
import pytest

from equimus_description.statics import StaticParams, equilibrium
from equimus_identification import data, static


@pytest.fixture(scope='module')
def set_a(shared_dir):
    return data.load_static_csv(
        shared_dir / 'data/equimus/physical/static/StaticPoint_effective_13.csv'
    )


def test_effective_pairs_match_the_authors_file(set_a):
    assert sorted(map(tuple, set_a.pressures_kpa.astype(int).tolist())) == sorted(data.EFFECTIVE_13)


@pytest.mark.parametrize('method', ['pressure', 'torque'])
def test_set_a_fit_matches_or_beats_the_paper(set_a, method):
    f = static.fit(set_a, StaticParams(), method=method)
    # paper: pressure RMSE 0.887 / 0.861 kPa (Sec. IV-D); allow the torque-space fit 5 % more
    limit = np.array([0.887, 0.861]) * (1.0 if method == 'pressure' else 1.05)
    assert np.all(f.pressure_rmse_kpa <= limit), f.pressure_rmse_kpa
    e = static.angle_errors(set_a, f.params)
    # paper Table IV, Set A: RMSE 0.0170 / 0.0566 rad
    slack = 1.0 if method == 'pressure' else 1.1
    assert np.all(e['rmse'] <= np.array([0.0170, 0.0566]) * slack), e['rmse']
    assert np.all(f.k > 0) and np.all(f.S > 0)


def test_recovers_known_parameters_from_synthetic_equilibria():
    truth = StaticParams().with_identified(k=(250.0, 120.0), S=(4.0e-4, 3.6e-4))
    pressures = np.array(
        [[p1, p2] for p1 in (0, 10, 20, 30) for p2 in (0, 10, 20) if p1 + p2 <= 40], float
    )
    q = np.array([equilibrium(P, truth) for P in pressures])
    inside = np.all(
        (q > np.array(truth.theta_min) + 1e-3) & (q < np.array(truth.theta_max) - 1e-3), axis=1
    )
    s = data.StaticSet(pressures[inside], q[inside])
    f = static.fit(s, StaticParams(), method='pressure')
    np.testing.assert_allclose(f.k, truth.k, rtol=1e-3)
    np.testing.assert_allclose(f.S, truth.S, rtol=1e-3)
    assert np.all(f.pressure_rmse_kpa < 1e-2)


def test_too_few_points_is_a_clear_error(set_a):
    with pytest.raises(ValueError, match='at least 2'):
        static.fit(data.StaticSet(set_a.pressures_kpa[:1], set_a.q[:1]))
