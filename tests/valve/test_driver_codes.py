"""The valve driver's DAC codes (its last answer kept for the next tick): always those of the
calibrations it holds now."""

from rclpy.parameter import Parameter

from equimus_hw.valve.calibration import ValveCalibration
from equimus_hw.valve.driver_node import ValveDriver


def test_the_codes_follow_new_calibrations_for_the_same_pressures(ros_node):
    driver = ValveDriver(parameter_overrides=[Parameter('require_calibration', value=False)])
    try:
        kpa = [12.5, 30.0]
        first = driver._codes(kpa)
        assert first == [cal.kpa_to_code(p) for cal, p in zip(driver.cals, kpa, strict=True)]
        assert driver._codes([12.5, 30.5]) != first
        assert driver._codes([12.5, 30.0]) == first  # kept for the next call
        # what a new calibration (a runtime parameter, a new file at configure) does
        driver.cals = tuple(ValveCalibration(kpa_per_volt=40.0) for _ in driver.cals)
        again = driver._codes(kpa)
        assert again == [cal.kpa_to_code(p) for cal, p in zip(driver.cals, kpa, strict=True)]
        assert again != first
    finally:
        driver.destroy_node()
