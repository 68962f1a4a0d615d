"""A channel's DAC-chain gain and offset: what the emulated valves do with them, what the driver
does with a measured one (per channel, never above 50 kPa nor above the board's largest code),
and the calibration file `equimus check rig` writes and the driver loads."""

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from equimus_description.config import ConfigError
from equimus_description.interface import ACTUATORS
from equimus_hw.valve.board_emulator import BoardEmulator
from equimus_hw.valve.board_model import ValveModel, valve_models
from equimus_hw.valve.calibration import (
    DAC_GAIN_RANGE,
    DAC_OFFSET_LIMIT_KPA,
    HARD_MAX_KPA,
    CalibrationFile,
    CalibrationFileError,
    ChannelFit,
    ValveCalibration,
    default_calibration_path,
    load_calibration,
    with_fit,
    write_calibration,
)
from equimus_hw.valve.config import DriverConfig

NOMINAL = ValveCalibration()
BOARD_MAX_CODE = NOMINAL.max_code  # the firmware's MAX_CODE: 341

gains = st.floats(*DAC_GAIN_RANGE)
offsets = st.floats(-DAC_OFFSET_LIMIT_KPA, DAC_OFFSET_LIMIT_KPA)


def test_the_emulated_chain_is_gain_and_offset_on_the_nominal_pressure():
    valve = ValveModel(NOMINAL, dac_gain=1.06, dac_offset_kpa=-2.5)
    code = NOMINAL.kpa_to_code(30.0)
    assert valve.target(code) == pytest.approx(1.06 * NOMINAL.code_to_kpa(code) - 2.5)
    assert ValveModel(NOMINAL).target(code) == NOMINAL.code_to_kpa(code)  # neutral by default
    # below the 0.1 V the valve sees, it vents: an offset can make a nominal 7 kPa vent
    assert ValveModel(NOMINAL, dac_offset_kpa=-2.0).target(NOMINAL.kpa_to_code(7.0)) == 0.0
    assert ValveModel(NOMINAL, dac_gain=0.0).target(NOMINAL.max_code) == 0.0  # a broken wire
    with pytest.raises(ValueError, match='dac_gain'):
        ValveModel(NOMINAL, dac_gain=-1.0)


def test_per_channel_options_and_read_back_noise():
    valves = valve_models(NOMINAL, ValveModel(NOMINAL).params, 2, (1.1, 0.9), -1.0, 0.5, seed=3)
    assert [v.dac_gain for v in valves] == [1.1, 0.9]
    assert [v.dac_offset_kpa for v in valves] == [-1.0, -1.0]
    readings = [valves[0].measured() for _ in range(4000)]
    assert statistics.mean(readings) == pytest.approx(0.0, abs=0.05)
    assert statistics.stdev(readings) == pytest.approx(0.5, rel=0.05)
    with pytest.raises(ValueError, match='3 values for 2 channels'):
        BoardEmulator(dac_gain=(1.0, 1.0, 1.0))


@settings(max_examples=300, deadline=None)
@given(gains, offsets, st.floats(6.5, 45.0))
def test_a_measured_chain_is_inverted_to_within_one_code(gain, offset, kpa):
    """With the channel's true gain and offset the valve gets the commanded pressure to within
    one DAC code (0.147 kPa × gain), wherever the board's largest code lets it reach."""
    truth = ValveModel(NOMINAL, dac_gain=gain, dac_offset_kpa=offset)
    cal = with_fit(NOMINAL, ChannelFit(gain, offset), BOARD_MAX_CODE)
    code = cal.kpa_to_code(kpa)
    reach = truth.target(BOARD_MAX_CODE)
    if kpa <= reach:
        assert abs(truth.target(code) - kpa) <= 0.5 * gain * NOMINAL.volts_per_code * 60 + 1e-9
    assert code <= BOARD_MAX_CODE
    assert cal.code_to_kpa(code) == pytest.approx(truth.target(code))


@settings(max_examples=300, deadline=None)
@given(gains, offsets, st.floats(allow_nan=True, allow_infinity=True))
def test_a_calibrated_channel_never_exceeds_50_kpa_nor_the_board_code(gain, offset, kpa):
    truth = ValveModel(NOMINAL, dac_gain=gain, dac_offset_kpa=offset)
    cal = with_fit(NOMINAL, ChannelFit(gain, offset), BOARD_MAX_CODE)
    code = cal.kpa_to_code(kpa)
    assert 0 <= code <= min(cal.max_code, BOARD_MAX_CODE)
    assert truth.target(code) <= HARD_MAX_KPA + 1e-9
    assert truth.target(0) == 0.0  # the vent code vents whatever the chain


