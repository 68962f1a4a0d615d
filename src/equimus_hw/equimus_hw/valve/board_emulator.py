"""DAC board emulator: the reference firmware's behaviour on a real pseudo-terminal.

Run `dac_board_emulator --link /tmp/equimus_dac` and point the valve driver's `port` parameter at
/tmp/equimus_dac. It speaks protocol.py exactly (docs/dac_board_protocol.md), models each VPPE as
the description's valve (equimus_description.valve.Valve: dead time, fill and vent constants from
the leg description) whose pressure it reports through the ACK's
measured codes, vents on boot, on bad frames and when its watchdog expires, and can be told to
misbehave (drop bytes, corrupt frames, stall, disappear and reappear) from the command line or
from Python (`BoardEmulator`). Every decoded SET is logged with its codes so tests can check the
bytes on the wire, and any code above the 50 kPa code counts as an invariant violation.
`--firmware BINARY` runs the board's own firmware, built for this computer, behind the pty instead
(host_firmware.py, firmware/host/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import random
import select
import signal
import sys
import threading
import time
import tty
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from equimus_description.valve import VALVE_TAU_S, ValveParams

from . import protocol as P
from .board_model import BoardRecord, FrameRecord, valve_models
from .calibration import ValveCalibration

if TYPE_CHECKING:
    from .host_firmware import FirmwareBoard

FIRMWARE_VERSION = (1, 0, 0)
#: Passes of the board loop further apart than this are logged ('loop_gap'); it polls every 2 ms.
LOOP_GAP_S = 0.02


def _millis(t: float) -> int:
    """A time in seconds as the firmware's millisecond counter (whole ms, truncated)."""
    return math.floor(t * 1000.0)


