"""kPa -> volts -> DAC code and back; the 50 kPa ceiling can never be exceeded."""

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from equimus_hw.valve.calibration import HARD_MAX_KPA, ValveCalibration


def test_default_numbers_match_the_spec_arithmetic():
    cal = ValveCalibration()
    # 12 bits over 0-10 V at 60 kPa/V: 0.1465 kPa per code, 50 kPa = 0.8333 V = code 341.
    assert cal.volts_per_code == pytest.approx(10.0 / 4095)
    assert cal.max_code == 341
    assert cal.kpa_to_code(50.0) == 341
    assert cal.kpa_to_volts(30.0) == pytest.approx(0.5)
    assert cal.kpa_to_code(30.0) == round(0.5 / (10.0 / 4095)) == 205
    assert cal.code_to_kpa(205) == pytest.approx(30.0, abs=0.08)


@pytest.mark.parametrize('bad', [math.nan, math.inf, -math.inf, -5.0, 0.0, 'x', None])
def test_non_finite_negative_and_junk_vent(bad):
    assert ValveCalibration().kpa_to_code(bad) == 0


def test_clamp_above_max():
    cal = ValveCalibration()
    assert cal.kpa_to_code(1e9) == cal.max_code == cal.kpa_to_code(50.0)
    low = ValveCalibration(max_kpa=20.0)
    assert low.kpa_to_code(45.0) == low.max_code == math.floor((20 / 60) / (10 / 4095))


def test_low_band_policies():
    vent = ValveCalibration()
    assert vent.kpa_to_code(5.99) == 0
    assert vent.kpa_to_code(6.0) == round(0.1 / (10 / 4095))
    hold = ValveCalibration(low_band_policy='hold_min', hold_threshold_kpa=3.0)
    assert hold.kpa_to_code(2.9) == 0
    assert hold.kpa_to_code(3.0) == hold.kpa_to_code(6.0) == vent.kpa_to_code(6.0)
    assert hold.kpa_to_code(10.0) == vent.kpa_to_code(10.0)


def test_hard_limit_cannot_be_raised_by_configuration():
    with pytest.raises(ValueError, match='HARD_MAX_KPA'):
        ValveCalibration(max_kpa=HARD_MAX_KPA + 0.1)
    for kwargs in [
        dict(kpa_per_volt=0),
        dict(dac_bits=17),
        dict(output_gain=-1),
        dict(low_band_policy='hold'),
        dict(dac_vref=math.nan),
    ]:
        with pytest.raises(ValueError):
            ValveCalibration(**kwargs)


def test_read_back_inverse():
    cal = ValveCalibration()
    for kpa in [0.0, 6.0, 12.5, 30.0, 50.0]:
        assert cal.adc_to_kpa(cal.kpa_to_adc(kpa)) == pytest.approx(kpa, abs=0.2)
    assert math.isnan(cal.adc_to_kpa(100, adc_bits=0))
    assert cal.code_to_kpa(0) == 0.0 and cal.code_to_kpa(40) == 0.0  # 40 codes < 0.1 V: vents


calibration_kwargs = st.fixed_dictionaries(
    dict(
        kpa_per_volt=st.floats(10.0, 200.0),
        zero_offset_v=st.floats(-0.1, 0.5),
        dac_bits=st.integers(8, 16),
        dac_vref=st.floats(1.0, 5.0),
        output_gain=st.floats(1.0, 4.0),
        max_kpa=st.floats(10.0, HARD_MAX_KPA),
        low_band_policy=st.sampled_from(['vent', 'hold_min']),
    )
)
pressures = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(-100.0, 1000.0))


@settings(max_examples=2000, deadline=None)
@given(calibration_kwargs, pressures)
def test_code_never_exceeds_the_50kpa_code(kwargs, kpa):
    try:
        cal = ValveCalibration(**kwargs)
    except ValueError:
        assume(False)  # a rejected calibration (e.g. max_kpa below one code) cannot emit codes
    code = cal.kpa_to_code(kpa)
    ceiling_volts = HARD_MAX_KPA / cal.kpa_per_volt + cal.zero_offset_v
    assert 0 <= code <= cal.max_code
    assert code * cal.volts_per_code <= ceiling_volts + 1e-9  # never above 50 kPa in volts
    assert code <= (1 << cal.dac_bits) - 1


@settings(max_examples=500, deadline=None)
@given(st.floats(0.0, 50.0), st.floats(0.0, 50.0))
def test_monotonic(a, b):
    cal = ValveCalibration()
    lo, hi = sorted((a, b))
    assert cal.kpa_to_code(lo) <= cal.kpa_to_code(hi)


def _chain_kpa(cal: ValveCalibration, code) -> float:
    """The pressure by the chain code -> volts -> the DAC chain's volts -> kPa."""
    from equimus_hw.valve.calibration import dac_chain_volts

    volts = dac_chain_volts(
        cal.code_to_volts(code), cal.dac_gain, cal.dac_offset_kpa, cal.kpa_per_volt
    )
    return cal.volts_to_kpa(volts)


@settings(max_examples=3000, deadline=None)
@given(
    calibration_kwargs,
    st.floats(0.85, 1.15),
    st.floats(-5.0, 5.0),
    st.floats(-100.0, 1000.0),
    st.integers(-3, 70_000),
)
def test_looked_up_pressures_are_the_chains(kwargs, gain, offset, kpa, code):
    """code_to_kpa keeps each code's pressure once computed: the first time and every time
    after, it gives the chain's own result bit for bit, for any code and calibration, and keeps
    no more than the codes the driver can send."""
    try:
        cal = ValveCalibration(**kwargs, dac_gain=gain, dac_offset_kpa=offset)
    except ValueError:
        assume(False)
    for c in (code, code, cal.kpa_to_code(kpa), cal.kpa_to_code(kpa), float(code)):
        got, want = cal.code_to_kpa(c), _chain_kpa(cal, c)
        assert math.copysign(1.0, got) == math.copysign(1.0, want) and got == want, (c, got, want)
    assert len(cal._applied_kpa) <= cal.max_code + 1
