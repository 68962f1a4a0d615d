"""Experiments from the authors' ToCenter CSV, the dynamic evaluator, the mapper and resume."""

import pickle

import numpy as np
import pytest

from equimus_description.leg import load_leg
from equimus_identification import cli as identify_cli
from equimus_identification import data
from equimus_identification import dynamic as D
from equimus_identification.options import OptionError, parse_params
from equimus_identification.parallel import Mapper

TOCENTER = 'data/equimus/physical/dynamic/ToCenter_2025-02-20_21-06-20_A2B_data.csv'


@pytest.fixture(scope='module')
def exps(shared_dir):
    return data.load_tocenter(shared_dir / TOCENTER)


def test_tocenter_effective_groups_prepared_like_the_authors(exps, shared_dir):
    assert [tuple(e.meta['start_kpa']) for e in exps] == [
        tuple(map(float, p)) for p in data.EFFECTIVE_13
    ]
    for e in exps:
        assert len(e) == 401 and e.dt == pytest.approx(0.01)  # 4 s at 100 Hz
        assert np.all(e.command_kpa == 0.0)  # released to 0
        np.testing.assert_allclose(e.p0_kpa, e.meta['start_kpa'])
    # at the release the leg rests near the static equilibrium of the same pressures
    static = data.load_static_csv(
        shared_dir / 'data/equimus/physical/static/StaticPoint_effective_13.csv'
    )
    for e, q_static in zip(exps, static.q, strict=True):
        assert np.all(np.abs(e.q[0] - q_static) < 0.06), (e.name, e.q[0], q_static)
    # and ends near the (0, 0) equilibrium after 4 s
    assert np.all(np.abs(exps[-1].q[-1] - static.q[0]) < 0.06)
    assert len(data.load_tocenter(shared_dir / TOCENTER, groups='all')) == 36


def test_moving_average_keeps_length_and_constants():
    x = np.column_stack([np.full(30, 2.0), np.arange(30.0)])
    y = data.moving_average(x, 11)
    assert y.shape == x.shape
    np.testing.assert_allclose(y[:, 0], 2.0)
    np.testing.assert_allclose(y[10:20, 1], x[10:20, 1])  # linear inside: unchanged


def test_evaluator_prefers_the_paper_parameters_to_a_bad_guess(exps):
    leg = load_leg(parameter_set='table_v_dynamic')
    names = list(D.PAPER_PARAMS)
    x = np.array([D.leg_value(leg, n) for n in names])
    for loss in ('whole', 'shooting'):
        ev = D.Evaluator(exps[:4], names, leg=leg, loss=loss, sign_weight=0.0)
        good = ev(ev.to_unit(x))
        bad_x = x.copy()
        bad_x[names.index('actuators.baa.k')] *= 2.0
        assert np.isfinite(good) and good < ev(ev.to_unit(bad_x)), loss
    m = D.metrics(exps[:2], x, names, leg=leg)
    assert all(np.all(r['rmse'] < 0.1) for r in m)


def test_process_mapper_matches_serial_and_survives_pickling(exps):
    ev = D.Evaluator([e.head(0.5) for e in exps[:3]], ['actuators.maa.k', 'joints.hip.damping'])
    pts = [np.array([a, b]) for a in (0.2, 0.7) for b in (0.1, 0.9)]
    serial = list(map(ev, pts))
    ev2 = pickle.loads(pickle.dumps(ev))
    with Mapper('process', workers=2) as mp:
        par = mp(ev2, pts)
    np.testing.assert_allclose(par, serial, rtol=1e-12)
    assert len(set(np.round(serial, 12))) > 1


