"""Commissioning the DAC board and its valves (no ROS): what `equimus check rig` asks of them.

`BoardProbe` talks to the board one request at a time over the serial protocol (protocol.py):
every reply is awaited, so each round trip is measured and every refused or corrupted frame is
counted. `check_board` identifies the board (INFO), measures the round trip and lets the board's
watchdog vent a harmless output. `check_valve` steps one valve up through a few pressures (the other
vented), reading its actual-value output back through the ACKs; `fit_channel` turns the settled
read-backs into the channel's DAC-chain gain and offset (`calibration.ChannelFit`) and the steps'
timing into dead time, time constants and t90; the valve is then commanded once more with the new
calibration, from above, and vented.

Every failure is a `CommissionError` whose text is one line saying what happened and what to do.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Sequence

import numpy as np
import serial

from . import protocol as P
from .calibration import (
    DAC_GAIN_RANGE,
    DAC_OFFSET_LIMIT_KPA,
    ChannelFit,
    ValveCalibration,
    with_fit,
)

#: s the board has to answer HELLO (asked HELLO_TRIES times: an emulated board on a loaded
#: computer can miss one), and any other request.
HELLO_TIMEOUT_S = 0.5
HELLO_TRIES = 3
REPLY_TIMEOUT_S = 0.05
#: s spent waiting for replies that did not come, since the board's last reply, before the
#: board counts as gone (the driver's link_timeout_s is 0.5 s; an emulated board on a loaded
#: computer can pause for 0.3 s); also the longest a write may wait for a board that does not
#: read. Time between requests is not counted: a check that paused (a stall of this computer,
#: the watch callback) asked nothing then.
SILENT_S = 1.0
#: s between two reads of one request's wait beyond which this computer, not the board, was
#: away (the reads block 5 ms): that time is not counted against the board (reply deadline,
#: silence), as a reply cannot be read while this process is not running.
AWAY_S = 0.05
#: PINGs for the round-trip figures.
PINGS = 100
#: The code the watchdog test leaves on every channel: not zero (the board's watchdog only vents a
#: non-zero output) and far below the VPPE's 0.1 V vent threshold (1 code = 2.4 mV), so no valve
#: opens.
WATCHDOG_TEST_CODE = 1
#: Late by more than this after the board's watchdog_ms, the watchdog counts as late; late in
#: each of WATCHDOG_TRIES tries, as not working (a loaded computer can pause the check, or an
#: emulated board, for a few hundred ms: one late vent is not yet a board without a watchdog).
WATCHDOG_SLACK_S = 0.3
WATCHDOG_TRIES = 3

#: Pressures (kPa) each valve is stepped to, one after the other, then vented.
LEVELS_KPA = (10.0, 20.0, 30.0, 40.0)
#: kPa commanded with the new calibration (from the highest level down), which the read-back must
#: then match to within the VPPE's repeatability and hysteresis (3 kPa each, ../spec: 0.5 % FS).
VERIFY_KPA = 25.0
VERIFY_TOLERANCE_KPA = 3.0
HOLD_S = 1.5  # s each level is held (≈ 7 time constants of the authors' 0.217 s valve)
SET_PERIOD_S = 0.01  # s between SETs (and read-backs) while a level is held
SETTLED_FRACTION = 0.2  # the last fifth of a hold is averaged as the settled read-back
#: A step is carried to its end (`final`) only if less than this fraction of it was still to go
#: where the settled window begins; else the lag fit is not trusted and the mean is taken.
MAX_LEFT = 0.1
#: A first step that reads back less than this fraction of itself: the valve does not follow.
MOVED_FRACTION = 0.3
#: After the vent, a read-back above this (kPa) means the valve does not vent.
VENTED_KPA = 2.0
#: kPa rms of the settled read-backs around the fitted line: above, the valve does not follow its
#: setpoint (the VPPE's repeatability is 3 kPa, its linearity 6 kPa, its total error 7.5 kPa).
MAX_RESIDUAL_KPA = 2.5
#: kPa the vented channel may read while the other one is stepped (above: crossed wiring).
CROSSTALK_KPA = 3.0
#: Tries of one valve's test that its board's watchdog may interrupt although this computer
#: sent its SETs in time (the link or the board is at fault).
ATTEMPTS = 3
#: Tries it may interrupt because this computer sent no SET within the watchdog (a stall of
#: this process, as a loaded PC has): not the board's fault, so more of them are allowed.
STALLED_ATTEMPTS = 8


#: ACK flags of a board that vented by itself (its watchdog, a bad frame)
VENT_FLAGS = P.ACK_WATCHDOG_VENTED | P.ACK_BAD_FRAME_VENTED


class CommissionError(RuntimeError):
    """A check failed; str() is the one-line report (what happened, what to do)."""


class SelfVented(CommissionError):
    """The board vented by itself during a hold (its watchdog: no SET for its watchdog_ms, or a
    bad frame): the read-backs since are not the valve's answer to the command. `gap_s`: the
    longest this computer went between two SETs of that hold."""

    def __init__(self, message: str, gap_s: float) -> None:
        super().__init__(message)
        self.gap_s = gap_s


@dataclasses.dataclass
class ProbeStats:
    frames: int = 0
    timeouts: int = 0  # requests not answered within their timeout ...
    late: int = 0  # ... whose reply came later all the same (slow, not lost)
    away_s: float = 0.0  # s this computer did not run while waiting for replies (`AWAY_S`)
    naks: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    rejected: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    @property
    def crc_errors(self) -> int:
        """Frames the board found corrupted (its NAK bad_crc) plus replies this side did."""
        name = P.REASON_NAMES[P.R_BAD_CRC]
        return self.naks[name] + self.rejected[name]


class BoardProbe:
    """The DAC board, one request at a time: each call sends a frame and waits for its reply."""

    def __init__(self, port: str, baud: int = 115200, silent_s: float = SILENT_S) -> None:
        self.port = port
        self.baud = baud
        self.silent_s = silent_s
        self.stats = ProbeStats()
        self.info: P.Info | None = None
        self._ser: serial.Serial | None = None
        self._decoder = P.FrameDecoder()
        self._seq = 0
        # s of unanswered waiting since the last reply (None until HELLO is answered)
        self._unanswered_s: float | None = None
        self._timed_out: set[int] = set()  # seqs of requests that timed out (their reply: late)
        self._late_vents = 0  # vent flags of late replies, until take_late_vents()

    def open(self, wait_s: float = 0.0) -> P.Info:
        """Open the port (retrying up to `wait_s` while it does not exist yet) and identify the
        board; CommissionError if it cannot be opened or does not answer HELLO."""
        end = time.monotonic() + wait_s
        while True:
            try:
                # exclusive: a valve driver holding the board makes this fail, and vice versa
                self._ser = serial.Serial(
                    self.port, self.baud, timeout=0.005, write_timeout=self.silent_s, exclusive=True
                )
                break
            except (serial.SerialException, OSError, ValueError) as exc:
                if time.monotonic() >= end:
                    raise CommissionError(
                        f'cannot open {self.port}: {exc}; check the USB cable, serial_port:=, '
                        'that your user may open it (docs/rig.md, "The PC") and that no valve '
                        'driver (a running graph) holds it'
                    ) from None
                time.sleep(0.2)
        self._ser.reset_input_buffer()
        self._ser.write(b'\x00')  # ends a partial frame left in the board's buffer
        reply = None
        for _ in range(HELLO_TRIES):
            reply, _ = self._request(P.Hello(self._next_seq()), HELLO_TIMEOUT_S)
            if isinstance(reply, P.Info):
                break
        if not isinstance(reply, P.Info):
            raise CommissionError(
                f'the board on {self.port} did not answer HELLO ({HELLO_TRIES} × '
                f'{HELLO_TIMEOUT_S:g} s): is it powered and running the equimus firmware '
                '(docs/rig.md, "Flashing the firmware")?'
            )
        self._unanswered_s = 0.0
        self.info = reply
        return reply

    def close(self, vent: bool = True) -> None:
        """Vent every channel (best effort) and close the port."""
        if self._ser is None:
            return
        if vent and self.info is not None:
            # the board's watchdog vents a board that does not answer
            with contextlib.suppress(CommissionError):
                self._request(P.Set(self._next_seq(), (0,) * self.info.channels), REPLY_TIMEOUT_S)
        with contextlib.suppress(serial.SerialException, OSError):
            self._ser.close()
        self._ser = None

    def __enter__(self) -> BoardProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0xFF
        return self._seq

    def _request(
        self, msg: P.Message, timeout: float = REPLY_TIMEOUT_S
    ) -> tuple[P.Message | None, float]:
        """Send `msg`, wait for the reply with its seq; (reply or None, round trip s)."""
        ser = self._ser
        if ser is None:
            raise CommissionError(f'{self.port} is not open')
        self._timed_out.discard(msg.seq)  # seqs wrap at 256: a reply that old is not coming
        t0 = time.monotonic()
        try:
            ser.write(P.encode(msg))
        except (serial.SerialException, OSError) as exc:
            raise CommissionError(
                f'writing to the board on {self.port} failed: {exc}; was it unplugged?'
            ) from None
        self.stats.frames += 1
        deadline = t0 + timeout
        last = time.monotonic()
        away = 0.0
        while True:
            try:
                data = ser.read(max(1, ser.in_waiting))
            except (serial.SerialException, OSError, TypeError) as exc:
                raise CommissionError(
                    f'reading from the board on {self.port} failed: {exc}; was it unplugged?'
                ) from None
            now = time.monotonic()
            if now - last > AWAY_S:  # this process did not run: give the board that time back
                deadline += now - last
                away += now - last
                self.stats.away_s += now - last
            last = now
            for item in self._decoder.feed(data):
                if not isinstance(item, P.Rejected) and item.seq in self._timed_out:
                    self._timed_out.discard(item.seq)
                    self.stats.late += 1
                    self._answered()  # late, but the board is there
                    if isinstance(item, P.Ack):
                        self._late_vents |= item.flags & VENT_FLAGS
                    continue
                if isinstance(item, P.Rejected):
                    self.stats.rejected[P.REASON_NAMES.get(item.reason, str(item.reason))] += 1
                elif isinstance(item, P.Nak):
                    self.stats.naks[P.REASON_NAMES.get(item.reason, str(item.reason))] += 1
                    if item.seq == msg.seq:
                        self._answered()
                        return item, now - t0
                elif item.seq == msg.seq:
                    self._answered()
                    return item, now - t0
            if now >= deadline:
                self.stats.timeouts += 1
                self._timed_out.add(msg.seq)
                if self._unanswered_s is not None:
                    self._unanswered_s += now - t0 - away
                    if self._unanswered_s > self.silent_s:
                        raise CommissionError(
                            f'the board on {self.port} stopped answering (no reply in '
                            f'{self._unanswered_s:.1f} s of waiting): check its USB cable and '
                            'power'
                        )
                return None, now - t0

    def take_late_vents(self) -> int:
        """The vent flags (ACK_WATCHDOG_VENTED, ACK_BAD_FRAME_VENTED) of replies that came after
        their request had timed out: the board reports a vent once, so a late reply is the only
        word of it. Cleared by the call."""
        flags, self._late_vents = self._late_vents, 0
        return flags

    def _answered(self) -> None:
        if self._unanswered_s is not None:
            self._unanswered_s = 0.0

    def ping(self) -> tuple[P.Ack | None, float]:
        reply, rtt = self._request(P.Ping(self._next_seq()))
        return (reply if isinstance(reply, P.Ack) else None), rtt

    def set(self, codes: Sequence[int]) -> P.Ack | None:
        """One SET; its ACK (None if unanswered). A NAK is a CommissionError: the board refused
        codes the check computed, which must never happen."""
        reply, _ = self._request(P.Set(self._next_seq(), tuple(int(c) for c in codes)))
        if isinstance(reply, P.Nak):
            raise CommissionError(
                f'the board refused SET {list(codes)}: '
                f'{P.REASON_NAMES.get(reply.reason, reply.reason)} (detail {reply.detail}); its '
                'INFO does not match config/valve.yaml'
            )
        return reply if isinstance(reply, P.Ack) else None


# --------------------------------------------------------------------------- the board


@dataclasses.dataclass
class BoardResult:
    info: P.Info
    rtt_ms: dict[str, float]  # p50, p99, max of PINGS round trips
    watchdog_vent_ms: float  # from the last SET's write to the first ACK showing the outputs at 0
    watchdog_flagged: bool  # the ACK carried WATCHDOG_VENTED


def percentiles_ms(samples_s: Sequence[float]) -> dict[str, float]:
    s = sorted(samples_s)
    if not s:
        return {}
    pick = lambda q: s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]  # noqa: E731
    return {'p50': pick(0.5) * 1e3, 'p99': pick(0.99) * 1e3, 'max': s[-1] * 1e3}


def check_board(probe: BoardProbe, cal: ValveCalibration, channels: int) -> BoardResult:
    """The board's identity against the configuration, its round trip, and its watchdog."""
    info = probe.info
    assert info is not None, 'open() the probe first'
    if info.protocol_version != P.PROTOCOL_VERSION:
        raise CommissionError(
            f'the board speaks protocol v{info.protocol_version}, equimus v{P.PROTOCOL_VERSION}: '
            'flash firmware/dac_board/dac_board.ino of this checkout'
        )
    if info.channels != channels or info.dac_bits != cal.dac_bits:
        raise CommissionError(
            f'the board has {info.channels} channels and a {info.dac_bits}-bit DAC; the rig '
            f'needs {channels} and config/valve.yaml says dac_bits {cal.dac_bits}: flash the '
            'matching firmware or fix config/valve.yaml'
        )
    if info.max_code < cal.max_code:
        raise CommissionError(
            f'the board refuses codes above {info.max_code}, config/valve.yaml needs up to '
            f'{cal.max_code} for {cal.max_kpa:g} kPa: the firmware and config/valve.yaml '
            '(dac_vref, output_gain) disagree'
        )
    rtts = []
    for _ in range(PINGS):
        ack, rtt = probe.ping()
        if ack is not None:
            rtts.append(rtt)
    if not rtts:
        raise CommissionError(f'the board on {probe.port} answered HELLO but no PING')
    for _ in range(WATCHDOG_TRIES):
        vented = watchdog_vent(probe, channels)
        if vented is not None:
            return BoardResult(info, percentiles_ms(rtts), vented[0] * 1e3, vented[1])
    raise CommissionError(
        f'the board kept its outputs over {info.watchdog_ms / 1000.0 + WATCHDOG_SLACK_S:.2f} s '
        f'without a SET in each of {WATCHDOG_TRIES} tries (its watchdog: {info.watchdog_ms} ms): '
        'flash the equimus firmware, whose watchdog vents'
    )


