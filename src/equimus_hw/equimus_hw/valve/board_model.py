"""The emulated DAC board's valves and records, shared by the Python board (board_emulator.py)
and the board's own firmware built for this computer (host_firmware.py): each VPPE as the
description's valve behind its channel's DAC chain, the SET frames a board received, and its
JSON-lines log. Also the offline replay of a recording's commands through such valves."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import IO

from equimus_description.valve import VALVE_TAU_S, Valve, ValveParams

from .calibration import ValveCalibration, dac_chain_volts


@dataclasses.dataclass(frozen=True)
class FrameRecord:
    """One decoded SET frame as it arrived on the wire."""

    t: float  # time.monotonic() when the delimiter byte was read
    seq: int
    codes: tuple[int, ...]
    accepted: bool


class ValveModel:
    """VPPE: setpoint code -> target pressure (vents below 0.1 V), then the description's valve
    (`Valve`: dead time, fill and vent dynamics) stepped over each board tick with the target
    held. `valve` is the model's parameters, or the lag's time constant (s) with `dead_time_s`.

    A real channel's DAC chain is not the nominal one: `dac_gain` and `dac_offset_kpa` are its
    error (`calibration.dac_chain_volts`; 0 gain = a broken setpoint wire), `adc_noise_kpa` the
    standard deviation of the read-back of the actual-value output (`measured`).
    `regulation` (the emulated rig's truth, equimus_sim.truth: the VPPE's hysteresis and
    repeatability) maps the setpoint's pressure to the level the valve regulates to."""

    def __init__(
        self,
        calibration: ValveCalibration,
        valve: ValveParams | float = VALVE_TAU_S,
        dead_time_s: float = 0.0,
        dac_gain: float = 1.0,
        dac_offset_kpa: float = 0.0,
        adc_noise_kpa: float = 0.0,
        rng: random.Random | None = None,
        regulation: Callable[[float], float] | None = None,
    ):
        self.cal = calibration
        if not isinstance(valve, ValveParams):
            valve = ValveParams(float(valve), float(valve), float(dead_time_s))
        self.valve = Valve(valve, 1)
        for name, value in (
            ('dac_gain', dac_gain),
            ('dac_offset_kpa', dac_offset_kpa),
            ('adc_noise_kpa', adc_noise_kpa),
        ):
            if not math.isfinite(value):
                raise ValueError(f'{name}={value}: must be finite')
        if dac_gain < 0 or adc_noise_kpa < 0:
            raise ValueError(
                f'dac_gain={dac_gain}, adc_noise_kpa={adc_noise_kpa}: must not be negative'
            )
        self.dac_gain = float(dac_gain)
        self.dac_offset_kpa = float(dac_offset_kpa)
        self.adc_noise_kpa = float(adc_noise_kpa)
        self._rng = rng or random.Random()
        self._target = 0.0
        self.regulation = regulation

    @property
    def params(self) -> ValveParams:
        return self.valve.params

    @property
    def tau(self) -> float:
        return self.valve.tau

    @property
    def dead(self) -> float:
        return self.valve.params.dead_time

    @property
    def pressure(self) -> float:
        return float(self.valve.p[0])

    def target(self, code: int) -> float:
        """The pressure the valve regulates to for a DAC code, through this channel's chain."""
        cal = self.cal
        volts = dac_chain_volts(
            cal.code_to_volts(code), self.dac_gain, self.dac_offset_kpa, cal.kpa_per_volt
        )
        return cal.volts_to_kpa(volts)

    def set_code(self, code: int, now: float) -> None:
        target = self.target(code)
        self._target = target if self.regulation is None else self.regulation(target)

    def advance(self, now: float, dt: float) -> float:
        if dt > 0:
            self.valve.step((self._target,), dt)
        return self.pressure

    def measured(self) -> float:
        """The pressure as the board's ADC reads it (with its noise), kPa."""
        if self.adc_noise_kpa > 0:
            return self.pressure + self._rng.gauss(0.0, self.adc_noise_kpa)
        return self.pressure


def per_channel(
    name: str, value: float | Sequence[float] | None, channels: int, neutral: float
) -> tuple[float, ...]:
    """A per-channel option: None = `neutral` on every channel, one value = that on every
    channel, else one value per channel."""
    if value is None:
        return (neutral,) * channels
    if isinstance(value, (int, float)):
        return (float(value),) * channels
    values = tuple(float(v) for v in value)
    if len(values) == 1:
        return values * channels
    if len(values) != channels:
        raise ValueError(f'{name}: {len(values)} values for {channels} channels')
    return values


