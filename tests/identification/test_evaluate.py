"""`equimus evaluate`: open-loop replay of a bag, a static CSV and a dynamic CSV without pressure
columns, scored against recordings synthesised with known parameters (the true set must score
near the noise, a wrong set clearly worse), and the shipped real data read end to end."""

import numpy as np
import pytest

from equimus_bringup import cli as equimus_cli
from equimus_description.leg import load_leg
from equimus_identification import data, dynamic, evaluate, report, synth

TRUTH = synth.GROUND_TRUTH
STEPS = ((0, 0), (30, 0), (30, 20), (5, 35), (20, 10))


@pytest.fixture(scope='module')
def sim():
    return synth.simulate_steps(TRUTH, steps_kpa=STEPS, hold_s=1.2)


@pytest.fixture(scope='module')
def truth_file(tmp_path_factory):
    return report.write_params_yaml(
        tmp_path_factory.mktemp('p') / 'truth.yaml',
        TRUTH,
        {'start_parameter_set': 'table_v_dynamic'},
    )


def _rmse(results):
    return np.asarray(results[0]['rmse'])


def test_bag_replay_scores_the_true_parameters_near_the_noise(sim, truth_file, tmp_path):
    bag = synth.write_bag(tmp_path / 'bag', sim, noise_rad=0.002)
    truth = evaluate.evaluate(evaluate.load_params(str(truth_file)), [bag])
    wrong = evaluate.evaluate(evaluate.load_params('table_v_dynamic'), [bag])
    assert truth[0]['kind'] == 'bag'
    assert np.all(_rmse(truth) < 0.006), _rmse(truth)  # 2 mrad noise + start-state error
    assert np.all(_rmse(wrong) > 3 * _rmse(truth)), (_rmse(wrong), _rmse(truth))
    m = truth[0]['metrics'][0]
    assert len(m['segments']) == len(STEPS)  # the start and one per pressure step
    measured = evaluate.evaluate(evaluate.load_params(str(truth_file)), [bag], 'measured')
    assert np.all(_rmse(measured) < 0.006)
    # the command line, with report and plot
    rc = equimus_cli.main(['evaluate', str(truth_file), str(bag), '--out', str(tmp_path / 'ev')])
    assert rc == 0
    assert (tmp_path / 'ev' / 'evaluation.png').stat().st_size > 1000
    assert 'Whole recording' in (tmp_path / 'ev' / 'evaluation.md').read_text()


def test_static_csv_rest_angles(truth_file, tmp_path):
    pressures = np.array([[0, 0], [20, 0], [0, 25], [15, 15], [40, 5]], float)
    held = data.StaticSet(pressures, np.tile([1.3, 0.8], (len(pressures), 1)), 'synthetic')
    leg = load_leg(parameter_set='table_v_dynamic', overrides=dict(TRUTH))
    names = list(dynamic.BOUNDS)
    x = [dynamic.leg_value(leg, n) for n in names]
    rest = np.array(
        [m['q_rest'] for m in dynamic.metrics(data.static_experiments(held), x, names, leg=leg)]
    )
    csv = tmp_path / 'StaticPoint_synthetic.csv'
    rows = np.column_stack([pressures, np.rad2deg(rest)])
    np.savetxt(csv, rows, delimiter=',', header='P1,P2,theta1,theta2', comments='')
    truth = evaluate.evaluate(evaluate.load_params(str(truth_file)), [csv])
    wrong = evaluate.evaluate(evaluate.load_params('table_v_dynamic'), [csv])
    assert truth[0]['kind'] == 'static'
    # started 0.2-0.5 rad away, the model comes to rest at the angles it produced before
    assert np.all(_rmse(truth) < 2e-3), _rmse(truth)
    assert np.all(_rmse(wrong) > 0.02), _rmse(wrong)