def watchdog_vent(probe: BoardProbe, channels: int) -> tuple[float, bool] | None:
    """One SET of WATCHDOG_TEST_CODE, then PINGs (which do not feed the watchdog) until one
    shows the outputs at 0: (s from the SET's write, whether that ACK had WATCHDOG_VENTED), or
    None when they were not vented within watchdog_ms + WATCHDOG_SLACK_S (the board vented,
    by SET, again). Timed from the write, not the ACK: the board's watchdog starts before its
    ACK reaches here, so timed from the ACK a punctual board looked up to a round trip early.
    The flag counts in a late reply too: the board says a vent once, and the reply that says
    it may come after its PING timed out (a starved board process)."""
    info = probe.info
    assert info is not None, 'open() the probe first'
    probe.take_late_vents()  # an earlier vent's word is not this one's
    t0 = time.monotonic()
    if probe.set((WATCHDOG_TEST_CODE,) * channels) is None:
        raise CommissionError(f'the board on {probe.port} did not acknowledge a SET')
    limit = info.watchdog_ms / 1000.0 + WATCHDOG_SLACK_S
    while True:
        time.sleep(0.005)
        now = time.monotonic()
        reply, _ = probe.ping()
        if reply is not None and not any(reply.applied):
            flags = reply.flags | probe.take_late_vents()
            return now - t0, bool(flags & P.ACK_WATCHDOG_VENTED)
        if now - t0 > limit:
            probe.set((0,) * channels)
            return None