def test_uncalibrated_a_gain_error_overshoots_50_kpa():
    """Why the calibration is needed for safety too: with a 6 % gain the nominal 50 kPa code
    gives 53 kPa; calibrated, the largest code is lower."""
    truth = ValveModel(NOMINAL, dac_gain=1.06)
    assert truth.target(NOMINAL.kpa_to_code(50.0)) > 52.5
    cal = with_fit(NOMINAL, ChannelFit(1.06, 0.0), BOARD_MAX_CODE)
    assert truth.target(cal.kpa_to_code(50.0)) <= 50.0
    low = with_fit(NOMINAL, ChannelFit(0.94, 0.0), BOARD_MAX_CODE)
    assert low.max_code == BOARD_MAX_CODE  # 50 kPa would need a code the board refuses
    assert low.max_kpa == pytest.approx(0.94 * NOMINAL.code_to_kpa(BOARD_MAX_CODE))


def test_file_round_trip(tmp_path):
    fits = {'maa': ChannelFit(1.0587, -2.53, 0.01, 0.206, 0.209, 0.006, 0.48),
            'baa': ChannelFit(0.9406, 1.73)}  # fmt: skip
    path = write_calibration(
        str(tmp_path / 'sub' / 'cal.yaml'), CalibrationFile(fits, 341, '1.0.0')
    )
    got = load_calibration(path, ACTUATORS)
    assert got.board_max_code == 341 and got.firmware == '1.0.0' and got.written
    assert got.channels['maa'] == fits['maa']
    assert got.channels['baa'].dac_gain == 0.9406 and math.isnan(got.channels['baa'].t90_s)
    a, b = got.calibrations(NOMINAL, ACTUATORS)
    assert (a.dac_gain, b.dac_offset_kpa) == (1.0587, 1.73)
    assert not list(tmp_path.glob('sub/*.tmp'))


@pytest.mark.parametrize(
    ('text', 'says'),
    [
        (None, 'run `equimus check rig` to measure the valves'),
        ('a: [', 'not a valve calibration'),
        ('format: 2\n', 'not a valve calibration of format 1'),
        ('format: 1\nboard: {max_code: 341}\nchannels: {maa: {dac_gain: 1.0, dac_offset_kpa: 0}}',
         'no calibration for channel(s) baa'),
        ('format: 1\nboard: {max_code: 341}\nchannels: {maa: {dac_gain: 1.0, dac_offset_kpa: 0},'
         ' baa: {dac_gain: 1.4, dac_offset_kpa: 0}}', 'a wiring fault, not a calibration'),
        ('format: 1\nboard: {max_code: 341}\nchannels: {maa: {dac_gain: 1.0, dac_offset_kpa: 0},'
         ' baa: {dac_gain: "x", dac_offset_kpa: 0}}', "baa.dac_gain: 'x' is not a number"),
        ('format: 1\nboard: {max_code: 341}\nchannels: {maa: {dac_gain: 1.0, dac_offset_kpa: 0},'
         ' baa: {dac_gain: 1.0, dac_ofset_kpa: 0}}', 'needs dac_gain and dac_offset_kpa'),
        ('format: 1\nboard: {max_code: -1}\nchannels: {}', 'is not a DAC code'),
    ],
)  # fmt: skip
def test_a_bad_file_is_one_line(tmp_path, text, says):
    path = tmp_path / 'cal.yaml'
    if text is not None:
        path.write_text(text)
    with pytest.raises(CalibrationFileError) as e:
        load_calibration(str(path), ACTUATORS)
    assert says in str(e.value) and str(path) in str(e.value) and '\n' not in str(e.value)


def test_the_driver_needs_a_file_on_the_serial_board_unless_told(tmp_path):
    with pytest.raises(ConfigError, match='run `equimus check rig`'):
        DriverConfig().calibration_of_rig(ACTUATORS)
    assert DriverConfig(require_calibration=False).calibration_of_rig(ACTUATORS) is None
    assert DriverConfig(board='sim').calibration_of_rig(ACTUATORS) is None
    path = write_calibration(
        str(tmp_path / 'c.yaml'),
        CalibrationFile({'maa': ChannelFit(1.05, 1.0), 'baa': ChannelFit(0.95, -1.0)}, 341),
    )
    cfg = DriverConfig(calibration_file=path, max_kpa=30.0)
    maa, baa = cfg.channel_calibrations(ACTUATORS, cfg.calibration_of_rig(ACTUATORS))
    assert (maa.dac_gain, baa.dac_offset_kpa, maa.max_kpa, baa.max_kpa) == (1.05, -1.0, 30.0, 30.0)
    assert maa.kpa_to_code(20.0) != baa.kpa_to_code(20.0)


def test_default_path_is_the_users_configuration(monkeypatch, tmp_path):
    monkeypatch.setenv('XDG_CONFIG_HOME', str(tmp_path))
    assert default_calibration_path() == str(tmp_path / 'equimus' / 'valve_calibration.yaml')
    monkeypatch.delenv('XDG_CONFIG_HOME')
    assert default_calibration_path().endswith('/.config/equimus/valve_calibration.yaml')


def test_noise_is_seeded():
    a = valve_models(NOMINAL, ValveModel(NOMINAL).params, 2, adc_noise_kpa=0.3, seed=7)
    b = valve_models(NOMINAL, ValveModel(NOMINAL).params, 2, adc_noise_kpa=0.3, seed=7)
    assert [v.measured() for v in a] == [v.measured() for v in b]
