"""Pressure <-> setpoint voltage <-> DAC code for the Festo VPPE (no ROS imports).

Chain (host to valve):  kPa --(valve transfer)--> setpoint volts --(/ output_gain)--> DAC volts
--(/ dac_vref * (2^bits - 1))--> DAC code. The VPPE-...-6-010 nominally gives 60 kPa per volt,
and treats setpoints below 0.1 V as zero and vents, so 0-6 kPa cannot be regulated.

The read-back chain (valve actual-value output, pin 5, through the board's divider into its ADC)
is the inverse: ADC code -> ADC volts -> (* adc_input_gain) -> output volts -> kPa.

Safety: HARD_MAX_KPA is a constant. A calibration may lower the ceiling (max_kpa) but not raise it,
and `kpa_to_code` can never return a code above `max_code`, the code of the ceiling rounded down.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable

from equimus_description.valve import HARD_MAX_KPA, MIN_REGULATED_KPA

VPPE_VENT_BELOW_V = 0.1
"""VPPE datasheet: setpoints below 0.1 V are treated as zero and the valve exhausts."""

LOW_BAND_POLICIES = ('vent', 'hold_min')


@dataclasses.dataclass(frozen=True)
class ValveCalibration:
    """Calibration of one valve channel; all channels share it unless configured otherwise.

    low_band_policy decides what happens to commands inside the unregulable band
    (0 < p < min_regulated_kpa):
      - 'vent' (default, safe): output 0 V, the valve exhausts. Never applies more pressure than
        commanded.
      - 'hold_min': commands at or above hold_threshold_kpa are raised to min_regulated_kpa,
        commands below it vent. Applies up to min_regulated_kpa more than commanded.
    """

    kpa_per_volt: float = 60.0
    zero_offset_v: float = 0.0  # setpoint volts at which the valve's regression gives 0 kPa
    dac_bits: int = 12
    dac_vref: float = 5.0  # DAC full-scale volts before the op-amp stage
    output_gain: float = 2.0  # op-amp gain from DAC output to valve setpoint input
    max_kpa: float = HARD_MAX_KPA
    low_band_policy: str = 'vent'
    min_regulated_kpa: float = MIN_REGULATED_KPA
    hold_threshold_kpa: float = 3.0
    adc_bits: int = 12  # read-back ADC resolution (board reports it in INFO)
    adc_vref: float = 3.3
    adc_input_gain: float = 10.0 / 3.3  # divider ratio: valve output volts per ADC input volt

    def __post_init__(self) -> None:
        problems = []
        finite = (
            'kpa_per_volt',
            'zero_offset_v',
            'dac_vref',
            'output_gain',
            'max_kpa',
            'min_regulated_kpa',
            'hold_threshold_kpa',
            'adc_vref',
            'adc_input_gain',
        )
        for name in finite:
            if not math.isfinite(float(getattr(self, name))):
                problems.append(f'{name} must be finite')
        if not self.kpa_per_volt > 0:
            problems.append('kpa_per_volt must be > 0 (VPPE 6 bar: 60)')
        if not 1 <= int(self.dac_bits) <= 16:
            problems.append('dac_bits must be 1..16 (the protocol carries uint16 codes)')
        if not 0 <= int(self.adc_bits) <= 16:
            problems.append('adc_bits must be 0..16 (0: no read-back)')
        for name in ('dac_vref', 'output_gain', 'adc_vref', 'adc_input_gain'):
            if not getattr(self, name) > 0:
                problems.append(f'{name} must be > 0')
        if not 0 < self.max_kpa <= HARD_MAX_KPA:
            problems.append(
                f'max_kpa={self.max_kpa} must be in (0, {HARD_MAX_KPA}] kPa; the '
                'hard limit is the constant HARD_MAX_KPA in calibration.py'
            )
        if self.low_band_policy not in LOW_BAND_POLICIES:
            problems.append(f'low_band_policy must be one of {LOW_BAND_POLICIES}')
        if not 0 <= self.hold_threshold_kpa <= self.min_regulated_kpa <= self.max_kpa:
            problems.append('need 0 <= hold_threshold_kpa <= min_regulated_kpa <= max_kpa')
        if problems:
            raise ValueError('invalid valve calibration: ' + '; '.join(problems))
        if self.max_code < 1:
            raise ValueError(
                'invalid valve calibration: max_kpa maps to DAC code 0; check '
                'dac_bits, dac_vref and output_gain'
            )

    # ----------------------------------------------------------------- derived constants
    # Cached: the calibration is frozen, and the driver reads these for every code it sends.
    @functools.cached_property
    def full_code(self) -> int:
        return (1 << int(self.dac_bits)) - 1

    @functools.cached_property
    def volts_per_code(self) -> float:
        """Valve setpoint volts per DAC code."""
        return self.dac_vref * self.output_gain / self.full_code

    @functools.cached_property
    def max_code(self) -> int:
        """Largest code ever emitted: the code of max_kpa rounded DOWN, never above full scale."""
        volts = self.max_kpa / self.kpa_per_volt + self.zero_offset_v
        return max(0, min(self.full_code, math.floor(volts / self.volts_per_code + 1e-9)))

    # ----------------------------------------------------------------- host -> valve
    def shape_kpa(self, kpa: float) -> float:
        """Apply the safety clamp and low-band policy: the pressure the valve is asked for.

        Non-finite input vents (0). The result is 0 or lies in [min_regulated_kpa, max_kpa]."""
        try:
            p = float(kpa)
        except (TypeError, ValueError):
            return 0.0
        if not math.isfinite(p) or p <= 0.0:
            return 0.0
        p = min(p, self.max_kpa)
        if p < self.min_regulated_kpa:
            if self.low_band_policy == 'hold_min' and p >= self.hold_threshold_kpa:
                return self.min_regulated_kpa
            return 0.0
        return p

    def kpa_to_volts(self, kpa: float) -> float:
        """Valve setpoint volts for a commanded pressure (after shape_kpa); 0 V means vent."""
        p = self.shape_kpa(kpa)
        if p == 0.0:
            return 0.0
        return max(0.0, p / self.kpa_per_volt + self.zero_offset_v)

    def volts_to_code(self, volts: float) -> int:
        """DAC code for a setpoint voltage, rounded to nearest and clamped to [0, max_code]."""
        if not math.isfinite(volts) or volts <= 0.0:
            return 0
        return int(min(self.max_code, max(0, round(volts / self.volts_per_code))))

    def kpa_to_code(self, kpa: float) -> int:
        """The DAC code for a commanded pressure; always in [0, max_code]."""
        return self.volts_to_code(self.kpa_to_volts(kpa))

    def codes(self, kpas: Iterable[float]) -> list[int]:
        return [self.kpa_to_code(p) for p in kpas]

    # ----------------------------------------------------------------- read-back
    def code_to_volts(self, code: int) -> float:
        return max(0, int(code)) * self.volts_per_code

    def volts_to_kpa(self, volts: float) -> float:
        """Nominal valve pressure for a setpoint voltage (0 below the VPPE vent threshold)."""
        if volts < VPPE_VENT_BELOW_V:
            return 0.0
        return max(0.0, (volts - self.zero_offset_v) * self.kpa_per_volt)

    def code_to_kpa(self, code: int) -> float:
        """Pressure the valve regulates to for a DAC code (what the driver reports as applied)."""
        return self.volts_to_kpa(self.code_to_volts(code))

    def adc_to_kpa(self, adc_code: int, adc_bits: int | None = None) -> float:
        """Measured pressure from the board's ADC reading of the VPPE actual-value output."""
        bits = self.adc_bits if adc_bits is None else int(adc_bits)
        if bits <= 0:
            return math.nan
        volts = max(0, int(adc_code)) / ((1 << bits) - 1) * self.adc_vref * self.adc_input_gain
        return max(0.0, (volts - self.zero_offset_v) * self.kpa_per_volt)

    def kpa_to_adc(self, kpa: float, adc_bits: int | None = None) -> int:
        """ADC code a board would read for a valve output pressure (used by the emulator)."""
        bits = self.adc_bits if adc_bits is None else int(adc_bits)
        full = (1 << bits) - 1
        volts = max(0.0, kpa) / self.kpa_per_volt + (self.zero_offset_v if kpa > 0 else 0.0)
        return int(min(full, max(0, round(volts / self.adc_input_gain / self.adc_vref * full))))