# --------------------------------------------------------------------------- one valve


@dataclasses.dataclass
class Level:
    """One held command: its code on the stepped channel, what it nominally gives, and every
    read-back (time s since the level began, kPa per channel)."""

    code: int
    nominal_kpa: float
    t: list[float] = dataclasses.field(default_factory=list)
    kpa: list[tuple[float, ...]] = dataclasses.field(default_factory=list)
    end: float = math.nan  # where the stepped channel's read-back ends (`fit_channel`, `final`)

    def settled(self, channel: int) -> float:
        """Mean read-back of `channel` over the last SETTLED_FRACTION of the hold."""
        if not self.t:
            return math.nan
        start = self.t[-1] * (1.0 - SETTLED_FRACTION)
        values = [p[channel] for t, p in zip(self.t, self.kpa, strict=True) if t >= start]
        return float(np.mean(values))

    def peak(self, channel: int) -> float:
        return max((p[channel] for p in self.kpa), default=math.nan)


@dataclasses.dataclass
class ValveResult:
    name: str
    channel: int
    levels: list[Level]
    fit: ChannelFit | None = None
    verify: Level | None = None
    verify_kpa: float = VERIFY_KPA
    verify_read_kpa: float = math.nan  # where the read-back of the verification step ends

    def steps(self) -> list[Level]:
        """Every step in the order it ran: the levels, the verification from above, the vent."""
        verify = [self.verify] if self.verify is not None else []
        return [*self.levels[:-1], *verify, *self.levels[-1:]]


