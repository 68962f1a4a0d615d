"""Pressure <-> setpoint voltage <-> DAC code for the Festo VPPE (no ROS imports).

Chain (host to valve):  kPa --(valve transfer)--> setpoint volts --(DAC chain error)--> nominal
volts --(/ output_gain)--> DAC volts --(/ dac_vref * (2^bits - 1))--> DAC code. The
VPPE-...-6-010 nominally gives 60 kPa per volt, and treats setpoints below 0.1 V as zero and
vents, so 0-6 kPa cannot be regulated.

The DAC chain (DAC, op-amp stage, the setpoint's ground) has a gain and an offset error of its own
(`dac_chain_volts`); each channel's is measured by `equimus check rig` against the valve's
actual-value output and kept in a calibration file (`CalibrationFile`, `load_calibration`), which
the valve driver applies per channel (`CalibrationFile.calibrations`). Nominal: gain 1, offset 0.

The read-back chain (valve actual-value output, pin 5, through the board's divider into its ADC)
is the inverse: ADC code -> ADC volts -> (* adc_input_gain) -> output volts -> kPa.

Safety: HARD_MAX_KPA is a constant. A calibration may lower the ceiling (max_kpa) but not raise it,
and `kpa_to_code` can never return a code above `max_code`, the code of the ceiling rounded down.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import math
import os
from collections.abc import Iterable, Mapping, Sequence

import yaml

from equimus_description.valve import HARD_MAX_KPA, MIN_REGULATED_KPA

VPPE_VENT_BELOW_V = 0.1
"""VPPE datasheet: setpoints below 0.1 V are treated as zero and the valve exhausts."""

LOW_BAND_POLICIES = ('vent', 'hold_min')

#: A channel's DAC chain outside these is a fault (wiring, a wrong output_gain), not something to
#: calibrate away: `equimus check rig` fails on it and a calibration file holding it is refused.
#: Gain: regulated kPa per nominal kPa. Offset: below the 6 kPa of the 0.1 V vent threshold, so
#: that code 0 still vents the valve.
DAC_GAIN_RANGE = (0.85, 1.15)
DAC_OFFSET_LIMIT_KPA = 5.0


def dac_chain_volts(
    nominal_volts: float, dac_gain: float, dac_offset_kpa: float, kpa_per_volt: float
) -> float:
    """Setpoint volts at the valve for the DAC chain's nominal output: its gain and offset error
    (offset in kPa of the valve's transfer); never below 0 V (a single-supply stage)."""
    return max(0.0, dac_gain * nominal_volts + dac_offset_kpa / kpa_per_volt)


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
    dac_gain: float = 1.0  # this channel's DAC chain: setpoint volts per nominal volt
    dac_offset_kpa: float = 0.0  # ... and its offset, in kPa of the valve's transfer

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
            'dac_gain',
            'dac_offset_kpa',
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
        lo, hi = DAC_GAIN_RANGE
        if not lo <= self.dac_gain <= hi:
            problems.append(f'dac_gain={self.dac_gain} must be in [{lo}, {hi}]')
        if not abs(self.dac_offset_kpa) <= DAC_OFFSET_LIMIT_KPA:
            problems.append(
                f'dac_offset_kpa={self.dac_offset_kpa} must be within ±{DAC_OFFSET_LIMIT_KPA} kPa'
            )
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
        volts = self._nominal_volts(self.max_kpa / self.kpa_per_volt + self.zero_offset_v)
        return max(0, min(self.full_code, math.floor(volts / self.volts_per_code + 1e-9)))

    def _nominal_volts(self, setpoint_volts: float) -> float:
        """The DAC chain's nominal output that gives these setpoint volts (`dac_chain_volts`
        inverted)."""
        offset = self.dac_offset_kpa / self.kpa_per_volt
        return (setpoint_volts - offset) / self.dac_gain

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
        """The DAC chain's nominal output volts for a commanded pressure (after shape_kpa), its
        gain and offset error taken out; 0 V means vent."""
        p = self.shape_kpa(kpa)
        if p == 0.0:
            return 0.0
        return max(0.0, self._nominal_volts(p / self.kpa_per_volt + self.zero_offset_v))

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
        """Pressure the valve regulates to for a DAC code (what the driver reports as applied),
        kept for the codes the driver sends (0..max_code) once computed: a lookup each frame."""
        if type(code) is not int:
            return self._code_to_kpa(code)
        kpa = self._applied_kpa.get(code)
        if kpa is None:
            kpa = self._code_to_kpa(code)
            if 0 <= code <= self.max_code:
                self._applied_kpa[code] = kpa
        return kpa

    @functools.cached_property
    def _applied_kpa(self) -> dict[int, float]:
        return {}

    def _code_to_kpa(self, code: int) -> float:
        volts = dac_chain_volts(
            self.code_to_volts(code), self.dac_gain, self.dac_offset_kpa, self.kpa_per_volt
        )
        return self.volts_to_kpa(volts)

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


# --------------------------------------------------------------------------- calibration file

#: Version of the calibration file's layout.
CALIBRATION_FORMAT = 1


def default_calibration_path() -> str:
    """Where `equimus check rig` writes the rig's calibration and the hardware launch reads it:
    the user's configuration folder (XDG), since the file belongs to this PC's rig."""
    base = os.environ.get('XDG_CONFIG_HOME') or os.path.join(os.path.expanduser('~'), '.config')
    return os.path.join(base, 'equimus', 'valve_calibration.yaml')


class CalibrationFileError(ValueError):
    """A calibration file that cannot be used; str() is the one-line reason."""


@dataclasses.dataclass(frozen=True)
class ChannelFit:
    """One valve channel as `equimus check rig` measured it through the actual-value output.

    dac_gain and dac_offset_kpa are what the driver applies; the rest is what the check saw."""

    dac_gain: float
    dac_offset_kpa: float
    residual_kpa: float = math.nan  # rms of the read-back around the fitted line
    tau_fill_s: float = math.nan  # first-order time constant of the rising steps
    tau_vent_s: float = math.nan  # ... and of the vent
    dead_time_s: float = math.nan
    t90_s: float = math.nan  # from the step command to 90 % of the step (mean of the rising ones)


def with_fit(base: ValveCalibration, fit: ChannelFit, code_ceiling: int) -> ValveCalibration:
    """`base` with one channel's DAC-chain correction. Where the board's largest code
    (`code_ceiling`, its INFO max_code) gives less than base.max_kpa on this channel, the
    channel's ceiling is what that code gives: a code the board refuses is never sent."""
    cal = dataclasses.replace(base, dac_gain=fit.dac_gain, dac_offset_kpa=fit.dac_offset_kpa)
    if cal.max_code > code_ceiling:
        cal = dataclasses.replace(cal, max_kpa=min(cal.max_kpa, cal.code_to_kpa(code_ceiling)))
    return cal


@dataclasses.dataclass(frozen=True)
class CalibrationFile:
    """The rig's valve calibration (`equimus check rig` writes it, the valve driver loads it)."""

    channels: Mapping[str, ChannelFit]
    board_max_code: int  # the board's INFO max_code when it was measured
    firmware: str = ''
    port: str = ''
    written: str = ''  # local date and time of the check
    path: str = ''

    def calibrations(
        self, base: ValveCalibration, names: Sequence[str]
    ) -> tuple[ValveCalibration, ...]:
        """One calibration per channel `names` (in that order): `base` with its fit."""
        return tuple(with_fit(base, self.channels[n], self.board_max_code) for n in names)


_FIT_FIELDS = tuple(f.name for f in dataclasses.fields(ChannelFit))
_HEADER = """\
# Valve calibration of this rig, written by `equimus check rig` (docs/rig.md); the valve driver
# loads it (its calibration_file parameter; hardware.launch.py calibration:=). Per channel, the
# valve regulated to dac_gain * nominal + dac_offset_kpa, nominal being the datasheet pressure of
# the DAC code (config/valve.yaml: 60 kPa/V); the driver inverts it. The other numbers are what
# the check measured. Run the check again after any change to the board, valves or wiring.
"""


def write_calibration(path: str, cal: CalibrationFile) -> str:
    """Write `cal` to `path` (its folder made; atomic: a reader never sees half a file)."""
    doc = {
        'format': CALIBRATION_FORMAT,
        'written': cal.written or datetime.datetime.now().isoformat(timespec='seconds'),
        'board': {'firmware': cal.firmware, 'port': cal.port, 'max_code': int(cal.board_max_code)},
        'channels': {
            name: {k: round(float(getattr(fit, k)), 6) for k in _FIT_FIELDS}
            for name, fit in cal.channels.items()
        },
    }
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    partial = f'{path}.{os.getpid()}.tmp'
    with open(partial, 'w', encoding='utf-8') as f:
        f.write(_HEADER + yaml.safe_dump(doc, sort_keys=False))
    os.replace(partial, path)
    return path


def _number(path: str, where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CalibrationFileError(f'{path}: {where}: {value!r} is not a number')
    return float(value)


def load_calibration(path: str, names: Sequence[str]) -> CalibrationFile:
    """The calibration file at `path`, which must hold every channel of `names` within
    DAC_GAIN_RANGE and DAC_OFFSET_LIMIT_KPA; CalibrationFileError (one line) otherwise."""
    rerun = 'run `equimus check rig` again to write a new one'
    try:
        with open(path, encoding='utf-8') as f:
            doc = yaml.safe_load(f)
    except FileNotFoundError:
        raise CalibrationFileError(
            f'no valve calibration at {path}: run `equimus check rig` to measure the valves '
            'and write it'
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CalibrationFileError(f'{path}: cannot read the valve calibration: {exc}') from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else 'invalid YAML'
        raise CalibrationFileError(f'{path}: not a valve calibration ({first}); {rerun}') from None
    if not isinstance(doc, dict) or doc.get('format') != CALIBRATION_FORMAT:
        raise CalibrationFileError(
            f'{path}: not a valve calibration of format {CALIBRATION_FORMAT}; {rerun}'
        )
    board, channels = doc.get('board'), doc.get('channels')
    if not isinstance(board, dict) or not isinstance(channels, dict):
        raise CalibrationFileError(f'{path}: needs a board and a channels section; {rerun}')
    max_code = board.get('max_code')
    if isinstance(max_code, bool) or not isinstance(max_code, int) or not 0 < max_code < 1 << 16:
        raise CalibrationFileError(f'{path}: board.max_code={max_code!r} is not a DAC code')
    missing = [n for n in names if n not in channels]
    if missing:
        raise CalibrationFileError(
            f'{path}: no calibration for channel(s) {", ".join(missing)} (it has '
            f'{", ".join(map(str, channels)) or "none"}); {rerun}'
        )
    fits = {}
    lo, hi = DAC_GAIN_RANGE
    for name in names:
        entry = channels[name]
        if not isinstance(entry, dict) or not {'dac_gain', 'dac_offset_kpa'} <= set(entry):
            raise CalibrationFileError(f'{path}: {name}: needs dac_gain and dac_offset_kpa')
        unknown = sorted(set(entry) - set(_FIT_FIELDS))
        if unknown:
            raise CalibrationFileError(f'{path}: {name}: unknown key {unknown[0]!r}')
        values = {k: _number(path, f'{name}.{k}', v) for k, v in entry.items()}
        fit = ChannelFit(**values)
        if not (lo <= fit.dac_gain <= hi and abs(fit.dac_offset_kpa) <= DAC_OFFSET_LIMIT_KPA):
            raise CalibrationFileError(
                f'{path}: {name}: dac_gain {fit.dac_gain:g}, dac_offset_kpa '
                f'{fit.dac_offset_kpa:g} outside [{lo}, {hi}] and ±{DAC_OFFSET_LIMIT_KPA} kPa: '
                'a wiring fault, not a calibration'
            )
        fits[name] = fit
    return CalibrationFile(
        fits,
        max_code,
        firmware=str(board.get('firmware', '')),
        port=str(board.get('port', '')),
        written=str(doc.get('written', '')),
        path=path,
    )
