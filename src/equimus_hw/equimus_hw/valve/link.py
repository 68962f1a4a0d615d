"""Host side of the DAC board serial link (pyserial, no ROS imports).

A background thread owns the port: it opens it, performs the HELLO/INFO handshake, reads and
decodes every reply (ACK, NAK, INFO), times out unanswered frames, declares the link lost on
I/O errors or when the board stops answering (stall), and reopens the port with exponential
back-off. `send_codes` may be called from any thread; it writes one SET frame immediately.

Every (re)connect increments `generation`, so the owner can vent and wait for a fresh command.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence

import serial

from . import protocol as P
from .calibration import ValveCalibration


class LinkStats:
    """Counters for diagnostics; mutated by the link thread and read by anyone."""

    def __init__(self) -> None:
        self.frames_sent = 0
        self.acks = 0
        self.naks: dict[str, int] = collections.Counter()
        self.ack_timeouts = 0
        self.rx_rejected = 0
        self.board_watchdog_vents = 0
        self.board_bad_frame_vents = 0
        self.board_boots_seen = 0
        self.reconnects = 0
        self.connect_failures = 0
        self.latencies_s: collections.deque[float] = collections.deque(maxlen=500)


def _write_frame(ser: serial.Serial, data: bytes) -> None:
    """A whole frame in one write() call: pyserial's write() follows every write with a select()
    for writability (a second system call on the control path). The port's descriptor is
    non-blocking, so a full output buffer (a board not reading) leaves the rest to pyserial's
    write, which waits up to its write timeout."""
    try:
        n = os.write(ser.fd, data)
    except BlockingIOError:
        n = 0
    if n < len(data):
        ser.write(data[n:])


class BoardLink:
    """The serial DAC board (implements board.Board). Its firmware vents when no SET arrives
    within its watchdog, so the driver re-sends the codes as a keep-alive."""

    needs_keepalive = True

    def __init__(
        self,
        port: str,
        channels: int,
        calibration: ValveCalibration,
        baud: int = 115200,
        ack_timeout_s: float = 0.05,
        link_timeout_s: float = 0.5,
        handshake_timeout_s: float = 0.5,
        backoff_min_s: float = 0.1,
        backoff_max_s: float = 2.0,
        log: Callable[[str, str], None] | None = None,
    ):
        self.port = port
        self.channels = channels
        self.cal = calibration
        self.baud = baud
        self.ack_timeout_s = ack_timeout_s
        self.link_timeout_s = link_timeout_s
        self.handshake_timeout_s = handshake_timeout_s
        self.backoff_min_s = backoff_min_s
        self.backoff_max_s = backoff_max_s
        self._log = log or (lambda level, text: None)
        self.stats = LinkStats()
        self.state = 'connecting'
        self.last_error = ''
        self.info: P.Info | None = None
        self.generation = 0
        self.measured_kpa: list[float] | None = None
        self.measured_count = 0
        # time.monotonic() when the SET that the last read-back answers was written: the board
        # reads its ADC as that frame arrives, so this (not the ACK's arrival) is its time
        self.measured_at: float | None = None
        self.board_codes: list[int] | None = None
        self._ser: serial.Serial | None = None
        self._wlock = threading.Lock()
        self._seq = 0
        self._pending: dict[int, float] = {}
        self._last_rx = 0.0
        self._last_tx = 0.0
        self._lost_reason: str | None = None
        self._decoder = P.FrameDecoder()
        # Every frame's SET goes through it: compiled where built (protocol.set_encoder).
        self.encode_set = P.set_encoder()
        self._ack_event = threading.Condition()
        self._last_ack_seq: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='valve_link', daemon=True)

    # ----------------------------------------------------------------- public API
    @property
    def connected(self) -> bool:
        return self.state == 'connected'

    @property
    def set_encoder(self) -> str:
        return P.encoder_form(self.encode_set)

    def start(self) -> None:
        self._thread.start()

    def send_codes(self, codes: list[int]) -> int | None:
        """Write one SET frame now; returns its seq, or None if the link is down."""
        with self._wlock:
            if self._ser is None or self.state != 'connected':
                return None
            return self._write_set_locked(codes)

    def rehearse(self, codes: list[int]) -> bytes:
        """The SET frame send_codes would write for these codes (sequence number 0), unwritten."""
        return self.encode_set(0, codes)

    def vent_and_close(self, timeout_s: float = 1.0) -> bool:
        """Send SET all-zero until the board acknowledges one, for up to timeout_s, then stop
        and close the port. Re-sent every ack_timeout_s, and as soon as a link that was lost
        is back: a board that stalls (or a loaded host) must not turn a vent it would have
        taken into an unconfirmed one.

        Returns True when the board acknowledged the vent."""
        acked = False
        vents: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while not acked and time.monotonic() < deadline:
            seq = self.send_codes([0] * self.channels)
            if seq is not None:
                vents.add(seq)
            resend = min(deadline, time.monotonic() + self.ack_timeout_s)
            with self._ack_event:
                while not (acked := self._last_ack_seq in vents):
                    left = resend - time.monotonic()
                    if left <= 0:
                        break
                    self._ack_event.wait(left)
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=1.0)
        with self._wlock:
            self._close_locked('closed')
        return acked

    def latency_percentiles_ms(self) -> dict[str, float]:
        samples = sorted(self.stats.latencies_s)
        if not samples:
            return {}
        pick = lambda q: samples[min(len(samples) - 1, int(q * (len(samples) - 1) + 0.5))]
        return {'p50': pick(0.5) * 1e3, 'p99': pick(0.99) * 1e3, 'max': samples[-1] * 1e3}

    # ----------------------------------------------------------------- internals
    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0xFF
        return self._seq

    def _write_set_locked(self, codes: Sequence[int]) -> int | None:
        """Write one SET frame of these codes under the next seq; the seq, or None when the
        write failed (the link is then lost)."""
        seq = self._next_seq()
        data = self.encode_set(seq, codes)
        ser = self._ser
        assert ser is not None, 'callers hold _wlock and have checked (or just set) the open port'
        try:
            _write_frame(ser, data)
        except (serial.SerialException, OSError) as exc:
            self._lost_reason = f'write failed: {exc}'
            return None
        now = time.monotonic()
        self._last_tx = now
        if seq in self._pending:  # 256 frames in flight without an answer
            self.stats.ack_timeouts += 1
        self._pending[seq] = now
        self.stats.frames_sent += 1
        return seq

    def _close_locked(self, state: str) -> None:
        if self._ser is not None:
            with contextlib.suppress(serial.SerialException, OSError):
                self._ser.close()
        self._ser = None
        self.state = state
        self._pending.clear()

    def _run(self) -> None:
        backoff = self.backoff_min_s
        while not self._stop.is_set():
            try:
                if self._ser is None:
                    if self._connect():
                        backoff = self.backoff_min_s
                    else:
                        self.stats.connect_failures += 1
                        self._stop.wait(backoff)
                        backoff = min(self.backoff_max_s, backoff * 2)
                    continue
                self._service()
            except Exception as exc:  # noqa: BLE001 - the link thread must never die
                self.last_error = f'internal error in the link thread: {exc!r}'
                with self._wlock:
                    self._close_locked('disconnected')
                self._stop.wait(backoff)

    def _emit(self, level: str, text: str) -> None:
        # Any exception: a logging failure must not stop the link.
        with contextlib.suppress(Exception):
            self._log(level, text)

    def _connect(self) -> bool:
        try:
            # exclusive (flock): one program drives the board; the rig check opens it the same way
            ser = serial.Serial(
                self.port, self.baud, timeout=0.005, write_timeout=0.1, exclusive=True
            )
        except (serial.SerialException, OSError, ValueError) as exc:
            self._set_error(
                'disconnected',
                f'cannot open {self.port}: {exc}. Check the cable, '
                'the port parameter and permissions (dialout group).',
            )
            return False
        self._decoder.reset()
        try:
            ser.reset_input_buffer()
            hello_seq = self._next_seq()
            ser.write(b'\x00' + P.encode(P.Hello(hello_seq)))  # leading 0x00 resynchronises
            info = None
            deadline = time.monotonic() + self.handshake_timeout_s
            while info is None and time.monotonic() < deadline and not self._stop.is_set():
                for item in self._decoder.feed(ser.read(256)):
                    if isinstance(item, P.Info) and item.seq == hello_seq:
                        info = item
        except (serial.SerialException, OSError) as exc:
            ser.close()
            self._set_error('disconnected', f'{self.port}: handshake I/O error: {exc}')
            return False
        if info is None:
            ser.close()
            self._set_error(
                'disconnected',
                f'{self.port} opened but the board did not answer '
                f'HELLO within {self.handshake_timeout_s:.2f} s; is it the DAC board '
                'running the equimus firmware?',
            )
            return False
        problem = self._check_info(info)
        if problem:
            ser.close()
            self._set_error('config_mismatch', problem)
            return False
        with self._wlock:
            self._ser = ser
            self.info = info
            self._pending.clear()
            self._lost_reason = None
            self._last_rx = self._last_tx = time.monotonic()
            self.state = 'connected'
            # Vent first: whatever the owner sends next, the first SET after (re)connecting is 0.
            self._write_set_locked((0,) * self.channels)
            self.generation += 1
            if self.generation > 1:
                self.stats.reconnects += 1
        self.last_error = ''
        self._emit(
            'info',
            f'DAC board connected on {self.port}: firmware '
            f'{".".join(map(str, info.firmware))}, {info.channels} channels, '
            f'{info.dac_bits}-bit DAC, watchdog {info.watchdog_ms} ms, '
            f'max code {info.max_code}',
        )
        return True

    def _check_info(self, info: P.Info) -> str:
        if info.protocol_version != P.PROTOCOL_VERSION:
            return (
                f'board speaks protocol v{info.protocol_version}, driver v'
                f'{P.PROTOCOL_VERSION}: flash the matching firmware'
            )
        if info.channels != self.channels:
            return f'board has {info.channels} channels, driver needs {self.channels}'
        if info.dac_bits != self.cal.dac_bits:
            return (
                f'board reports a {info.dac_bits}-bit DAC but dac_bits={self.cal.dac_bits}; '
                'fix config/valve.yaml'
            )
        if info.max_code < self.cal.max_code:
            self._emit(
                'warn',
                f'board max code {info.max_code} is below the driver max code '
                f'{self.cal.max_code}: high pressures will be refused by the board',
            )
        return ''

    def _set_error(self, state: str, text: str) -> None:
        if text != self.last_error:
            self._emit('error' if state == 'config_mismatch' else 'warn', text)
        self.last_error = text
        self.state = state

    def _service(self) -> None:
        ser = self._ser
        if ser is None:  # closed by vent_and_close since _run looked: nothing to read
            return
        try:
            data = ser.read(max(1, ser.in_waiting))
        except (serial.SerialException, OSError, TypeError, AttributeError) as exc:
            self._lost(f'read failed: {exc}')
            return
        now = time.monotonic()
        if data:
            self._last_rx = now
            for item in self._decoder.feed(data):
                self._handle(item, now)
        with self._wlock:
            for seq, t in list(self._pending.items()):
                if now - t > self.ack_timeout_s:
                    del self._pending[seq]
                    self.stats.ack_timeouts += 1
            lost = self._lost_reason
            stalled = self._last_tx > self._last_rx and now - self._last_rx > self.link_timeout_s
        if lost:
            self._lost(lost)
        elif stalled:
            self._lost(f'board stopped answering for {now - self._last_rx:.2f} s (stalled?)')

    def _handle(self, item, now: float) -> None:
        if isinstance(item, P.Rejected):
            self.stats.rx_rejected += 1
            return
        if isinstance(item, P.Ack):
            sent = self._pending.pop(item.seq, None)
            if sent is not None:
                self.stats.latencies_s.append(now - sent)
            self.stats.acks += 1
            if item.flags & P.ACK_WATCHDOG_VENTED:
                self.stats.board_watchdog_vents += 1
            if item.flags & P.ACK_BAD_FRAME_VENTED:
                self.stats.board_bad_frame_vents += 1
            self.board_codes = list(item.applied)
            if item.measured is not None and self.info is not None and self.info.adc_bits:
                self.measured_kpa = [
                    self.cal.adc_to_kpa(c, self.info.adc_bits) for c in item.measured
                ]
                self.measured_at = sent if sent is not None else now
                self.measured_count += 1
            with self._ack_event:
                self._last_ack_seq = item.seq
                self._ack_event.notify_all()
        elif isinstance(item, P.Nak):
            self._pending.pop(item.seq, None)
            self.stats.naks[P.REASON_NAMES.get(item.reason, str(item.reason))] += 1

    def _lost(self, why: str) -> None:
        with self._wlock:
            self._close_locked('disconnected')
        self.measured_kpa = None
        self._set_error(
            'disconnected', f'DAC board link lost on {self.port}: {why}; reconnecting with back-off'
        )
