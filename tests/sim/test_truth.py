"""The emulated rig's truth (equimus_sim.truth): draws, files, the VPPE's regulation error."""

import math
from dataclasses import replace

import numpy as np
import pytest

from equimus_description.leg import load_leg
from equimus_identification import dynamic as D
from equimus_sim import truth as T


def test_default_is_the_nominal_model():
    t = T.RigTruth()
    assert t.is_nominal and t.overrides() == {}
    assert t.board_keywords() == {} and t.mocap_delay_frames(120.0) == 0
    assert D.leg_value(t.leg(), 'actuators.maa.k') == D.leg_value(load_leg(), 'actuators.maa.k')
    assert T.parse_spec('') is T.NOMINAL and T.parse_spec('nominal') is T.NOMINAL


@pytest.mark.parametrize('seed', [1, 2, 3])
def test_a_draw_is_reproducible_within_its_ranges_and_differs_from_the_model(seed):
    a, b = T.draw(seed), T.draw(seed)
    assert a == b and a.seed == seed and not a.is_nominal
    assert a != T.draw(seed + 100)
    leg, nominal = a.leg(), load_leg()
    for name, value in a.overrides().items():
        span = T.RANGES[name]
        assert span.lo <= value <= span.hi, (name, value)
        assert D.leg_value(leg, name) == pytest.approx(value)
    # The plant differs from what the stack believes in the quantities that matter most.
    assert D.leg_value(leg, 'actuators.maa.k') != D.leg_value(nominal, 'actuators.maa.k')
    assert leg.valve.dead_time != nominal.valve.dead_time
    for name in ('hysteresis_kpa', 'repeatability_kpa'):
        assert all(0.0 <= v <= 3.0 for v in getattr(a, name))  # the VPPE datasheet's 3 kPa
    assert 0.002 <= a.mocap_latency_s <= 0.015
    # DAC/ADC channel errors are the board's own keywords; a default draw leaves them ideal
    assert a.dac_gain == (1.0, 1.0) and a.dac_offset_kpa == (0.0, 0.0)
    assert set(a.board_keywords()) <= {'regulation'}
    c = T.draw(seed, channel_errors=True)
    assert c.overrides() == a.overrides() and c.hysteresis_kpa == a.hysteresis_kpa
    assert set(c.board_keywords()) == {'regulation', *T.CHANNEL_ERRORS}


def test_dump_and_load_round_trip_and_the_parameters_are_a_leg_override_file(tmp_path):
    t = T.draw(5)
    path = T.dump(t, tmp_path / 'truth.yaml')
    assert T.load(path) == t and T.parse_spec(str(path)) == t
    assert T.parse_spec('random:5') == t
    # a hand-written subset: the rest stays nominal
    (tmp_path / 'hand.yaml').write_text(
        'parameters:\n  actuators.maa.k: 220.0\nhysteresis_kpa: 2.0\nmocap_latency_s: 0.01\n'
    )
    h = T.load(tmp_path / 'hand.yaml')
    assert h.overrides() == {'actuators.maa.k': 220.0} and h.hysteresis_kpa == (2.0, 2.0)
    assert h.mocap_delay_frames(120.0) == 1


def test_a_fitted_parameter_file_is_a_truth_with_ideal_devices(repo_dir):
    """config/leg_fit.yaml (the real leg's fit) as the plant: its parameters, its regulator
    valves, nothing else; a truth file with an unknown key is still refused (below)."""
    import yaml

    fit = repo_dir / 'config' / 'leg_fit.yaml'
    t = T.parse_spec(str(fit))
    assert t.overrides() == yaml.safe_load(fit.read_text())['parameters']
    assert replace(t, parameters=()) == T.NOMINAL  # every device ideal
    valve = t.leg().valve
    assert valve.has_regulator and valve.dead_time == t.overrides()['valve.dead_time']
    assert 'leg_fit.yaml' in t.note


@pytest.mark.parametrize(
    ('text', 'words'),
    [
        ('bogus: 1\n', 'unknown key'),
        ('parameters:\n  actuators.maa.kk: 1.0\n', 'parameters'),
        ('dac_gain: 3.0\n', 'dac_gain'),
        ('hysteresis_kpa: [1, 2, 3]\n', 'one number or two'),
        ('mocap_latency_s: -1\n', 'mocap_latency_s'),
    ],
)
def test_bad_truth_files_are_one_line_errors(tmp_path, text, words):
    p = tmp_path / 'truth.yaml'
    p.write_text(text)
    with pytest.raises(T.TruthError, match=words) as info:
        T.load(p)
    assert '\n' not in str(info.value)


def test_bad_specs():
    with pytest.raises(T.TruthError, match='random:SEED'):
        T.parse_spec('random:x')
    with pytest.raises(T.TruthError, match='does not exist'):
        T.parse_spec('no/such/truth.yaml')


def test_hysteresis_settles_below_from_below_and_above_from_above():
    r = T.Regulation(2.0, 0.0)
    assert r(30.0) == pytest.approx(29.0)  # filled from vent: approached from below
    assert r(30.5) == pytest.approx(29.5)  # still rising: follows h/2 below
    assert r(29.8) == pytest.approx(29.5)  # turned back inside the play: the level holds
    assert r(40.0) == pytest.approx(39.0)
    assert r(20.0) == pytest.approx(21.0)  # from above: h/2 high
    assert r(20.8) == pytest.approx(21.0)
    assert r(0.0) == 0.0  # venting is exact
    assert r(10.0) == pytest.approx(9.0)


def test_repeatability_is_random_per_move_bounded_and_holds_while_the_setpoint_holds():
    r = T.Regulation(0.0, 3.0, seed=4)
    errs = []
    for k in range(4000):
        u = 20.0 + 10.0 * ((k * 7919) % 13) / 13.0
        first = r(u)
        assert r(u) == first  # a held setpoint is regulated to the same level
        errs.append(first - u)
    e = np.array(errs)
    assert abs(e.mean()) < 0.1 and 0.5 < e.std() < 1.0  # σ = r/4 = 0.75 kPa
    assert np.mean(np.abs(e) < 3.0) > 0.99
    assert T.draw(3).regulation(0) is not None and T.NOMINAL.regulation(0) is None


def test_board_valve_regulates_to_the_truths_level():
    """The board emulator's valve goes to the VPPE's regulated level, not the setpoint."""
    from equimus_hw.valve.board_emulator import BoardEmulator

    cal_board = BoardEmulator(channels=2, regulation=[T.Regulation(4.0, 0.0), None])
    ideal = BoardEmulator(channels=2)
    code = cal_board.cal.kpa_to_code(30.0)
    for b in (cal_board, ideal):
        for v in b.valves:
            v.set_code(code, 0.0)
            for _ in range(300):
                v.advance(0.0, 0.01)
    p_reg, p_ideal = cal_board.valves[0].pressure, ideal.valves[0].pressure
    assert p_ideal == pytest.approx(cal_board.cal.code_to_kpa(code), abs=0.05)
    assert p_reg == pytest.approx(p_ideal - 2.0, abs=0.05)
    assert cal_board.valves[1].pressure == pytest.approx(p_ideal, abs=0.05)
    assert math.isfinite(p_reg)