def hold(
    probe: BoardProbe,
    codes: Sequence[int],
    seconds: float,
    to_kpa: Callable[[int], float],
    watch: Callable[[], str],
) -> Level:
    """Keep `codes` on the board for `seconds`, a SET every SET_PERIOD_S, collecting the
    read-backs; `watch()` is asked every period and a reason from it vents and aborts.

    The level begins with the first SET the board answers: a board (or an emulator on a loaded
    computer) that answers nothing for longer than the hold but less than the probe's silent_s
    delays the level instead of ending it without a read-back, and its clock starts when the
    code was taken, so the fitted dead time is not that wait. A board that stays silent is
    reported as such by the probe. Time this computer did not run while it waited for a reply
    (the probe's away time) lengthens the level by as much: no read-back could be taken then."""
    level = Level(max(codes), math.nan)
    t0 = time.monotonic()
    next_t = t0
    sent, gap = t0, 0.0
    answered, away0 = False, 0.0
    while True:
        now = time.monotonic()
        if answered and now - t0 - (probe.stats.away_s - away0) >= seconds:
            return level
        gap, sent = max(gap, now - sent), now
        away = probe.stats.away_s
        ack = probe.set(codes)
        if ack is not None and not answered:
            answered, t0, away0 = True, now, away
        vents = probe.take_late_vents() | (ack.flags & VENT_FLAGS if ack is not None else 0)
        if vents:
            raise SelfVented(f'the board vented by itself (ACK flags 0x{vents:02x})', gap)
        if ack is not None and ack.measured is not None:
            level.t.append(time.monotonic() - t0)
            level.kpa.append(tuple(to_kpa(m) for m in ack.measured))
        reason = watch()
        if reason:
            probe.set((0,) * len(codes))
            raise CommissionError(f'{reason}: vented, the valve test stopped')
        next_t += SET_PERIOD_S
        time.sleep(max(0.0, next_t - time.monotonic()))