def _trajectory_csv(path, sim, split_at):
    """The EquiMus trajectory format: relative_time restarting per segment, Pa and degrees,
    no measured-pressure columns; the second segment starts with the command `split_at`."""
    cut = int(np.argmax(np.all(sim['command'] == split_at, axis=1)))
    rows = []
    for a, b in ((0, cut), (cut, len(sim['t']))):
        t = sim['t'][a:b] - sim['t'][a]
        rows.append(np.column_stack([t, sim['command'][a:b] * 1e3, np.rad2deg(sim['q'][a:b])]))
    header = 'relative_time,current_pressure1,current_pressure2,thigh_theta21,calf_theta32'
    np.savetxt(path, np.vstack(rows), delimiter=',', header=header, comments='')
    return path


def test_dynamic_csv_without_pressure_columns(sim, truth_file, tmp_path):
    csv = _trajectory_csv(tmp_path / 'traj.csv', sim, split_at=STEPS[2])  # valve settled
    assert data.csv_kind(csv) == 'trajectory'
    assert len(data.load_any([csv])['dynamic']) == 2  # identify takes it as dynamic data too
    truth = evaluate.evaluate(evaluate.load_params(str(truth_file)), [csv])
    wrong = evaluate.evaluate(evaluate.load_params('table_v_dynamic'), [csv])
    # the default protocol: one continuous replay, scored per segment
    assert truth[0]['kind'] == 'dynamic' and len(truth[0]['metrics']) == 1
    assert len(truth[0]['metrics'][0]['segments']) == 2
    assert np.all(_rmse(truth) < 0.01), _rmse(truth)  # 120 Hz → 100 Hz resampling only
    assert np.all(_rmse(wrong) > 3 * _rmse(truth))
    restarted = evaluate.evaluate(evaluate.load_params(str(truth_file)), [csv], protocol='segments')
    assert len(restarted[0]['metrics']) == 2 and np.all(_rmse(restarted) < 0.01)
    # asking for measured pressures that the file does not have: a message, exit 2
    rc = equimus_cli.main(['evaluate', str(truth_file), str(csv), '--pressure', 'measured'])
    assert rc == 2


def test_segment_pairs_layout_and_phases(tmp_path, truth_file):
    """A dynamic CSV with only pressure1_start, pressure2_start, pressure1_end, pressure2_end:
    the start pair is commanded from each segment's first sample and the end pair from
    data.HOLD_S on. Dropping the command log from such a file changes nothing; the evaluation
    reports fill, hold and release errors; an unknown layout is refused in one line that lists
    the usable columns."""
    pairs = [((30.0, 0.0), (0.0, 0.0)), ((10.0, 25.0), (0.0, 0.0)), ((0.0, 40.0), (5.0, 0.0))]
    seg_s = 2 * data.HOLD_S
    command = np.vstack(
        [np.repeat([a, b], int(round(data.HOLD_S * 120)), axis=0) for a, b in pairs]
    )
    run = synth.simulate_command(TRUTH, command)
    n = int(round(seg_s * 120))
    logged, bare = [], []
    for k, (a, b) in enumerate(pairs):
        sl = slice(k * n, (k + 1) * n)
        t = run['t'][sl] - run['t'][sl][0]
        q = np.rad2deg(run['q'][sl])
        head = np.column_stack([t, np.tile(np.r_[a, b] * 1e3, (len(t), 1))])
        logged.append(np.column_stack([head, run['command'][sl] * 1e3, q]))
        bare.append(np.column_stack([head, q]))
    pair_cols = 'relative_time,pressure1_start,pressure2_start,pressure1_end,pressure2_end'
    angles = 'thigh_theta21,calf_theta32'
    with_log, without = tmp_path / 'logged.csv', tmp_path / 'pairs.csv'
    np.savetxt(
        with_log,
        np.vstack(logged),
        delimiter=',',
        header=f'{pair_cols},current_pressure1,current_pressure2,{angles}',
        comments='',
    )
    np.savetxt(without, np.vstack(bare), delimiter=',', header=f'{pair_cols},{angles}', comments='')
    assert data.csv_kind(without) == 'segments' and data.csv_kind(with_log) == 'tocenter'
    a, b = data.load_trajectory_csv(with_log), data.load_trajectory_csv(without)
    assert len(a) == len(b) == 3
    for ea, eb in zip(a, b, strict=True):
        np.testing.assert_array_equal(ea.command_kpa, eb.command_kpa)
        assert [p[0] for p in eb.meta['phases']] == ['fill', 'hold', 'release']
    res = evaluate.evaluate(evaluate.load_params(str(truth_file)), [without])[0]
    assert set(res['phases']) == {'fill', 'hold', 'release'}
    assert np.all(res['rmse'] < 0.01), res['rmse']  # the true model, one continuous replay
    md = evaluate.markdown([res], 'truth', 'command')
    assert '| fill |' in md and '| release |' in md
    bad = tmp_path / 'other.csv'
    bad.write_text('relative_time,pressure1_start,thigh_theta21\n0,0,0\n')
    with pytest.raises(data.DataError) as exc:
        data.csv_kind(bad)
    msg = str(exc.value)
    assert '\n' not in msg and 'pressure1_end' in msg and 'current_pressure1' in msg, msg


