"""The valve driver's configuration: defaults here, overrides in config/valve.yaml (no ROS).

Each field is a ROS parameter of the `valve_driver` node (equimus_ros.params.bind). The safety
limits that an operator may need to change on a running rig (max_kpa, slew_rate_kpa_s,
command_timeout_s) are runtime parameters: `ros2 param set` validates them here and the driver
applies them at its next step. Everything else is read-only (set at start).
"""

from __future__ import annotations

import dataclasses
import math

from equimus_description.config import ConfigError, param, validate_fields
from equimus_description.valve import HARD_MAX_KPA, SLEW_RATE_KPA_S

from .board import BOARDS
from .calibration import (
    LOW_BAND_POLICIES,
    CalibrationFile,
    ValveCalibration,
    load_calibration,
)

__all__ = ['DriverConfig']

_CAL = ValveCalibration()


@dataclasses.dataclass(frozen=True)
class DriverConfig:
    board: str = param(
        'serial',
        "DAC board: 'serial' (the rig's board on `port`) or 'sim' (the "
        'simulated leg: the output goes on /valve/applied, which the sim node follows)',
    )
    port: str = param('/dev/ttyACM0', 'serial device of the DAC board (or the emulator link)')
    leg_description: str = param(
        '',
        "another limb's YAML: one valve channel per muscle of it (board sim only; the rig's "
        "board has the leg's two); '' = the rig's two valves",
    )
    baud: int = param(115200, 'serial baud rate (ignored by USB CDC boards)', range=(1, 10_000_000))
    autostart: bool = param(
        False,
        'configure and activate at start-up (a bare `ros2 run`); the launch files and the '
        'supervisor leave it false and drive the lifecycle transitions',
    )
    auto_arm: bool = param(
        False, 'arm at start-up; false = start disarmed, call ~/arm (the sim graph sets it true)'
    )
    command_timeout_s: float = param(
        0.25,
        's without a valid command before every channel vents (watchdog; steady clock, sim time '
        'in the composed sim graph)',
        range=(0.01, 10.0),
        runtime=True,
    )
    slew_rate_kpa_s: float = param(
        SLEW_RATE_KPA_S,
        'kPa/s max rate of change of the output',
        range=(1.0, 1e9),
        runtime=True,
    )
    max_kpa: float = param(
        HARD_MAX_KPA,
        f'kPa output ceiling, at most {HARD_MAX_KPA:g}',
        range=(0.0, HARD_MAX_KPA),
        runtime=True,
    )
    rate_hz: float = param(
        120.0,
        'Hz of the internal tick (slew steps, watchdog, publishing); the composed sim graph '
        'ticks at each frame instead',
        range=(1.0, 1000.0),
    )
    keepalive_period_s: float = param(
        0.05, 's: a SET is re-sent at least this often (serial)', range=(0.001, 1.0)
    )
    ack_timeout_s: float = param(
        0.05, 's before an unanswered SET counts as a timeout', range=(0.001, 1.0)
    )
    link_timeout_s: float = param(
        0.5, 's without any reply before the link is declared lost', range=(0.01, 10.0)
    )
    reconnect_backoff_min_s: float = param(0.1, 's first reconnect delay', range=(0.01, 10.0))
    reconnect_backoff_max_s: float = param(2.0, 's longest reconnect delay', range=(0.01, 60.0))
    shutdown_ack_timeout_s: float = param(
        1.0, 's to wait for the vent ACK on shutdown (re-sent meanwhile)', range=(0.0, 5.0)
    )
    kpa_per_volt: float = param(_CAL.kpa_per_volt, 'kPa per setpoint volt (VPPE 6 bar: 60)')
    zero_offset_v: float = param(_CAL.zero_offset_v, 'V setpoint offset of the valve regression')
    dac_bits: int = param(_CAL.dac_bits, 'DAC resolution in bits', range=(1, 16))
    dac_vref: float = param(_CAL.dac_vref, 'V DAC full scale before the op-amp stage')
    output_gain: float = param(_CAL.output_gain, 'op-amp gain DAC output -> valve setpoint')
    low_band_policy: str = param(
        _CAL.low_band_policy, "'vent' or 'hold_min' for 0 < p < min_regulated_kpa"
    )
    min_regulated_kpa: float = param(
        _CAL.min_regulated_kpa, 'kPa lowest regulated pressure (0.1 V)'
    )
    hold_threshold_kpa: float = param(
        _CAL.hold_threshold_kpa, "kPa: with 'hold_min', commands below this vent"
    )
    adc_bits: int = param(
        _CAL.adc_bits, 'read-back ADC bits (the board reports its own)', range=(0, 16)
    )
    adc_vref: float = param(_CAL.adc_vref, 'V read-back ADC reference')
    adc_input_gain: float = param(_CAL.adc_input_gain, 'valve output volts per ADC input volt')
    calibration_file: str = param(
        '',
        "the rig's valve calibration from `equimus check rig` (each channel's DAC gain and "
        "offset, applied on top of the settings above); '' = none (board serial: see "
        'require_calibration)',
    )
    require_calibration: bool = param(
        True,
        'board serial: refuse to start without calibration_file; false = run on the nominal '
        'datasheet calibration above (the simulated board never needs one)',
    )

    def __post_init__(self) -> None:
        validate_fields(self)
        if self.board not in BOARDS:
            raise ConfigError(f'board={self.board!r}: use one of {", ".join(BOARDS)}')
        if self.board == 'serial' and not self.port.strip():
            raise ConfigError("port='': name the DAC board's serial device (e.g. /dev/ttyACM0)")
        if self.low_band_policy not in LOW_BAND_POLICIES:
            raise ConfigError(
                f'low_band_policy={self.low_band_policy!r}: use one of '
                f'{", ".join(LOW_BAND_POLICIES)}'
            )
        if not (math.isfinite(self.max_kpa) and 0 < self.max_kpa <= HARD_MAX_KPA):
            raise ConfigError(f'max_kpa={self.max_kpa!r}: must be in (0, {HARD_MAX_KPA:g}] kPa')
        if self.reconnect_backoff_min_s > self.reconnect_backoff_max_s:
            raise ConfigError('reconnect_backoff_min_s must not exceed reconnect_backoff_max_s')
        self.calibration()  # cross-field checks of the calibration (its ValueError)

    def calibration_of_rig(self, channels: tuple[str, ...]) -> CalibrationFile | None:
        """The calibration file (board serial), None on the simulated board or, when
        require_calibration is false, without one. A ValueError (one line) when it is required
        and not given, or cannot be used (CalibrationFileError)."""
        if self.board != 'serial':
            return None
        if not self.calibration_file:
            if not self.require_calibration:
                return None
            raise ConfigError(
                'calibration_file is not set: the rig runs on its measured valve calibration; '
                'run `equimus check rig` and pass the file it writes (or set '
                'require_calibration:=false for the nominal datasheet calibration)'
            )
        return load_calibration(self.calibration_file, channels)

    def channel_calibrations(
        self, channels: tuple[str, ...], rig: CalibrationFile | None
    ) -> tuple[ValveCalibration, ...]:
        """One calibration per channel: `calibration()` with the rig's fit of that channel."""
        base = self.calibration()
        if rig is None:
            return (base,) * len(channels)
        return rig.calibrations(base, channels)

    def calibration(self) -> ValveCalibration:
        return ValveCalibration(
            kpa_per_volt=self.kpa_per_volt,
            zero_offset_v=self.zero_offset_v,
            dac_bits=self.dac_bits,
            dac_vref=self.dac_vref,
            output_gain=self.output_gain,
            max_kpa=self.max_kpa,
            low_band_policy=self.low_band_policy,
            min_regulated_kpa=self.min_regulated_kpa,
            hold_threshold_kpa=self.hold_threshold_kpa,
            adc_bits=self.adc_bits,
            adc_vref=self.adc_vref,
            adc_input_gain=self.adc_input_gain,
        )