def check_valve(
    probe: BoardProbe,
    name: str,
    channel: int,
    nominal: ValveCalibration,
    to_kpa: Callable[[int], float],
    watch: Callable[[], str] = lambda: '',
    levels: Sequence[float] = LEVELS_KPA,
    hold_s: float = HOLD_S,
) -> ValveResult:
    """Step channel `channel` through `levels` (kPa, by the nominal calibration) and vent, the
    other channels vented; then fit it, and verify the fit at VERIFY_KPA. A test the board's
    own watchdog interrupted is started over: at most STALLED_ATTEMPTS times when this computer
    sent no SET for watchdog_ms (a stall here), ATTEMPTS times otherwise."""
    assert probe.info is not None, 'open() the probe first'
    watchdog_ms = probe.info.watchdog_ms
    tries = stalled = 0
    while True:
        try:
            return _check_valve(probe, name, channel, nominal, to_kpa, watch, levels, hold_s)
        except SelfVented as exc:
            probe.set([0] * probe.info.channels)
            tries += 1
            ours = exc.gap_s * 1e3 > watchdog_ms
            stalled += ours
            if stalled < STALLED_ATTEMPTS and tries - stalled < ATTEMPTS:
                time.sleep(hold_s)  # let the valve vent before the test starts over
                continue
            if ours:
                why = (
                    f'this computer went {exc.gap_s * 1e3:.0f} ms without sending a SET (the '
                    f'board watchdog: {watchdog_ms} ms); run the check with nothing else '
                    'loading it'
                )
            else:
                why = (
                    f'although SETs went out at most {exc.gap_s * 1e3:.0f} ms apart (the board '
                    f'watchdog: {watchdog_ms} ms): SETs are lost or late on the way (USB cable, '
                    'hub) or the board resets; check the link'
                )
            raise CommissionError(f'{exc} in each of {tries} tests of {name}, {why}') from None