def test_bad_inputs_exit_2_with_a_message(tmp_path, capsys):
    bad = tmp_path / 'half.csv'
    bad.write_text('relative_time,current_pressure1\n0,0\n')
    assert evaluate.main(['table_v_dynamic', str(bad)]) == 2
    assert 'missing' in capsys.readouterr().err
    assert evaluate.main([str(tmp_path / 'nope.yaml'), str(bad)]) == 2


def test_real_tocenter_and_static_data(shared_dir):
    phys = shared_dir / 'data/equimus/physical'
    res = evaluate.evaluate(
        evaluate.load_params('table_v_dynamic'),
        [phys / 'static/StaticPoint_effective_13.csv', next(phys.glob('dynamic/ToCenter_*.csv'))],
    )
    assert [r['kind'] for r in res] == ['static', 'dynamic']
    # one continuous replay of the session, scored per group (holds included) and per phase
    assert len(res[1]['metrics']) == 1 and len(res[1]['metrics'][0]['segments']) == 36
    assert set(res[1]['phases']) == {'fill', 'hold', 'release'}
    # the knee's fills: every pair with the BAA filled moves it (36 segments, 6 with P2 = 0)
    knee = [f for f in res[1]['fills'] if f['joint'] == 1 and f['command_kpa'][1] > 0]
    assert len(knee) >= 28 and all(np.isfinite(f['rig']['t10']) for f in knee)
    for r in res:
        assert np.all(np.isfinite(r['rmse'])) and np.all(r['rmse'] < 0.3)


def _recorded(t, q, command, *segments):
    """A recording of consecutive segments `seg#1`, `seg#2`, ... with the given phases."""
    phases = [(*ph, f'seg#{i}') for i, seg in enumerate(segments, 1) for ph in seg]
    return data.Experiment(
        name='seg',
        t=t,
        q=q,
        qd=np.gradient(q, t[1] - t[0], axis=0),
        command_kpa=command,
        p0_kpa=np.zeros(2),
        meta={'phases': phases},
    )


