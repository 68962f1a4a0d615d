"""Replay what a host sent to a DAC board, on a millisecond clock the replay drives.

A session is the bytes a board received with their arrival times (`--session FILE` of the board
emulator, or `session_path=`): JSON lines `{"t": s, "boot": true}` then `{"t": s, "rx": hex}`.
`replay` feeds it, one millisecond per step, to a board in lock step: the Python emulator
(`EmulatorReplay`) or the host-built firmware (`FirmwareReplay`). Each step is one pass of the
firmware's loop at that millisecond: the bytes that arrived, then the watchdog, then the valves
over 1 ms, whose pressures are the ADC codes the next step reads. Nothing depends on the wall
clock, so two boards that implement docs/dac_board_protocol.md alike answer byte for byte alike.

    python -m equimus_hw.valve.replay SESSION --firmware build/firmware/dac_board_host
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pathlib
import sys
from collections.abc import Iterable
from typing import Any, Protocol

from equimus_description.valve import VALVE_TAU_S

from . import protocol as P
from .board_emulator import BoardEmulator
from .board_model import ValveModel
from .calibration import ValveCalibration
from .host_firmware import LockstepFirmware

STEP_S = 0.001


def replay_time(t_ms: int) -> float:
    """The board clock of step t_ms in seconds: the middle of that millisecond, so every
    whole-millisecond reading of it (the firmware's millis()) is exactly t_ms."""
    return (t_ms + 0.5) / 1000.0


@dataclasses.dataclass(frozen=True)
class Session:
    """Bytes received per millisecond since boot."""

    chunks: dict[int, bytes]

    @property
    def end_ms(self) -> int:
        return max(self.chunks, default=0)

    @classmethod
    def from_chunks(cls, chunks: Iterable[tuple[int, bytes]]) -> Session:
        merged: dict[int, bytes] = {}
        for t_ms, data in chunks:
            if t_ms < 0:
                raise ValueError(f'chunk at {t_ms} ms, before the boot')
            merged[t_ms] = merged.get(t_ms, b'') + bytes(data)
        return cls(merged)

    def save(self, path: str | os.PathLike[str]) -> None:
        with open(path, 'w') as f:
            f.write(json.dumps({'t': 0.0, 'boot': True}) + '\n')
            for t_ms in sorted(self.chunks):
                f.write(json.dumps({'t': t_ms / 1000.0, 'rx': self.chunks[t_ms].hex()}) + '\n')


def load_session(path: str | os.PathLike[str]) -> Session:
    """The first boot of a recorded session, its times in whole milliseconds since that boot."""
    t_boot: float | None = None
    chunks = []
    for n, line in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        entry = json.loads(line)
        if entry.get('boot'):
            if t_boot is not None:
                break  # a reboot: the state starts again, replay one boot at a time
            t_boot = float(entry['t'])
        elif 'rx' in entry:
            if t_boot is None:
                raise ValueError(f'{path}:{n}: bytes before the boot record')
            chunks.append((math.floor((float(entry['t']) - t_boot) * 1000.0), entry['rx']))
    if t_boot is None:
        raise ValueError(f'{path}: no boot record')
    return Session.from_chunks((t, bytes.fromhex(h)) for t, h in chunks)


class ReplayBoard(Protocol):
    def step(self, t_ms: int, rx: bytes) -> tuple[bytes, tuple[int, ...]]:
        """One loop pass at t_ms: the reply bytes and the DAC codes after it."""
        ...

    def close(self) -> None: ...


class _CollectingEmulator(BoardEmulator):
    """The emulator with its replies collected instead of written to its pty."""

    out = b''

    def _send(self, msg: Any) -> None:
        self.out += P.encode(msg)


class EmulatorReplay:
    """The Python board emulator on the replay's clock (no thread)."""

    def __init__(self, **kwargs: Any):
        self._now = replay_time(0)
        self.emu = _CollectingEmulator(link=None, clock=lambda: self._now, **kwargs)

    def step(self, t_ms: int, rx: bytes) -> tuple[bytes, tuple[int, ...]]:
        self._now = replay_time(t_ms)
        self.emu.out = b''
        self.emu.step(rx, self._now, STEP_S)
        return self.emu.out, tuple(self.emu.codes)

    def close(self) -> None:
        self.emu.close()


class FirmwareReplay:
    """The host-built firmware in lock step, with the emulator's valve model behind its DAC."""

    def __init__(
        self,
        binary: str | os.PathLike[str],
        calibration: ValveCalibration | None = None,
        tau_s: float = VALVE_TAU_S,
        dead_time_s: float = 0.0,
        channels: int = 2,
    ):
        self.cal = calibration or ValveCalibration()
        self.fw = LockstepFirmware(binary)
        self.valves = [ValveModel(self.cal, tau_s, dead_time_s) for _ in range(channels)]
        self.codes = (0,) * channels
        self._apply(self.fw.boot(0), replay_time(0))

    def _apply(self, events: list[tuple[str, float, list[str]]], now: float) -> bytes:
        reply = b''
        for name, _, fields in events:
            if name == 'dac':
                self.codes = tuple(int(c) for c in fields[: len(self.valves)])
                for v, c in zip(self.valves, self.codes, strict=True):
                    v.set_code(c, now)
            elif name == 'tx':
                reply += bytes.fromhex(fields[0])
        return reply

    def step(self, t_ms: int, rx: bytes) -> tuple[bytes, tuple[int, ...]]:
        now = replay_time(t_ms)
        self.fw.set_adc(tuple(self.cal.kpa_to_adc(v.pressure) for v in self.valves))
        reply = self._apply(self.fw.step(t_ms, rx), now)
        for v in self.valves:
            v.advance(now, STEP_S)
        return reply, self.codes

    def close(self) -> None:
        self.fw.close()


@dataclasses.dataclass(frozen=True)
class Pass:
    """A step in which the board answered or its DAC codes changed."""

    t_ms: int
    reply: bytes
    codes: tuple[int, ...]


def replay(board: ReplayBoard, session: Session, tail_ms: int = 300) -> list[Pass]:
    """Every millisecond from boot to tail_ms after the last chunk; the steps that did something."""
    out = []
    last: tuple[int, ...] | None = None
    for t_ms in range(session.end_ms + tail_ms + 1):
        reply, codes = board.step(t_ms, session.chunks.get(t_ms, b''))
        if reply or codes != last:
            out.append(Pass(t_ms, reply, codes))
        last = codes
    return out


def first_difference(a: list[Pass], b: list[Pass]) -> str | None:
    """Where two replays part, with both sides decoded; None if they are identical."""
    for x, y in zip(a, b, strict=False):
        if x != y:
            return (
                f'at {x.t_ms} ms / {y.t_ms} ms:\n'
                f'  A {x.codes} {P.FrameDecoder().feed(x.reply)} {x.reply.hex()}\n'
                f'  B {y.codes} {P.FrameDecoder().feed(y.reply)} {y.reply.hex()}'
            )
    if len(a) != len(b):
        return f'A has {len(a)} passes, B {len(b)}'
    return None


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog='python -m equimus_hw.valve.replay',
        description='Replay a recorded DAC board session to the board emulator and the '
        'host-built firmware; exit 1 if their replies differ.',
    )
    parser.add_argument('session', help='JSON lines recorded with --session')
    parser.add_argument('--firmware', required=True, help='the host firmware binary')
    parser.add_argument('--tail-ms', type=int, default=300)
    ns = parser.parse_args(args)
    try:
        session = load_session(ns.session)
    except (OSError, ValueError) as exc:
        print(f'replay: cannot read the session: {exc}', file=sys.stderr)
        return 2
    if not os.access(ns.firmware, os.X_OK):
        print(f'replay: {ns.firmware} is not an executable; build it first', file=sys.stderr)
        return 2
    boards: list[ReplayBoard] = [EmulatorReplay(), FirmwareReplay(ns.firmware)]
    try:
        emu, fw = (replay(b, session, ns.tail_ms) for b in boards)
    finally:
        for b in boards:
            b.close()
    diff = first_difference(emu, fw)
    n_bytes = sum(len(c) for c in session.chunks.values())
    if diff:
        print(f'replies differ (A = emulator, B = firmware) {diff}')
        return 1
    print(
        f'identical: {n_bytes} bytes in, {sum(len(p.reply) for p in emu)} bytes out, '
        f'{len(emu)} passes over {session.end_ms + ns.tail_ms + 1} ms'
    )
    return 0


if __name__ == '__main__':
    sys.exit(main())
