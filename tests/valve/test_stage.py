"""The valve driver's command path as plain code (what the sim graph's valves get): clamp to the
ceiling, NaN vents the channel, slew limit on the commands' own clock, DAC quantisation."""

import math

import pytest

from equimus_description.valve import HARD_MAX_KPA
from equimus_hw.valve.calibration import ValveCalibration
from equimus_hw.valve.config import DriverConfig
from equimus_hw.valve.stage import SimulatedDriver

PERIOD = 1 / 120


def quantised(kpa):
    cal = ValveCalibration()
    return cal.code_to_kpa(cal.kpa_to_code(kpa))


def test_slew_clamp_nan_and_quantisation():
    drive = SimulatedDriver(DriverConfig(), t0=0.0)
    slew = DriverConfig().slew_rate_kpa_s
    out = drive([80.0, 20.0], PERIOD)  # the first command after arming
    out = drive([80.0, 20.0], 2 * PERIOD)  # one period later: at most slew·Δt more
    assert out[0] <= slew * PERIOD + 0.2 and out[1] <= slew * PERIOD + 0.2
    t = 2 * PERIOD
    for _ in range(20):
        t += PERIOD
        out = drive([80.0, math.nan], t)
    assert out == [pytest.approx(quantised(HARD_MAX_KPA)), 0.0]
    assert out[0] <= HARD_MAX_KPA


def test_watchdog_vents_without_commands():
    cfg = DriverConfig()
    drive = SimulatedDriver(cfg, t0=0.0)
    t = 0.0
    for _ in range(30):
        t += PERIOD
        out = drive([20.0, 20.0], t)
    assert out[0] == pytest.approx(quantised(20.0))
    # no command for longer than the watchdog period: every channel vents
    drive.safety.step(t + cfg.command_timeout_s + 0.01, 0.0)
    assert drive.safety.output == [0.0, 0.0]
