"""The leg fit's shooting windows can start from fitted states (leg_fit.Starts): the evaluator
restarts a window from a given state and nothing else moves, and the sparse Jacobian that shares
evaluations between windows equals the dense one (real MuJoCo, a bag written and read back)."""

import numpy as np
import pytest

from equimus_description.leg import load_leg
from equimus_identification import data, intervals, leg_fit, synth

TRUTH = {'actuators.maa.k': 230.0, 'actuators.baa.area': 3.6e-4, 'joints.hip.damping': 0.4}


@pytest.fixture(scope='module')
def noisy_parts(tmp_path_factory):
    sim = synth.simulate_steps(TRUTH, synth.random_steps(10, seed=4), hold_s=1.0)
    bag = synth.write_bag(tmp_path_factory.mktemp('starts') / 'bag', sim, noise_rad=0.0015, seed=1)
    return leg_fit.excitation_parts(data.load_bag(bag), fraction=0.85)


def _evaluator(parts):
    return leg_fit._evaluator(parts.fit, load_leg(), leg_fit.NAMES)


def test_a_window_restarts_from_the_given_state_and_only_its_residuals_move(noisy_parts):
    ev = _evaluator(noisy_parts)
    x = np.array([leg_fit.D.leg_value(load_leg(), n) for n in leg_fit.NAMES])
    before = ev.residuals(x)
    starts = ev.start_states()
    assert len(ev.rollouts) >= 3
    ev.set_starts(range(len(ev.rollouts)), starts)  # the measured states again: nothing moves
    np.testing.assert_array_equal(ev.residuals(x), before)
    moved = starts[1] + np.array([0.01, -0.01, 0.2, 0.0])
    ev.set_starts([1], moved[None, :])
    after = ev.residuals(x)
    rows = ev.residual_rows()
    changed = np.flatnonzero(after != before)
    assert changed.min() >= rows[1].start and changed.max() < rows[1].stop
    assert after[rows[1].start] == pytest.approx(before[rows[1].start] + 0.01)  # the start angle


def test_the_sparse_jacobian_equals_the_dense_one_with_fewer_evaluations(noisy_parts):
    ev = _evaluator(noisy_parts)
    starts = leg_fit.Starts(ev)
    k = len(leg_fit.NAMES)
    x = np.array([leg_fit.D.leg_value(load_leg(), n) for n in leg_fit.NAMES])
    u = np.concatenate([np.clip(ev.to_unit(x), 1e-4, 1 - 1e-4), starts.u0])
    calls = []

    def residuals(v):
        calls.append(1)
        starts.apply(v[k:])
        return ev.residuals(ev.from_unit(v[:k]))

    r0 = residuals(u)
    mask = starts.mask(k)
    calls.clear()
    sparse = intervals.forward_jacobian(residuals, u, r0, mask=mask)
    n_sparse = len(calls)
    calls.clear()
    dense = intervals.forward_jacobian(residuals, u, r0)
    assert len(calls) == len(u) and n_sparse == k + 4
    np.testing.assert_allclose(sparse, dense, rtol=0, atol=1e-9)


def test_perturbed_starts_are_seeded_within_their_spread_and_bounds():
    leg = load_leg()
    a, b = (leg_fit.perturbed_start(leg, leg_fit.NAMES, s) for s in (1, 1))
    assert a == b and a != leg_fit.perturbed_start(leg, leg_fit.NAMES, 2)
    assert 'timing.pressure_lag' not in a and 'joints.knee.range.0' not in a
    assert not set(leg_fit.REAL_LEG_PARAMS) & set(a)  # 0 in the description: not scaled
    for n, v in a.items():
        lo, hi = leg_fit.bounds_of(n)
        nominal = leg_fit.D.leg_value(leg, n)
        assert lo <= v <= hi
        assert abs(v / nominal - 1.0) <= leg_fit.START_SPREAD + 1e-12 or v in (lo, hi), n


def test_a_multistart_interval_holds_every_start_s_endpoint(noisy_parts):
    """Two starts: the intervals add the endpoints' spread, so both endpoints lie inside. The
    starts' Jacobians run on two processes and each start ends where the same fit in this
    process ends."""
    leg = load_leg()
    short = [e.head(3.0) for e in noisy_parts.fit[:1]]
    lf = leg_fit.multistart(short, leg, 2, max_nfev=5, workers=2)
    ends = [
        leg_fit.fit(short, leg, start=s, max_nfev=5).values
        for s in (None, leg_fit.perturbed_start(leg, leg_fit.NAMES, 1))
    ]
    assert lf.dof == 1
    assert lf.values in ends
    moved = [n for n in leg_fit.NAMES if ends[0][n] != ends[1][n]]
    assert moved, 'the two starts ended at the same point: the test shows nothing'
    for n in moved:
        lo, hi = lf.interval[n]
        assert all(lo <= e[n] <= hi for e in ends), (n, lo, hi, [e[n] for e in ends])
        assert lf.std_error[n] > 0.0


def test_a_fit_whose_jacobian_runs_on_a_pool_is_the_fit_in_this_process(noisy_parts):
    """The same values, standard errors and number of simulations to the bit, the pool having
    run the finite differences (the fit and its intervals)."""
    leg = load_leg()
    short = [e.head(3.0) for e in noisy_parts.fit[:1]]
    here = leg_fit.fit(short, leg, max_nfev=5)
    with leg_fit.ResidualPool(short, leg, leg_fit.NAMES, None, leg_fit.HORIZON_S, False, 2) as pool:
        pooled = leg_fit.fit(short, leg, max_nfev=5, pool=pool)
        assert pool.evaluations >= 2 * len(leg_fit.NAMES)  # two Jacobians at the least
    assert pooled.values == here.values
    assert pooled.std_error == here.std_error and pooled.white_std_error == here.white_std_error
    assert pooled.evaluations == here.evaluations
    with pytest.raises(ValueError, match='another fit'):
        leg_fit.fit(short, leg, max_nfev=5, pool=pool, horizon=1.0)