def test_fill_onsets_time_and_overshoot_of_rig_and_model():
    """A knee that starts late, ramps at 1 rad/s past its final angle and creeps back (the rig's
    fills, issue 25) against a model that starts early and ramps slower to it without
    overshoot; the hip does not move and gets no row."""
    t = np.round(np.arange(0.0, 6.0, 0.01), 10)
    rig = np.interp(t, [0.0, 0.3, 0.6, 1.0, 5.0, 6.0], [0.0, 0.0, 0.3, 0.2, 0.2, 0.0])
    model = np.interp(t, [0.0, 0.1, 0.5, 5.0, 6.0], [0.0, 0.0, 0.2, 0.2, 0.0])
    q = np.stack([np.full_like(t, 1.2), rig], axis=1)
    q_sim = np.stack([np.full_like(t, 1.2), model], axis=1)
    command = np.tile([0.0, 20.0], (len(t), 1))
    command[t >= 5.0] = 0.0
    e = _recorded(t, q, command, [('fill', 0.0, 1.5), ('hold', 1.5, 5.0), ('release', 5.0, 6.0)])
    (row,) = evaluate.fill_onsets(e, q_sim)
    assert row['segment'] == 'seg#1' and row['joint'] == 1 and row['command_kpa'] == [0.0, 20.0]
    assert row['change'] == pytest.approx(0.2)
    assert row['rig']['t10'] == pytest.approx(0.32, abs=0.011)
    assert row['rig']['t50'] == pytest.approx(0.40, abs=0.011)
    assert row['rig']['overshoot'] == pytest.approx(0.1, abs=1e-6)
    assert row['model']['t10'] == pytest.approx(0.14, abs=0.011)
    assert row['model']['t50'] == pytest.approx(0.30, abs=0.011)
    assert row['model']['overshoot'] == pytest.approx(0.0, abs=1e-9)
    md = evaluate.markdown(
        [
            {
                'path': 'x.csv',
                'kind': 'dynamic',
                'metrics': [],
                'phases': {},
                'fills': [row],
                'rmse': np.zeros(2),
                'maxae': np.zeros(2),
            }
        ],
        'p.yaml',
        'command',
    )
    assert '| seg#1 | 0/20 | θ2 | 0.32 / 0.40 | 0.14 / 0.30 | 0.100 | 0.000 |' in md


def test_timing_finds_each_windows_shift_and_what_is_left_is_shape():
    """A rig that moves 0.05 s after the model on its fill and 0.03 s before it on its release:
    `timing` finds both shifts (the model early, then late), and aligned the two agree but for
    the shape error added to the hold; a segment in which nothing moves gets no shift."""
    t = np.round(np.arange(0.0, 12.0, 0.005), 10)

    def knee(fill_at, release_at):
        return np.interp(
            t, [0, fill_at, fill_at + 0.4, release_at, release_at + 0.3, 12], [1, 1, 0.3, 0.3, 1, 1]
        )

    model = knee(0.20, 5.20)
    rig = knee(0.25, 5.17) + np.where((t > 2.0) & (t < 4.0), 0.02, 0.0)
    q = np.stack([np.full_like(t, 1.3), rig], axis=1)
    q_sim = np.stack([np.full_like(t, 1.3), model], axis=1)
    q[t >= 10.0], q_sim[t >= 10.0] = q[-1], q_sim[-1]  # segment 2: still
    phases = [('fill', 0.0, 1.5), ('hold', 1.5, 5.0), ('release', 5.0, 10.0)]
    e = _recorded(
        t, q, np.zeros((len(t), 2)), phases, [('fill', 10.0, 11.0), ('release', 11.0, 12.0)]
    )
    moved, still = evaluate.timing(e, q_sim)
    assert moved['fill_shift_s'] == pytest.approx(0.05, abs=1e-9)
    assert moved['release_shift_s'] == pytest.approx(-0.03, abs=1e-9)
    shape = 0.02 * np.sqrt(2.0 / 10.0)  # the hold's 0.02 rad over 2 s of the segment's 10
    assert moved['rmse'][1] > 2 * shape
    assert moved['rmse_aligned'][1] == pytest.approx(shape, rel=0.01)
    assert moved['rmse_aligned'][0] == 0.0
    assert still['fill_shift_s'] is None and still['release_shift_s'] is None
    md = '\n'.join(evaluate._timing_markdown([moved, still]))
    assert '| seg#1 | +0.050 | -0.030 |' in md and '| seg#2 | – | – |' in md