def valve_models(
    calibration: ValveCalibration,
    params: ValveParams,
    channels: int,
    dac_gain: float | Sequence[float] | None = None,
    dac_offset_kpa: float | Sequence[float] | None = None,
    adc_noise_kpa: float | Sequence[float] | None = None,
    seed: int | None = None,
    regulation: Sequence[Callable[[float], float] | None] | None = None,
) -> list[ValveModel]:
    """The valves behind a board's channels, each with its DAC chain, read-back noise and
    regulation (None: ideal)."""
    reg = list(regulation or [None] * channels)
    if len(reg) != channels:
        raise ValueError(f'regulation: one per channel ({channels})')
    gains = per_channel('dac_gain', dac_gain, channels, 1.0)
    offsets = per_channel('dac_offset_kpa', dac_offset_kpa, channels, 0.0)
    noises = per_channel('adc_noise_kpa', adc_noise_kpa, channels, 0.0)
    rng = random.Random(seed)
    return [
        ValveModel(
            calibration,
            params.channel(i),
            dac_gain=gains[i],
            dac_offset_kpa=offsets[i],
            adc_noise_kpa=noises[i],
            rng=random.Random(rng.random()),
            regulation=reg[i],
        )
        for i in range(channels)
    ]


def replay(
    valves: Sequence[ValveModel],
    calibration: ValveCalibration,
    t_grid: Sequence[float],
    command_kpa: Sequence[Sequence[float]],
    t_read: Sequence[float],
) -> list[list[float]]:
    """The valves' read-back at times `t_read` (s) for a command series held on the board's
    clock `t_grid` (equal steps, s; one row of kPa per step, through each channel's DAC code):
    the board's valves answering a recording's commands offline (benchmarks, tests)."""
    dt = float(t_grid[1] - t_grid[0])
    codes: list[int | None] = [None] * len(valves)
    out: list[list[float]] = []
    j = 0
    for k, t in enumerate(t_grid):
        for c, valve in enumerate(valves):
            code = calibration.kpa_to_code(float(command_kpa[k][c]))
            if code != codes[c]:
                valve.set_code(code, t)
                codes[c] = code
            valve.advance(t + dt, dt)
        while j < len(t_read) and t_read[j] <= t + dt:  # read at the tick that covers it
            out.append([v.measured() for v in valves])
            j += 1
    return out


class BoardRecord:
    """What the tests and the soak inspect on an emulated board (the Python one and the host
    firmware's): its valves' pressures, the frames it received, its JSON-lines log."""

    _lock: threading.RLock
    _log_file: IO[str] | None
    _session_file: IO[str] | None
    valves: list[ValveModel]
    frames: deque[FrameRecord]
    channels: int
    codes: list[int]
    link: str | None
    slave_path: str | None

    def _start_record(self, history: int, log_path: str | None, session_path: str | None) -> None:
        """Empty records (the newest `history` SET frames kept: the log file keeps all of them;
        a bounded deque so a long soak neither grows nor scans ever longer lists under the
        lock) and the log and session files opened."""
        self.frames = deque(maxlen=history)
        self.frames_total = 0
        self.rejections: list[tuple[float, int, str]] = []
        self.invariant_violations: list[FrameRecord] = []
        self.watchdog_trips = 0
        self.boots = 0
        # Open for the board's lifetime (closed in _close_files), so no with-block.
        self._log_file = open(log_path, 'a', buffering=1) if log_path else None  # noqa: SIM115
        self._session_file = (
            open(session_path, 'w', buffering=1) if session_path else None  # noqa: SIM115
        )

    def _close_files(self) -> None:
        for f in (self._log_file, self._session_file):
            if f:
                f.close()
        self._log_file = self._session_file = None

    def _log(self, entry: dict[str, object]) -> None:
        if self._log_file:
            self._log_file.write(json.dumps(entry) + '\n')

    def _session(self, entry: dict[str, object]) -> None:
        """One line of the session file (replay.py reads it back)."""
        if self._session_file:
            self._session_file.write(json.dumps(entry) + '\n')

    def _remove_link(self) -> None:
        if self.link and os.path.islink(self.link):
            with contextlib.suppress(OSError):
                os.unlink(self.link)

    def _unpowered(self, now: float) -> None:
        """The board lost power: no pty; the setpoint wires read 0 V, so every valve vents. Logged
        here, under the board's lock, so a frame it handled just before comes first in its log."""
        self._log({'event': 'unpowered', 't': now})
        self.slave_path = None
        for v in self.valves:
            v.set_code(0, now)
        self.codes = [0] * self.channels

    def pressures(self) -> list[float]:
        with self._lock:
            return [v.pressure for v in self.valves]

    def frames_since(self, t: float) -> list[FrameRecord]:
        """Frames received at or after t (among the newest `history`), oldest first."""
        out = []
        with self._lock:
            for f in reversed(self.frames):
                if f.t < t:
                    break
                out.append(f)
        out.reverse()
        return out

    def last_frame(self) -> FrameRecord | None:
        with self._lock:
            return self.frames[-1] if self.frames else None