class BoardEmulator(BoardRecord):
    """A DAC board on a pty. start() runs it in a background thread; close() stops it."""

    def __init__(
        self,
        channels: int = 2,
        link: str | None = None,
        calibration: ValveCalibration | None = None,
        watchdog_ms: int = 200,
        tau_s: float = VALVE_TAU_S,
        dead_time_s: float = 0.0,
        valve: ValveParams | None = None,
        adc: bool = True,
        vent_on_bad_frame: bool = True,
        drop_rate: float = 0.0,
        corrupt_rate: float = 0.0,
        log_path: str | None = None,
        verbose: bool = False,
        seed: int | None = None,
        history: int = 20000,
        session_path: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        dac_gain: float | Sequence[float] | None = None,
        dac_offset_kpa: float | Sequence[float] | None = None,
        adc_noise_kpa: float | Sequence[float] | None = None,
        regulation: Sequence[Callable[[float], float] | None] | None = None,
    ):
        """session_path: JSON lines of every byte chunk received (after the injected faults),
        for replay (replay.py).
        clock: the board's time base in seconds (a replay passes its own).
        dac_gain, dac_offset_kpa, adc_noise_kpa: per channel (or one for all; None = neutral),
        each valve's DAC chain error and read-back noise (`ValveModel`).
        regulation: per channel, the VPPE's setpoint-to-regulated-pressure map (`ValveModel`);
        None: ideal valves."""
        self.cal = calibration or ValveCalibration()
        self.channels = channels
        self.link = link
        self.watchdog_s = watchdog_ms / 1000.0
        self.watchdog_ms = int(watchdog_ms)
        self.adc = adc
        self.vent_on_bad_frame = vent_on_bad_frame
        self.max_code = self.cal.max_code
        self.drop_rate = float(drop_rate)
        self.corrupt_rate = float(corrupt_rate)
        self.verbose = verbose
        self._rng = random.Random(seed)
        self._start_record(history, log_path, session_path)
        self._clock = clock
        self._lock = threading.RLock()
        # valve: the description's valve model; else a lag of tau_s with a dead time
        params = valve if valve is not None else ValveParams(tau_s, tau_s, dead_time_s)
        self.valves = valve_models(
            self.cal, params, channels, dac_gain, dac_offset_kpa, adc_noise_kpa, seed, regulation
        )
        self.codes = [0] * channels
        self._flags = 0
        self._last_valid_set = 0.0
        self._stalled = False
        self._drop_next = 0
        self._corrupt_next = 0
        self._master: int | None = None
        self._slave: int | None = None
        self.slave_path = None
        self._decoder = P.FrameDecoder(accept=P.HOST_TO_BOARD_TYPES)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._open_pty()

    # ----------------------------------------------------------------- pty lifecycle
    def _open_pty(self) -> None:
        master, slave = os.openpty()
        tty.setraw(slave)  # no echo or line editing before the host opens it
        os.set_blocking(master, False)
        self._master, self._slave = master, slave
        self.slave_path = os.ttyname(slave)
        if self.link:
            tmp = f'{self.link}.{os.getpid()}.tmp'
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.symlink(self.slave_path, tmp)
            os.replace(tmp, self.link)
        self._boot()

    def _boot(self) -> None:
        """Firmware power-up: all outputs 0 V, watchdog armed, FRESH_BOOT until a valid SET."""
        now = self._clock()
        self.boots += 1
        self._decoder.reset()
        self._flags = P.ACK_FRESH_BOOT
        self._last_valid_set = now
        self._write_codes([0] * self.channels, now)
        self._session({'t': now, 'boot': True})

    def _close_pty(self) -> None:
        for fd in (self._master, self._slave):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._master = self._slave = None
        self._remove_link()

    @property
    def present(self) -> bool:
        return self._master is not None

    def disappear(self) -> None:
        """Unplug: close the pty (the host sees I/O errors) and remove the link."""
        with self._lock:
            self._close_pty()
            self._unpowered(self._clock())

    def reappear(self) -> None:
        """Plug back in: a new pty (new /dev/pts path, link updated) and a fresh boot."""
        with self._lock:
            if self._master is None:
                self._open_pty()

    def stall(self, stalled: bool = True) -> None:
        """Hung firmware: input is swallowed, nothing is answered, outputs hold their codes
        (the worst case: a real board's hardware watchdog would reset it to 0 V)."""
        with self._lock:
            self._stalled = stalled

    def drop_next_bytes(self, n: int) -> None:
        with self._lock:
            self._drop_next += int(n)

    def corrupt_next_frames(self, n: int) -> None:
        with self._lock:
            self._corrupt_next += int(n)

    # ----------------------------------------------------------------- running
    def start(self) -> BoardEmulator:
        self._thread = threading.Thread(target=self.run, name='dac_board_emulator', daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        with self._lock:
            self._close_pty()
        self._close_files()

    @property
    def alive(self) -> bool:
        """The board's loop runs (a stall does not stop it)."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> BoardEmulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self) -> None:
        last = self._clock()
        while not self._stop.is_set():
            master = self._master
            if master is None:
                time.sleep(0.005)
            else:
                with contextlib.suppress(OSError, ValueError):
                    select.select([master], [], [], 0.002)
            last = self.run_pass(master, last)

    def run_pass(self, master: int | None, last: float) -> float:
        """One pass of run() after its wait, `last` the previous pass's time; this pass's time.

        The time first, then every byte that came by it: a pass that this process was starved
        in after its wait (the suite's load) must not run the watchdog against a SET frame that
        is already in the buffer, as a firmware's loop drains its UART before its watchdog
        check. The valves first run to that time at the codes they held, so an ACK reads the
        pressure of its own moment, as a board's ADC does, and a new code acts from its arrival
        on (a pass starved for 0.5 s answered its SET with the pressure of 0.5 s before, and a
        vent then seemed not to happen: `equimus check rig` failed a good valve)."""
        now = self._clock()
        data = self._read_pending(master) if master is not None else b''
        with self._lock:
            if now - last > LOOP_GAP_S:
                # The emulator's own starvation (a real board's loop does not wait on a host's
                # scheduler): a soak allows it around a late vent instead of blaming the driver.
                self._log({'event': 'loop_gap', 't': now, 'gap': now - last})
            for v in self.valves:
                v.advance(now, now - last)
        self.step(data, now, 0.0)
        return now

    @staticmethod
    def _read_pending(master: int) -> bytes:
        """What the non-blocking pty holds now (b'' without a reader on the slave side yet, or
        once `disappear` closed it)."""
        chunks = []
        while True:
            try:
                chunk = os.read(master, 4096)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                time.sleep(0.002)
                break
            if not chunk:
                break
            chunks.append(chunk)
            if len(chunk) < 4096:
                break
        return b''.join(chunks)

    def step(self, data: bytes, now: float, dt: float) -> None:
        """One pass of the firmware's loop at time `now`: the bytes that arrived, then the
        watchdog, then the valves over dt. run() calls it in real time, a replay on its clock."""
        with self._lock:
            if data:
                self._receive(data, now)
            self._tick(now, dt)

    def _tick(self, now: float, dt: float) -> None:
        # Whole milliseconds, as the firmware's millis(): elapsed > watchdog_ms vents.
        elapsed_ms = _millis(now) - _millis(self._last_valid_set)
        if not self._stalled and any(self.codes) and elapsed_ms > self.watchdog_ms:
            self.watchdog_trips += 1
            self._flags |= P.ACK_WATCHDOG_VENTED
            self._write_codes([0] * self.channels, now)
            self._log({'event': 'watchdog_vent', 't': now})
        for v in self.valves:
            v.advance(now, dt)

    def _receive(self, data: bytes, now: float) -> None:
        if self._stalled:
            return
        if self._drop_next or self.drop_rate > 0:
            kept = bytearray()
            for b in data:
                if self._drop_next:
                    self._drop_next -= 1
                elif self.drop_rate > 0 and self._rng.random() < self.drop_rate:
                    pass
                else:
                    kept.append(b)
            data = bytes(kept)
        # Split at delimiters ourselves so frame corruption can be injected per frame.
        parts = data.split(b'\x00')
        for i, part in enumerate(parts):
            if part and (
                self._corrupt_next
                or (self.corrupt_rate > 0 and self._rng.random() < self.corrupt_rate)
            ):
                if self._corrupt_next:
                    self._corrupt_next -= 1
                j = self._rng.randrange(len(part))
                bit = self._rng.randrange(8)
                flipped = part[j] ^ (1 << bit)
                if flipped == 0:  # a 0x00 would split the frame instead of corrupting it
                    flipped = part[j] ^ (1 << (bit + 1) % 8)
                parts[i] = part[:j] + bytes([flipped]) + part[j + 1 :]
        data = b'\x00'.join(parts)
        if not data:
            return
        self._session({'t': now, 'rx': data.hex()})  # what the firmware reads, after the faults
        for item in self._decoder.feed(data):
            self._handle(item, now)

    def _handle(self, item, now: float) -> None:
        if isinstance(item, P.Rejected):
            self.rejections.append((now, item.reason, item.message))
            self._log(
                {
                    'event': 'rejected',
                    't': now,
                    'reason': P.REASON_NAMES.get(item.reason),
                    'detail': item.message,
                }
            )
            # A frame of a type the board does not take changes nothing; a malformed one vents.
            if item.reason != P.R_UNKNOWN_TYPE and self.vent_on_bad_frame and any(self.codes):
                self._flags |= P.ACK_BAD_FRAME_VENTED
                self._write_codes([0] * self.channels, now)
            # seq is 0 for undecodable frames, the request's for CRC-valid malformed ones.
            self._send(P.Nak(item.seq, item.reason))
            return
        if isinstance(item, P.Set):
            self._handle_set(item, now)
        elif isinstance(item, P.Ping):
            self._send(self._ack(item.seq))
        else:
            assert isinstance(item, P.Hello)  # the decoder passes only HOST_TO_BOARD_TYPES
            self._send(
                P.Info(
                    item.seq,
                    P.PROTOCOL_VERSION,
                    FIRMWARE_VERSION,
                    self.channels,
                    self.cal.dac_bits,
                    self.cal.adc_bits if self.adc else 0,
                    P.INFO_VENT_ON_BAD_FRAME if self.vent_on_bad_frame else 0,
                    int(round(self.cal.dac_vref * 1000)),
                    self.watchdog_ms,
                    self.max_code,
                )
            )

    def _handle_set(self, msg: P.Set, now: float) -> None:
        codes = tuple(msg.codes)
        reason = 0
        detail = 0
        if len(codes) != self.channels:
            reason, detail = P.R_BAD_CHANNEL_COUNT, self.channels
        else:
            for ch, c in enumerate(codes):
                if c > self.max_code:
                    reason, detail = P.R_CODE_OUT_OF_RANGE, ch
                    break
        rec = FrameRecord(now, msg.seq, codes, reason == 0)
        self.frames.append(rec)
        self.frames_total += 1
        self._log(
            {
                'event': 'set',
                't': now,
                'seq': msg.seq,
                'codes': list(codes),
                'accepted': reason == 0,
            }
        )
        if self.verbose:
            print(
                f'{now:.6f} SET seq={msg.seq} codes={list(codes)}'
                f'{"" if reason == 0 else " REFUSED " + P.REASON_NAMES[reason]}',
                flush=True,
            )
        if any(c > self.max_code for c in codes):
            self.invariant_violations.append(rec)
        if reason:
            self._flags |= P.ACK_BAD_FRAME_VENTED
            self._write_codes([0] * self.channels, now)
            self._send(P.Nak(msg.seq, reason, detail))
            return
        self._last_valid_set = now
        self._write_codes(list(codes), now)
        self._send(self._ack(msg.seq))
        self._flags &= ~P.ACK_FRESH_BOOT

    def _ack(self, seq: int) -> P.Ack:
        measured = None
        if self.adc:
            measured = tuple(self.cal.kpa_to_adc(v.measured()) for v in self.valves)
        ack = P.Ack(seq, self._flags, tuple(self.codes), measured)
        self._flags &= P.ACK_FRESH_BOOT  # the event flags are reported once, then cleared
        return ack

    def _write_codes(self, codes: list[int], now: float) -> None:
        self.codes = list(codes)
        for v, c in zip(self.valves, codes, strict=True):  # SET frames are length-checked
            v.set_code(c, now)

    def _send(self, msg) -> None:
        if self._master is None:
            return
        # OSError: host not reading / buffer full: a real UART drops bytes the same way.
        with contextlib.suppress(OSError):
            os.write(self._master, P.encode(msg))


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(','))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f'{text!r}: numbers separated by commas, one per channel (or one for all)'
        ) from None


#: The per-channel valve errors as command-line options: option -> (keyword, meaning).
VALVE_ERROR_OPTIONS = {
    '--dac-gain': ('dac_gain', "each channel's DAC chain gain (setpoint V per nominal V)"),
    '--dac-offset-kpa': (
        'dac_offset_kpa',
        "each channel's DAC chain offset, kPa (a negative first value: --dac-offset-kpa=-2,1)",
    ),
    '--adc-noise-kpa': ('adc_noise_kpa', 'standard deviation of each read-back, kPa'),
}


def add_valve_error_arguments(parser: argparse.ArgumentParser) -> None:
    """--dac-gain, --dac-offset-kpa, --adc-noise-kpa: comma-separated, one per channel or one
    for all (default: the nominal chain, no noise)."""
    for option, (dest, text) in VALVE_ERROR_OPTIONS.items():
        parser.add_argument(
            option, dest=dest, type=_floats, default=None, metavar='V[,V]', help=text
        )


def main(args=None) -> int:
    parser = argparse.ArgumentParser(
        prog='dac_board_emulator',
        description='Emulate the equimus VPPE DAC board (docs/dac_board_protocol.md) on a '
        'pseudo-terminal. Point the valve driver at the printed path or --link.',
    )
    parser.add_argument(
        '--link',
        default='/tmp/equimus_dac',
        help='symlink to the pty slave (default %(default)s; "" for none)',
    )
    parser.add_argument('--channels', type=int, default=2)
    parser.add_argument('--watchdog-ms', type=int, default=200)
    parser.add_argument(
        '--tau',
        type=float,
        default=None,
        help="valve time constant (fill and vent), s (default: the leg description's valve)",
    )
    parser.add_argument(
        '--dead-time',
        type=float,
        default=None,
        help="valve dead time, s (default: the leg description's)",
    )
    add_valve_error_arguments(parser)
    parser.add_argument('--no-adc', action='store_true', help='board without read-back ADC')
    parser.add_argument(
        '--keep-on-bad-frame',
        action='store_true',
        help='do not vent on a bad frame (firmware option)',
    )
    parser.add_argument(
        '--drop-rate', type=float, default=0.0, help='probability of dropping each received byte'
    )
    parser.add_argument(
        '--corrupt-rate',
        type=float,
        default=0.0,
        help='probability of flipping a bit in each received frame',
    )
    parser.add_argument(
        '--stall-after', type=float, default=None, help='stop responding after this many seconds'
    )
    parser.add_argument(
        '--disappear-after',
        type=float,
        default=None,
        help='close the pty and remove the link after this many seconds',
    )
    parser.add_argument(
        '--reappear-after',
        type=float,
        default=None,
        help='seconds after disappearing to come back on a new pty',
    )
    parser.add_argument('--log', default=None, help='append every frame as JSON lines here')
    parser.add_argument(
        '--session',
        default=None,
        help='record every byte received, with its time, as JSON lines (for valve.replay)',
    )
    parser.add_argument(
        '--firmware',
        default=None,
        metavar='BINARY',
        help='run the board firmware built for this computer (firmware/host/README.md) instead '
        'of the Python emulation; this process keeps the valves and the faults',
    )
    parser.add_argument('--verbose', action='store_true', help='print every SET frame')
    parser.add_argument('--seed', type=int, default=None)
    ns = parser.parse_args(args)

    from equimus_description.leg import load_leg

    valve = load_leg().valve
    if ns.tau is not None:
        valve = dataclasses.replace(valve, tau_fill=ns.tau, tau_vent=ns.tau)
    if ns.dead_time is not None:
        valve = dataclasses.replace(valve, dead_time=ns.dead_time)
    emu: BoardEmulator | FirmwareBoard
    if ns.firmware:
        from .host_firmware import FirmwareBoard  # noqa: F811 (the run-time import)

        compiled_in = [
            flag
            for flag, given in (
                ('--no-adc', ns.no_adc),
                ('--keep-on-bad-frame', ns.keep_on_bad_frame),
                ('--drop-rate', ns.drop_rate),
                ('--corrupt-rate', ns.corrupt_rate),
            )
            if given
        ]
        if compiled_in:
            print(
                f'dac_board_emulator: {", ".join(compiled_in)} not available with --firmware '
                '(the firmware is what it is); drop the option',
                file=sys.stderr,
            )
            return 2
        try:
            emu = FirmwareBoard(
                ns.firmware,
                link=ns.link or None,
                watchdog_ms=ns.watchdog_ms,
                channels=ns.channels,
                valve=valve,
                log_path=ns.log,
                session_path=ns.session,
                verbose=ns.verbose,
                seed=ns.seed,
                dac_gain=ns.dac_gain,
                dac_offset_kpa=ns.dac_offset_kpa,
                adc_noise_kpa=ns.adc_noise_kpa,
            )
        except (OSError, RuntimeError, ValueError) as exc:
            print(f'dac_board_emulator: cannot run {ns.firmware}: {exc}', file=sys.stderr)
            return 2
    else:
        emu = BoardEmulator(
            channels=ns.channels,
            link=ns.link or None,
            watchdog_ms=ns.watchdog_ms,
            valve=valve,
            adc=not ns.no_adc,
            vent_on_bad_frame=not ns.keep_on_bad_frame,
            drop_rate=ns.drop_rate,
            corrupt_rate=ns.corrupt_rate,
            log_path=ns.log,
            session_path=ns.session,
            verbose=ns.verbose,
            seed=ns.seed,
            dac_gain=ns.dac_gain,
            dac_offset_kpa=ns.dac_offset_kpa,
            adc_noise_kpa=ns.adc_noise_kpa,
        )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    emu.start()
    kind = 'host firmware' if ns.firmware else 'emulator'
    print(
        f'DAC board {kind} on {emu.slave_path}' + (f' (link {ns.link})' if ns.link else ''),
        flush=True,
    )
    t0 = time.monotonic()
    disappeared_at = None
    stalled = False
    try:
        while not stop.wait(0.05):
            t = time.monotonic() - t0
            if ns.stall_after is not None and not stalled and t >= ns.stall_after:
                emu.stall(True)
                stalled = True
                print('stalled: no longer responding', flush=True)
            if (
                ns.disappear_after is not None
                and disappeared_at is None
                and t >= ns.disappear_after
            ):
                emu.disappear()
                disappeared_at = t
                print('disappeared: pty closed', flush=True)
            if (
                disappeared_at is not None
                and ns.reappear_after is not None
                and not emu.present
                and t >= disappeared_at + ns.reappear_after
            ):
                emu.reappear()
                print(f'reappeared on {emu.slave_path}', flush=True)
    finally:
        emu.close()
        print(
            f'DAC board {kind} stopped: {emu.frames_total} SET frames, '
            f'{len(emu.rejections)} rejected, {emu.watchdog_trips} watchdog trips, '
            f'{len(emu.invariant_violations)} invariant violations',
            flush=True,
        )
    return 0


if __name__ == '__main__':
    sys.exit(main())
