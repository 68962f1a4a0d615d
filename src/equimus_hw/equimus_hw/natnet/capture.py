"""Raw NatNet captures (no ROS): a Motive session's datagrams with their receive times.

``equimus natnet record`` writes one; ``equimus natnet replay`` serves it again through the
emulator, byte for byte, so a rig problem (a bad frame, a version quirk, dropped frames) can be
reproduced at a desk. File layout (little-endian): the 8-byte magic ``EQNATNT1``, then records of
``float64 t`` (s since the first datagram), ``uint8 channel`` (0 command socket, 1 multicast data
socket), ``uint32 length`` and the datagram itself.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from . import protocol as P
from .client import NatNetClient, NatNetConfig

MAGIC = b'EQNATNT1'
_REC = struct.Struct('<dBI')
COMMAND, DATA = 0, 1


class CaptureError(ValueError):
    """A capture file that cannot be read; the message names the file and the problem."""


@dataclass
class Datagram:
    t: float
    channel: int
    data: bytes

    @property
    def message_id(self) -> int:
        return int.from_bytes(self.data[:2], 'little') if len(self.data) >= 2 else -1


class CaptureWriter:
    """Appends datagrams; flushed on every write so a killed recorder keeps what it had."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._fh: BinaryIO = open(self.path, 'wb')  # noqa: SIM115 - closed by close()
        self._fh.write(MAGIC)
        self._t0: int | None = None
        self.count = 0
        self._lock = threading.Lock()

    def write(self, data: bytes, arrival_ns: int, channel: int) -> None:
        with self._lock:
            if self._t0 is None:
                self._t0 = arrival_ns
            self._fh.write(_REC.pack((arrival_ns - self._t0) / 1e9, channel, len(data)) + data)
            self._fh.flush()
            self.count += 1

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def read_capture(path: str | Path) -> list[Datagram]:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise CaptureError(f'{path}: cannot read ({e.strerror})') from None
    if raw[: len(MAGIC)] != MAGIC:
        raise CaptureError(f'{path}: not a NatNet capture (no {MAGIC.decode()} header)')
    out, pos = [], len(MAGIC)
    while pos < len(raw):
        if pos + _REC.size > len(raw):
            raise CaptureError(f'{path}: truncated record header at byte {pos}')
        t, ch, n = _REC.unpack_from(raw, pos)
        pos += _REC.size
        if pos + n > len(raw):
            raise CaptureError(f'{path}: record at byte {pos - _REC.size} is truncated')
        out.append(Datagram(t, ch, raw[pos : pos + n]))
        pos += n
    return out


def iter_frames(capture: list[Datagram]) -> Iterator[Datagram]:
    return (d for d in capture if d.message_id == P.MessageId.FRAMEOFDATA)


def first_of(capture: list[Datagram], message_id: int) -> bytes | None:
    return next((d.data for d in capture if d.message_id == message_id), None)


def summary(capture: list[Datagram]) -> dict[str, object]:
    """What a capture holds (for `equimus natnet record` output and tests)."""
    info_raw = first_of(capture, P.MessageId.SERVERINFO)
    info = P.decode_message(info_raw) if info_raw else None
    frames = list(iter_frames(capture))
    return {
        'datagrams': len(capture),
        'frames': len(frames),
        'duration_s': round(capture[-1].t - capture[0].t, 3) if capture else 0.0,
        'server': (
            f'{info.app_name} {P.version_text(info.app_version)}, NatNet '
            f'{P.version_text(info.natnet_version)}'
            if isinstance(info, P.ServerInfo)
            else 'no server info'
        ),
        'model_definitions': first_of(capture, P.MessageId.MODELDEF) is not None,
    }


def record(
    cfg: NatNetConfig, path: str | Path, duration: float, stop: threading.Event | None = None
) -> CaptureWriter:
    """Connect like the bridge and write every datagram from the server for ``duration`` s."""
    writer = CaptureWriter(path)
    # The server's own version (none requested); the raw sink keeps every datagram, so only the
    # default plausibility checks, not the workspace of `cfg`, judge the decoded frames.
    client = NatNetClient.from_config(cfg, bitstream_version='', plausibility=None)
    client.raw_sink = writer.write
    stop = stop or threading.Event()
    try:
        client.open()
        client.connect()
        end = time.monotonic() + duration
        while time.monotonic() < end and not stop.is_set():
            client.poll(0.05)
    except BaseException:
        writer.close()
        writer.path.unlink(missing_ok=True)  # no half-empty capture left behind
        raise
    finally:
        client.close()
    writer.close()
    return writer