def _check_valve(
    probe: BoardProbe,
    name: str,
    channel: int,
    nominal: ValveCalibration,
    to_kpa: Callable[[int], float],
    watch: Callable[[], str],
    levels: Sequence[float],
    hold_s: float,
) -> ValveResult:
    assert probe.info is not None, 'open() the probe first'
    n = probe.info.channels
    result = ValveResult(name, channel, [])

    def run(code: int, nominal_kpa: float) -> Level:
        codes = [0] * n
        codes[channel] = code
        level = hold(probe, codes, hold_s, to_kpa, watch)
        level.code, level.nominal_kpa = code, nominal_kpa
        if not level.t:
            raise CommissionError(
                f'the board sent no read-back for {name} (its ACKs carry no measured values): '
                'the valves cannot be checked without the actual-value outputs on its ADC'
            )
        return level

    for i, kpa in enumerate(levels):
        code = nominal.kpa_to_code(kpa)
        level = run(code, nominal.code_to_kpa(code))
        result.levels.append(level)
        if i == 0 and level.settled(channel) < MOVED_FRACTION * level.nominal_kpa:
            probe.set([0] * n)
            raise CommissionError(
                f'valve {name} does not follow its setpoint: {level.nominal_kpa:.1f} kPa '
                f'commanded, {level.settled(channel):.1f} kPa read back after {hold_s:g} s; '
                'check its 24 V, its air supply and its setpoint wires (M12 pins 4 and 2)'
            )
    try:
        result.fit = fit_channel(result.levels, channel, name)
    except CommissionError:
        probe.set([0] * n)
        raise
    fitted = with_fit(nominal, result.fit, probe.info.max_code)
    result.verify = run(fitted.kpa_to_code(VERIFY_KPA), VERIFY_KPA)
    vent = run(0, 0.0)
    result.levels.append(vent)
    for other in range(n):
        peak = max(lv.peak(other) for lv in result.levels) if other != channel else 0.0
        if peak > CROSSTALK_KPA:
            raise CommissionError(
                f'stepping {name} raised the read-back of channel {other} to {peak:.1f} kPa: '
                'the channels are crossed (DAC A and ADC A0 are MAA, DAC B and A1 are BAA)'
            )
    if vent.settled(channel) > VENTED_KPA:
        raise CommissionError(
            f'valve {name} does not vent: {vent.settled(channel):.1f} kPa read back {hold_s:g} s '
            'after a 0 V setpoint; check its exhaust port and the setpoint wires'
        )
    vented = step_timing(vent, channel, result.verify.settled(channel), vent.settled(channel))
    if vented is not None:
        result.fit = dataclasses.replace(result.fit, tau_vent_s=vented[1])
    top = result.levels[-2]
    p_top = final(top, channel, top.settled(channel), math.nan, math.nan)
    down = step_timing(result.verify, channel, p_top, result.verify.settled(channel))
    got = result.verify_read_kpa = final(
        result.verify, channel, p_top, *(down[:2] if down else (math.nan, math.nan))
    )
    if abs(got - VERIFY_KPA) > VERIFY_TOLERANCE_KPA:
        raise CommissionError(
            f'valve {name}: {VERIFY_KPA:g} kPa commanded with its new calibration, {got:.1f} kPa '
            f'read back (more than {VERIFY_TOLERANCE_KPA:g} kPa off): the valve is not '
            'repeatable; check its air supply and run the check again'
        )
    return result


