"""Each safety path of SafetyFilter trips in a unit test (time is passed in explicitly)."""

import math

import pytest

from equimus_hw.valve.safety import SafetyFilter


def armed(now=-1.0, **kw):
    s = SafetyFilter(**kw)
    s.arm(now)
    return s


def test_starts_disarmed_and_outputs_zero():
    s = SafetyFilter(slew_kpa_per_s=1e9)
    assert not s.armed
    assert s.command([20.0, 30.0], 1.0).accepted
    assert s.step(1.0) == [0.0, 0.0]
    with pytest.raises(TypeError):
        SafetyFilter(armed=True)  # there is no way to construct it armed


def test_arm_needs_fresh_command():
    s = SafetyFilter(slew_kpa_per_s=1e9)
    s.command([20.0, 30.0], 1.0)
    s.arm(1.5)
    assert s.step(1.6) == [0.0, 0.0]  # the pre-arm command is not replayed
    s.command([20.0, 30.0], 1.7)
    assert s.step(1.7) == [20.0, 30.0]


def test_nonfinite_vents_that_channel_only():
    s = armed(slew_kpa_per_s=1e9)
    s.command([20.0, 30.0], 0.1)
    s.step(0.1)
    res = s.command([math.nan, 25.0], 0.2)
    assert res.vented_channels == [0] and res.warnings
    assert s.step(0.2) == [0.0, 25.0]
    res = s.command([10.0, math.inf], 0.3)
    assert s.step(0.3) == [10.0, 0.0] and res.vented_channels == [1]
    assert s.nonfinite_count == 2


def test_clamp():
    s = armed(slew_kpa_per_s=1e9, max_kpa=40.0)
    res = s.command([500.0, -3.0], 0.1)
    assert res.saturated_channels == [0, 1]
    assert s.step(0.1) == [40.0, 0.0]
    with pytest.raises(ValueError):
        SafetyFilter(max_kpa=60.0)


def test_wrong_length_rejected():
    s = armed(slew_kpa_per_s=1e9)
    s.command([10.0, 10.0], 0.1)
    assert not s.command([50.0], 0.15).accepted
    assert not s.command('ab', 0.16).accepted
    assert s.step(0.16) == [10.0, 10.0]
    assert s.rejected_count == 2


def test_slew_limit_up_and_down():
    s = armed(slew_kpa_per_s=100.0)
    s.step(0.0)
    s.command([50.0, 10.0], 0.0)
    assert s.step(0.05) == pytest.approx([5.0, 5.0])
    assert s.step(0.10) == pytest.approx([10.0, 10.0])
    s.command([50.0, 0.0], 0.10)
    assert s.step(0.15) == pytest.approx([15.0, 5.0])


def test_watchdog_vents_and_recovers():
    s = armed(slew_kpa_per_s=1e9, timeout_s=0.25)
    s.command([30.0, 30.0], 1.0)
    assert s.step(1.2) == [30.0, 30.0]
    assert s.step(1.26) == [0.0, 0.0]
    assert s.watchdog_active and s.watchdog_trips == 1
    s.step(1.5)
    assert s.watchdog_trips == 1  # one trip per episode
    s.command([10.0, 10.0], 1.6)
    assert s.step(1.6) == [10.0, 10.0] and not s.watchdog_active


def test_estop_latches_until_rearm():
    s = armed(slew_kpa_per_s=1e9)
    s.command([30.0, 30.0], 0.1)
    s.step(0.1)
    s.estop()
    assert s.estopped and not s.armed
    s.command([30.0, 30.0], 0.2)
    assert s.step(0.2) == [0.0, 0.0]
    s.arm(0.3)
    assert not s.estopped
    assert s.step(0.31) == [0.0, 0.0]  # still needs a fresh command
    s.command([30.0, 30.0], 0.32)
    assert s.step(0.32) == [30.0, 30.0]


def test_disarm_vents_immediately():
    s = armed(slew_kpa_per_s=10.0)
    for t in range(0, 400):
        s.command([30.0, 30.0], t * 0.01)
        s.step(t * 0.01)
    assert s.output == pytest.approx([30.0, 30.0])  # reached through the 10 kPa/s ramp
    s.disarm()
    assert s.step(4.0) == [0.0, 0.0]


def test_reconnect_requires_fresh_command():
    s = armed(slew_kpa_per_s=1e9)
    s.command([30.0, 30.0], 0.1)
    s.step(0.1)
    s.require_fresh_command(0.2)
    assert s.step(0.21) == [0.0, 0.0]
    assert not s.command([30.0, 30.0], 0.2).accepted  # not newer than the reconnect
    s.command([20.0, 20.0], 0.22)
    assert s.step(0.22) == [20.0, 20.0]