def test_checkpoint_resume_continues_the_generation_count(exps, tmp_path):
    ev = D.Evaluator(
        [e.head(0.4) for e in exps[:2]],
        ['actuators.maa.k', 'actuators.maa.area'],
        loss='shooting',
        horizon=0.2,
    )
    ck = tmp_path / 'ck.pkl'
    r1 = D.fit(ev, popsize=4, maxiter=2, checkpoint=str(ck), refine='', tol=0, log=lambda s: None)
    assert r1.generations == 2 and D.load_checkpoint(ck)['generation'] == 2
    lines = []
    r2 = D.fit(ev, popsize=4, maxiter=4, checkpoint=str(ck), refine='', tol=0, log=lines.append)
    assert r2.generations == 4 and lines[0].startswith('resuming')
    assert r2.loss <= r1.loss + 1e-12
    other = D.Evaluator([exps[0].head(0.4)], ['actuators.baa.k'], loss='shooting')
    with pytest.raises(ValueError, match='checkpoint'):
        D.fit(other, maxiter=1, checkpoint=str(ck), refine='', log=lambda s: None)


def test_cli_errors_are_clear(tmp_path, capsys):
    bad = tmp_path / 'x.txt'
    bad.write_text('nothing')
    assert identify_cli.main([str(bad), '--out', str(tmp_path / 'o')]) == 2
    assert 'not a rosbag2 folder' in capsys.readouterr().err
    with pytest.raises(OptionError, match="unknown parameter 'maa.kk'"):
        parse_params('maa.kk')
    assert identify_cli.main(['x.csv', '--params', 'maa.kk', '--out', str(tmp_path / 'p')]) == 2
    assert "equimus identify: unknown parameter 'maa.kk'" in capsys.readouterr().err
    assert not (tmp_path / 'p').exists()


def test_unknown_parameter_rejected(exps):
    with pytest.raises(ValueError, match='unknown parameters'):
        D.Evaluator(exps[:1], ['actuators.maa.stiffness'])


def test_set_b_is_the_hold_phase_of_the_tocenter_session(shared_dir):
    """StaticPoint_all_36 (Set B) is the ToCenter session's holds (mean of each hold's last
    0.5 s) within 0.4°: not an independent validation set. Every segment of the file is an
    experiment with its fill, hold and release phases."""
    held = data.holds_as_static_set(shared_dir / TOCENTER)
    set_b = data.load_static_csv(shared_dir / 'data/equimus/physical/static/StaticPoint_all_36.csv')
    for p, q in zip(set_b.pressures_kpa, set_b.q, strict=True):
        i = np.flatnonzero(np.all(held.pressures_kpa == p, axis=1))
        assert len(i) == 1
        assert np.all(np.abs(np.degrees(held.q[i[0]] - q)) < 0.4), (p, held.q[i[0]], q)
    segments = data.load_trajectory_csv(shared_dir / TOCENTER)
    assert len(segments) == 36 and len({e.meta['pair'] for e in segments}) == 36
    for e in segments[1:]:
        (f, a0, a1), (h, b0, b1), (r, c0, c1) = e.meta['phases']
        assert (f, h, r) == ('fill', 'hold', 'release') and a1 == b0 == 1.5 and b1 == c0
        assert 4.99 < c0 < 5.03 and np.all(e.command_kpa[e.t >= c0] == 0.0)


def test_the_least_squares_refinement_on_a_process_pool_ends_where_it_ends_serially(exps):
    """refine='lm' evaluates its finite differences on the fit's workers (scipy 1.16 on): the
    same point and loss as with builtins.map, the pool having been given the Jacobians' points
    (batches of one per parameter; the population's are three per parameter)."""
    names = ['actuators.maa.k', 'actuators.baa.k', 'joints.hip.damping']
    leg = load_leg(parameter_set='table_v_dynamic')
    ev = D.Evaluator([e.head(1.0) for e in exps[:3]], names, leg=leg, loss='shooting')
    x0 = [D.leg_value(leg, n) for n in names]

    def run(workers):
        return D.fit(
            ev, popsize=3, maxiter=1, workers=workers, seed=7, refine='lm', refine_maxfev=40,
            x0=x0, log=lambda s: None,
        )  # fmt: skip

    serial = run(map)
    batches = []
    with Mapper('process', workers=2) as mapper:

        def counted(fn, items):
            items = list(items)
            batches.append(len(items))
            return mapper(fn, items)

        pooled = run(counted)
    np.testing.assert_array_equal(pooled.x, serial.x)
    assert pooled.loss == serial.loss
    assert (len(names) in batches) == D.LSQ_WORKERS, batches
    assert serial.loss < ev(ev.to_unit(x0))  # it did refine