def fit_channel(levels: Sequence[Level], channel: int, name: str) -> ChannelFit:
    """The DAC-chain gain and offset that map the nominal pressures of the regulated levels to
    their final read-backs (least squares), and the steps' timing.

    A level's final read-back is its settled mean carried to the end of the lag by the steps'
    own first-order fit (`final`): a hold a few time constants long still leaves a step short
    of its end by e^(-hold/τ), which would bias the offset."""
    regulated = [lv for lv in levels if lv.nominal_kpa > 0]
    first = regulated[0].kpa[0][channel]  # the first read-back, before the valve has moved
    ends = [lv.settled(channel) for lv in regulated]
    dead = tau = math.nan
    rising: list[tuple[float, float, float]] = []
    for _ in range(2):  # the timing from the settled means, then from the ends it gives
        starts = [first, *ends[:-1]]
        timings = [
            step_timing(lv, channel, p0, pf)
            for lv, p0, pf in zip(regulated, starts, ends, strict=True)
        ]
        rising = [t for t in timings if t is not None]
        dead = float(np.median([d for d, _, _ in rising])) if rising else math.nan
        tau = float(np.median([tau for _, tau, _ in rising])) if rising else math.nan
        ends = [final(lv, channel, p0, dead, tau) for lv, p0 in zip(regulated, starts, strict=True)]
    for lv, end in zip(regulated, ends, strict=True):
        lv.end = end
    x = np.array([lv.nominal_kpa for lv in regulated])
    y = np.array(ends)
    gain, offset = np.polyfit(x, y, 1)
    residual = float(np.sqrt(np.mean((gain * x + offset - y) ** 2)))
    lo, hi = DAC_GAIN_RANGE
    if not (lo <= gain <= hi and abs(offset) <= DAC_OFFSET_LIMIT_KPA) or residual > (
        MAX_RESIDUAL_KPA
    ):
        raise CommissionError(
            f'valve {name} does not follow its setpoint: it reads back {gain:.3f} × the nominal '
            f'pressure {offset:+.1f} kPa (±{residual:.1f} kPa rms), allowed [{lo}, {hi}], '
            f'±{DAC_OFFSET_LIMIT_KPA:g} kPa, {MAX_RESIDUAL_KPA:g} kPa rms: check output_gain and '
            "dac_vref in config/valve.yaml and the setpoint's own ground wire (M12 pin 2)"
        )
    return ChannelFit(
        float(gain),
        float(offset),
        residual,
        tau_fill_s=tau,
        dead_time_s=dead,
        t90_s=float(np.mean([t90 for _, _, t90 in rising])) if rising else math.nan,
    )


def final(level: Level, channel: int, p0: float, dead: float, tau: float) -> float:
    """Where the read-back of a step from p0 ends: each sample of the settled window solved for
    the end value of a first-order lag (dead time `dead`, time constant `tau`), averaged; the
    plain mean when the lag is unknown or long over."""
    if not level.t:
        return math.nan
    if not (math.isfinite(dead) and math.isfinite(tau) and tau > 0):
        return level.settled(channel)
    start = level.t[-1] * (1.0 - SETTLED_FRACTION)
    if math.exp(-max(0.0, start - dead) / tau) > MAX_LEFT:  # the lag or the hold is off: as seen
        return level.settled(channel)
    ends = []
    for t, p in zip(level.t, level.kpa, strict=True):
        if t >= start:
            left = math.exp(-max(0.0, t - dead) / tau)  # the fraction of the step still to go
            ends.append((p[channel] - p0 * left) / (1.0 - left))
    return float(np.mean(ends))


