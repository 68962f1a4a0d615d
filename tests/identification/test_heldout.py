"""`python -m equimus_identification.heldout` end to end on a small synthetic session: three
ToCenter-like segments (fill, 5 s hold, release) and their static points, simulated with known
parameters; one candidate, least squares of one Jacobian, every pair held out once. The table,
the per-candidate params.yaml and chosen.yaml are written, the chosen fit loads as a leg, and the
held-out figures are the held-out segments' replays (near the noise for a model that can fit
the data)."""

import json

import numpy as np
import yaml

from equimus_identification import data, evaluate, heldout, synth

PAIRS = ((30.0, 0.0), (10.0, 25.0), (0.0, 40.0))


def session(tmp_path):
    command = np.vstack(
        [np.repeat([p, (0.0, 0.0)], int(round(data.HOLD_S * 120)), axis=0) for p in PAIRS]
    )
    run = synth.simulate_command(synth.GROUND_TRUTH, command)
    n = int(round(2 * data.HOLD_S * 120))
    rows, static = [], []
    for k, p in enumerate(PAIRS):
        sl = slice(k * n, (k + 1) * n)
        t = run['t'][sl] - run['t'][sl][0]
        q = np.rad2deg(run['q'][sl])
        pairs = np.tile(np.r_[p, 0.0, 0.0] * 1e3, (len(t), 1))
        rows.append(np.column_stack([t, pairs, q]))
        hold = (t > data.HOLD_S - 0.5) & (t < data.HOLD_S)
        static.append([*p, *q[hold].mean(axis=0)])
    csv = tmp_path / 'ToCenter_synthetic.csv'
    header = (
        'relative_time,pressure1_start,pressure2_start,pressure1_end,pressure2_end,'
        'thigh_theta21,calf_theta32'
    )
    np.savetxt(csv, np.vstack(rows), delimiter=',', header=header, comments='')
    st = tmp_path / 'StaticPoint_synthetic.csv'
    np.savetxt(st, np.array(static), delimiter=',', header='P1,P2,theta1,theta2', comments='')
    return csv, st


def test_heldout_selection_end_to_end(tmp_path):
    csv, st = session(tmp_path)
    out = tmp_path / 'sel'
    args = [str(csv), str(st), '--out', str(out), '--valves', 'lag', '--frictions', 'none']
    args += ['--losses', 'whole', '--iterations', '1', '--fold-iterations', '1', '--workers', '1']
    args += ['--references', 'table_v_dynamic', '--start', str(tmp_path / 'start.yaml')]
    # start at the truth: one Jacobian keeps it there, so held-out figures sit near zero
    (tmp_path / 'start.yaml').write_text(
        yaml.safe_dump(
            {
                'parameters': dict(synth.GROUND_TRUTH),
                'identification': {'start_parameter_set': 'table_v_dynamic'},
            }
        )
    )
    assert heldout.main(args) == 0
    doc = json.loads((out / 'heldout.json').read_text())
    assert doc['chosen'] == 'lag+none+whole'
    folds = doc['candidates']['lag+none+whole']['folds']
    assert sorted(folds) == sorted(heldout.pair_key(p) for p in PAIRS)
    for key, fold in folds.items():
        assert list(fold['segments']) == [key] and list(fold['static']) == [key]
        assert np.all(np.array(fold['segments'][key]) < 0.01), (key, fold['segments'])
    ref = doc['summary']['table_v_dynamic']['in_sample']['mean']
    assert np.all(np.array(doc['summary']['lag+none+whole']['held_out']['mean']) < np.array(ref))
    md = (out / 'heldout.md').read_text()
    assert '| lag+none+whole **(chosen)** |' in md and 'table_v_dynamic (not refitted)' in md
    leg = evaluate.load_params(str(out / 'chosen.yaml'))
    assert leg.valve.is_lag
    # the cache makes the same command a resume: nothing is refitted
    before = {p.name: p.stat().st_mtime_ns for p in (out / 'cache').iterdir()}
    assert heldout.main(args) == 0
    assert before == {p.name: p.stat().st_mtime_ns for p in (out / 'cache').iterdir()}


def test_an_unknown_candidate_axis_value_is_named_with_the_known_ones(tmp_path, capsys):
    """Before any data is read: the files need not exist."""
    args = ['ToCenter.csv', 'Static.csv', '--out', str(tmp_path / 'sel'), '--forces', 'stiff']
    args += ['--valves']
    assert heldout.main([*args, 'chamber,orifice', '--references', '']) == 2
    err = capsys.readouterr().err
    assert "--valves 'orifice'" in err and "--forces 'stiff'" in err
    assert 'stiffening' in err and 'chamber-per-valve' in err and 'Traceback' not in err
