"""The DAC board firmware (firmware/dac_board/dac_board.ino) built for this computer and run as a
board: the code that will run on the board, executed here (firmware/host/README.md).

`build` compiles it with cmake and the system C++ compiler. `FirmwareBoard` runs it behind a
pseudo-terminal in real time, with the same inspection and fault interface as the Python board
emulator (`BoardEmulator`), so the valve driver's tests run against either. `LockstepFirmware`
runs it on a clock the caller sets, one loop pass per call, for byte-exact replays (replay.py).

The firmware knows nothing of valves: the valve behind each channel is the one valve model
(`ValveModel`, equimus_description's lag), stepped here from the DAC codes the firmware writes,
and its pressure goes back to the firmware as the ADC code it reads (`ValveCalibration.kpa_to_adc`),
through each channel's DAC chain error and read-back noise (`dac_gain`, `dac_offset_kpa`,
`adc_noise_kpa`, as the emulator takes them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import select
import shutil
import subprocess
import threading
import time
from collections import deque
from collections.abc import Sequence

from equimus_description.valve import VALVE_TAU_S, ValveParams

from . import protocol as P
from .board_model import BoardRecord, FrameRecord, valve_models
from .calibration import ValveCalibration

BINARY_NAME = 'dac_board_host'


class FirmwareBuildError(RuntimeError):
    """cmake or the compiler is missing, or the firmware does not compile."""


def source_dir() -> pathlib.Path | None:
    """firmware/host of the checkout this module lives in (a symlink install), else None."""
    here = pathlib.Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / 'firmware' / 'host' / 'CMakeLists.txt'
        if candidate.is_file():
            return candidate.parent
    return None


def build(
    build_dir: str | os.PathLike[str],
    source: str | os.PathLike[str] | None = None,
    watchdog_ms: int | None = None,
) -> pathlib.Path:
    """Configure and build the host firmware in build_dir (incremental); returns the binary.
    `watchdog_ms`: the board watchdog built in (None: the sketch's, the rig's 200 ms)."""
    cmake = shutil.which('cmake')
    if cmake is None:
        raise FirmwareBuildError(
            'cmake not found: install cmake and a C++ compiler (e.g. apt install cmake g++) '
            'to build the host firmware'
        )
    src = pathlib.Path(source) if source is not None else source_dir()
    if src is None or not (src / 'CMakeLists.txt').is_file():
        raise FirmwareBuildError(
            'firmware/host not found: pass the source folder (firmware/host of the checkout)'
        )
    out = pathlib.Path(build_dir)
    steps = (
        [
            cmake,
            '-S',
            str(src),
            '-B',
            str(out),
            '-DCMAKE_BUILD_TYPE=Release',
            f'-DDAC_BOARD_WATCHDOG_MS={watchdog_ms or ""}',
        ],
        [cmake, '--build', str(out), '--parallel', '2'],
    )
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = '\n'.join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise FirmwareBuildError(
                f'{" ".join(cmd[:2])} failed (is a C++ compiler installed?):\n{tail}'
            )
    binary = out / BINARY_NAME
    if not binary.is_file():
        raise FirmwareBuildError(f'the build did not produce {binary}')
    return binary


def _events(lines: list[str]) -> list[tuple[str, float, list[str]]]:
    out = []
    for line in lines:
        name, t, *rest = line.split()
        out.append((name, float(t), rest))
    return out


class LockstepFirmware:
    """The firmware on a clock the caller sets: boot at `boot(t_ms)`, then one loop() pass per
    `step(t_ms, rx)`, which returns the pass's events (name, t, fields)."""

    def __init__(self, binary: str | os.PathLike[str]):
        self.proc = subprocess.Popen(
            [str(binary), '--lockstep'],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._adc: tuple[int, ...] | None = None

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + '\n')
        self.proc.stdin.flush()

    def _reply(self) -> list[tuple[str, float, list[str]]]:
        assert self.proc.stdout is not None
        lines: list[str] = []
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f'host firmware exited (code {self.proc.poll()})')
            if line.strip() == 'end':
                return _events(lines)
            lines.append(line)

    def set_adc(self, codes: tuple[int, ...]) -> None:
        if codes != self._adc:
            self._send('adc ' + ' '.join(str(int(c)) for c in codes))
            self._adc = codes

    def boot(self, t_ms: int) -> list[tuple[str, float, list[str]]]:
        self._send(f'boot {int(t_ms)}')
        return self._reply()

    def step(self, t_ms: int, rx: bytes = b'') -> list[tuple[str, float, list[str]]]:
        self._send(f'step {int(t_ms)} {rx.hex() or "-"}')
        return self._reply()

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin:
                self.proc.stdin.close()
        try:
            self.proc.wait(2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()

    def __enter__(self) -> LockstepFirmware:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def firmware_info(binary: str | os.PathLike[str]) -> P.Info:
    """The firmware's own INFO (channels, watchdog, max code, ADC bits), asked in lock step."""
    with LockstepFirmware(binary) as fw:
        fw.boot(0)
        events = fw.step(0, P.encode(P.Hello(1)))
    tx = b''.join(bytes.fromhex(f[0]) for name, _, f in events if name == 'tx')
    replies = P.FrameDecoder().feed(tx)
    if len(replies) != 1 or not isinstance(replies[0], P.Info):
        raise RuntimeError(f'host firmware answered HELLO with {replies!r}')
    return replies[0]


@dataclasses.dataclass
class _Pending:
    """A frame the firmware received, waiting for its one reply."""

    t: float
    item: P.Message | P.Rejected


class FirmwareBoard(BoardRecord):
    """The host-built firmware on its own pseudo-terminal, as a `BoardEmulator` stand-in.

    The firmware process owns the pty (the driver opens its slave or `link`); this object is the
    world around the board: the valves behind its DAC, the ADC codes they give back, the wire
    faults, power (disappear = the process is killed, reappear = a fresh boot on a new pty), and
    a tap that turns the bytes the firmware received and sent into the emulator's records
    (`frames`, `rejections`, `watchdog_trips`, `invariant_violations`, the JSON-lines log).

    Each frame the firmware receives gets exactly one reply (docs/dac_board_protocol.md), so the
    n-th reply answers the n-th received frame: a SET is `accepted` if its reply is an ACK. A
    vent the firmware writes in a loop pass that sends no reply is its own: the watchdog.
    """

    def __init__(
        self,
        binary: str | os.PathLike[str],
        link: str | None = None,
        calibration: ValveCalibration | None = None,
        watchdog_ms: int | None = None,
        tau_s: float = VALVE_TAU_S,
        dead_time_s: float = 0.0,
        log_path: str | None = None,
        session_path: str | None = None,
        verbose: bool = False,
        seed: int | None = None,
        history: int = 20000,
        channels: int | None = None,
        valve: ValveParams | None = None,
        dac_gain: float | Sequence[float] | None = None,
        dac_offset_kpa: float | Sequence[float] | None = None,
        adc_noise_kpa: float | Sequence[float] | None = None,
    ):
        self.binary = str(binary)
        self.info = firmware_info(self.binary)
        for name, asked, built in (
            ('watchdog_ms', watchdog_ms, self.info.watchdog_ms),
            ('channels', channels, self.info.channels),
        ):
            if asked is not None and asked != built:
                raise ValueError(f'{name}={asked}: the firmware is built with {built}')
        self.cal = calibration or ValveCalibration()
        self.channels = self.info.channels
        self.watchdog_ms = self.info.watchdog_ms
        self.watchdog_s = self.watchdog_ms / 1000.0
        self.max_code = self.info.max_code
        self.adc = self.info.adc_bits > 0
        self.link = link
        self.verbose = verbose
        self.seed = seed
        # valve: the description's valve model; else a lag of tau_s with a dead time
        params = valve if valve is not None else ValveParams(tau_s, tau_s, dead_time_s)
        self.valves = valve_models(
            self.cal, params, self.channels, dac_gain, dac_offset_kpa, adc_noise_kpa, seed
        )
        self.codes = [0] * self.channels
        self._valves_at = time.monotonic()  # the time the valves have been stepped to
        # The most seconds a firmware event waited before this side applied it: the valves are
        # stepped in the firmware's time (a late DAC write still starts the valve when it was
        # made), but the ADC codes sent back for it are that late.
        self.tap_lag_max_s = 0.0
        # The ADC codes this side gave the firmware and the valves' time they stand for: a reply
        # carries the ones the firmware last read, as late as this thread was scheduled.
        self._adc_history: deque[tuple[float, tuple[int, ...]]] = deque(maxlen=256)
        self._start_record(history, log_path, session_path)
        self.slave_path = None
        self._lock = threading.RLock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reset_tap()
        self._power_on()

    # ----------------------------------------------------------------- power and faults
    def _reset_tap(self) -> None:
        self._rx_decoder = P.FrameDecoder(accept=P.HOST_TO_BOARD_TYPES)
        self._tx_decoder = P.FrameDecoder()
        self._pending: deque[_Pending] = deque()
        self._out = b''
        self._batch: list[tuple[str, float, list[str]]] = []
        self._adc_sent: tuple[int, ...] | None = None

    def _power_on(self) -> None:
        args = [self.binary, '--world']
        if self.link:
            args += ['--link', self.link]
        if self.seed is not None:
            args += ['--seed', str(self.seed)]
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        first = proc.stdout.readline().decode().split(maxsplit=1)
        if first[:1] != ['pty']:
            proc.kill()
            proc.wait()
            why = first[1].strip() if first[:1] == ['error'] else f'exit code {proc.returncode}'
            raise RuntimeError(f'the host firmware did not start: {why}')
        os.set_blocking(proc.stdout.fileno(), False)
        self._reset_tap()
        self._proc = proc
        self.slave_path = first[1]
        self.boots += 1
        self._session({'t': time.monotonic(), 'boot': True})

    def _power_off(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.kill()
        proc.wait()
        for f in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                if f:
                    f.close()
        self._remove_link()

    def _command(self, line: str) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        with contextlib.suppress(OSError, ValueError):
            proc.stdin.write((line + '\n').encode())
            proc.stdin.flush()

    @property
    def present(self) -> bool:
        return self._proc is not None

    def disappear(self) -> None:
        """Unplug: the board loses power (the process is killed, its pty closes)."""
        with self._lock:
            self._power_off()
            self._unpowered(time.monotonic())

    def reappear(self) -> None:
        """Plug back in: a fresh boot on a new pty, the link updated."""
        with self._lock:
            if self._proc is None:
                self._power_on()

    def stall(self, stalled: bool = True) -> None:
        """Hung firmware: input swallowed, loop() not run, outputs hold."""
        with self._lock:
            self._command(f'stall {int(stalled)}')

    def drop_next_bytes(self, n: int) -> None:
        with self._lock:
            self._command(f'drop {int(n)}')

    def corrupt_next_frames(self, n: int) -> None:
        with self._lock:
            self._command(f'corrupt {int(n)}')

    # ----------------------------------------------------------------- running
    def start(self) -> FirmwareBoard:
        self._thread = threading.Thread(target=self.run, name='host_firmware', daemon=True)
        self._thread.start()
        return self

    @property
    def pid(self) -> int | None:
        """The firmware process (None while unplugged)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        """The firmware process runs (it exits only when told to or when it crashes)."""
        return self._proc is not None and self._proc.poll() is None

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        with self._lock:
            proc = self._proc
            if proc is not None and proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()  # EOF: the firmware removes its link and exits
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(2.0)
            self._power_off()
        self._close_files()

    def __enter__(self) -> FirmwareBoard:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _advance_valves(self, t: float) -> None:
        """Step the valves to time t (CLOCK_MONOTONIC, the firmware's event clock too)."""
        if t > self._valves_at:
            for v in self.valves:
                v.advance(t, t - self._valves_at)
            self._valves_at = t

    def run(self) -> None:
        while not self._stop.is_set():
            proc = self._proc
            data: bytes | None = b''
            if proc is None or proc.stdout is None:
                time.sleep(0.005)
            else:
                fd = proc.stdout.fileno()
                with contextlib.suppress(OSError, ValueError):
                    ready, _, _ = select.select([fd], [], [], 0.002)
                    if ready:
                        data = os.read(fd, 65536) or None
            now = time.monotonic()
            with self._lock:
                if data is None and proc is not None and proc is self._proc:  # EOF: it ended
                    self._log({'event': 'firmware_exit', 't': now, 'code': proc.wait()})
                    self._power_off()
                elif data and proc is self._proc:
                    self._feed_events(data, now)
                self._advance_valves(now)
                if self.adc:
                    adc = tuple(self.cal.kpa_to_adc(v.measured()) for v in self.valves)
                    if adc != self._adc_sent:
                        self._command('adc ' + ' '.join(map(str, adc)))
                        self._adc_sent = adc
                        self._adc_history.append((now, adc))

    def adc_sent_until(self, t: float) -> list[tuple[float, tuple[int, ...]]]:
        """The ADC codes given to the firmware up to time t (CLOCK_MONOTONIC), oldest first, each
        with the time the valves were stepped to for it (the last 256)."""
        with self._lock:
            return [entry for entry in self._adc_history if entry[0] <= t]

    # ----------------------------------------------------------------- the tap
    def _feed_events(self, data: bytes, now: float) -> None:
        self._out += data
        *lines, self._out = self._out.split(b'\n')
        for raw in lines:
            line = raw.decode()
            if line == 'end':
                if self._batch:
                    self.tap_lag_max_s = max(self.tap_lag_max_s, now - self._batch[0][1])
                self._apply_batch(self._batch)
                self._batch = []
            elif line:
                name, t, *rest = line.split()
                self._batch.append((name, float(t), rest))

    def _apply_batch(self, batch: list[tuple[str, float, list[str]]]) -> None:
        """One firmware loop pass, in order: bytes in, DAC writes, bytes out."""
        for i, (name, t, fields) in enumerate(batch):
            if name == 'rx':
                data = bytes.fromhex(fields[0])
                self._session({'t': t, 'rx': data.hex()})
                for item in self._rx_decoder.feed(data):
                    self._pending.append(_Pending(t, item))
            elif name == 'dac':
                codes = [int(c) for c in fields[: self.channels]]
                replied_after = any(n == 'tx' for n, _, _ in batch[i + 1 :])
                if not any(codes) and any(self.codes) and not replied_after:
                    self.watchdog_trips += 1
                    self._log({'event': 'watchdog_vent', 't': t})
                self.codes = codes
                self._advance_valves(t)  # the valves held the old codes until the write
                for v, c in zip(self.valves, codes, strict=True):
                    v.set_code(c, t)
            elif name == 'tx':
                for reply in self._tx_decoder.feed(bytes.fromhex(fields[0])):
                    self._answer(reply, t)
            elif name == 'i2c':
                self._log({'event': 'i2c_error', 't': t, 'address': fields[0]})
            elif name == 'gap':  # the firmware process was not scheduled (as the emulator's)
                self._log({'event': 'loop_gap', 't': t, 'gap': float(fields[0])})

    def _answer(self, reply: P.Message | P.Rejected, t: float) -> None:
        request = self._pending.popleft() if self._pending else None
        if isinstance(reply, P.Nak):
            name = P.REASON_NAMES.get(reply.reason, str(reply.reason))
            self.rejections.append((t, reply.reason, name))
            self._log({'event': 'rejected', 't': t, 'reason': name, 'detail': reply.detail})
        if request is None or not isinstance(request.item, P.Set):
            return
        msg = request.item
        rec = FrameRecord(request.t, msg.seq, tuple(msg.codes), isinstance(reply, P.Ack))
        self.frames.append(rec)
        self.frames_total += 1
        self._log(
            {
                'event': 'set',
                't': rec.t,
                'seq': rec.seq,
                'codes': list(rec.codes),
                'accepted': rec.accepted,
            }
        )
        if self.verbose:
            print(f'{rec.t:.6f} SET seq={rec.seq} codes={list(rec.codes)}', flush=True)
        if any(c > self.max_code for c in rec.codes):
            self.invariant_violations.append(rec)