def step_timing(
    level: Level, channel: int, p0: float, pf: float
) -> tuple[float, float, float] | None:
    """(dead time, time constant, t90) of one step from p0 to pf, from the times its read-back
    first crosses 10 % and 90 % of the step (a first-order lag crosses them 2.197 τ apart) on a
    three-sample running mean; None for a step too small to time (under 3 kPa)."""
    if not _timeable(level, p0, pf):
        return None
    t = np.array(level.t)
    y = _progress(level, channel, p0, pf)
    t10, t90 = _first(t, y, 0.1), _first(t, y, 0.9)
    if t10 is None or t90 is None or t90 <= t10:
        return None
    tau = (t90 - t10) / math.log(9.0)
    dead = max(0.0, t10 - tau * math.log(10.0 / 9.0))
    return dead, tau, t90


def _timeable(level: Level, p0: float, pf: float) -> bool:
    """A step large enough (3 kPa) and read back often enough (5 samples) to be timed."""
    return abs(pf - p0) >= 3.0 and len(level.t) >= 5


def _progress(level: Level, channel: int, p0: float, pf: float) -> np.ndarray:
    """The read-back of a step from p0 to pf as the fraction of the step made, on a
    three-sample running mean (one noisy sample neither times a step nor overshoots it)."""
    y = (np.array([p[channel] for p in level.kpa]) - p0) / (pf - p0)
    y = np.convolve(y, np.ones(3) / 3.0, mode='same')
    y[0], y[-1] = y[1], y[-2]
    return y


def _first(t: np.ndarray, y: np.ndarray, fraction: float) -> float | None:
    """When y first reaches `fraction`, interpolated between the samples around it."""
    hit = np.nonzero(y >= fraction)[0]
    if not len(hit):
        return None
    i = int(hit[0])
    if i == 0:
        return float(t[0])
    return float(t[i - 1] + (fraction - y[i - 1]) / (y[i] - y[i - 1]) * (t[i] - t[i - 1]))


@dataclasses.dataclass(frozen=True)
class StepShape:
    """One step of a valve's check as its read-back showed it, step by step rather than as the
    medians the calibration keeps: whether the valve starts later, or overshoots more, at some
    levels than a dead time and one lag allow (docs/identification.md: the knee's fills at
    10-20 kPa start late and overshoot, with no pressure measured in the authors' data)."""

    nominal_kpa: float  # what the step commanded (nominal calibration; 0 = vent)
    from_kpa: float  # the read-back it started from
    to_kpa: float  # where it ended (the level's final read-back)
    t10_s: float  # from the command to 10 % of the step (nan: too small to time)
    t50_s: float
    dead_time_s: float  # the first-order fit of its 10 % and 90 % crossings (step_timing)
    tau_s: float
    overshoot_kpa: float  # furthest past its end in the step's direction (>= 0)


def step_shapes(result: ValveResult) -> list[StepShape]:
    """Every step of a checked valve (`ValveResult.steps`), each from where the one before
    ended."""
    ch = result.channel
    steps = result.steps()
    shapes = []
    p0 = steps[0].kpa[0][ch] if steps and steps[0].kpa else 0.0
    for lv in steps:
        if not lv.t:
            continue
        pf = lv.end if math.isfinite(lv.end) else lv.settled(ch)
        timing = step_timing(lv, ch, p0, pf)
        t10 = t50 = math.nan
        over = math.nan
        if _timeable(lv, p0, pf):
            t, y = np.array(lv.t), _progress(lv, ch, p0, pf)
            crossed = (_first(t, y, 0.1), _first(t, y, 0.5))
            t10, t50 = (math.nan if c is None else c for c in crossed)
            over = max(0.0, float(np.max(y) - 1.0) * abs(pf - p0))
        dead, tau = (timing[0], timing[1]) if timing else (math.nan, math.nan)
        shapes.append(StepShape(lv.nominal_kpa, p0, pf, t10, t50, dead, tau, over))
        p0 = pf
    return shapes
