"""rosbag2 bags in MCAP storage: crash-tolerant writing, repair and reading (no ROS imports).

Writing uses the `mcap` library (Foxglove's reference implementation) with the ros2 profile, the
message definitions of every type (so `ros2 bag info`, Foxglove and `rosbags` open the bag without
the message packages) and small chunks flushed on a timer: a recorder killed mid-run loses at most
the last flush period. `metadata.yaml` (rosbag2 format version 9) is written on open and on close.

A writer holds an exclusive `flock` on `recording.lock` in the bag directory (with its pid in it)
for as long as it writes; the kernel releases it when the writer dies, however it dies.

Readers never write. A complete bag is read through `rosbags`, an independent implementation, so
tests check real interop; a bag without a footer (being recorded, or its writer was killed) is
streamed read-only up to its last complete chunk and reported as unfinished. Only `repair()`
(`equimus bag repair`) rewrites a bag: in constant memory, never while its writer is alive, and
keeping the original file.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

STORAGE = 'mcap'
FORMAT_VERSION = 9
#: Held (flock) by the writer of a bag for as long as it writes; holds the writer's pid.
LOCK_NAME = 'recording.lock'
#: First and last 8 bytes of an MCAP file.
MAGIC = b'\x89MCAP0\r\n'
#: The original file that `repair()` rewrote, kept beside the repaired one.
ORIGINAL_SUFFIX = '.broken'


class BagError(RuntimeError):
    """A bag could not be written, read or repaired; the message says what to do."""


def _typestore():
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_KILTED)


@dataclass
class _Topic:
    name: str
    msgtype: str
    channel_id: int
    qos: list
    rihs01: str
    count: int = 0


@dataclass
class BagWriter:
    """Write serialized (CDR) messages as they arrive; nothing is re-encoded."""

    path: Path
    flush_period: float = 0.5
    chunk_size: int = 256 * 1024
    topics: dict[str, _Topic] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from mcap.writer import CompressionType, Writer

        self.path = Path(self.path)
        if self.path.exists():
            raise BagError(f'{self.path} exists already; choose a new bag path (bag:=...)')
        self.path.mkdir(parents=True)
        self._lock = _hold_lock(self.path)
        self.file_name = f'{self.path.name}_0.mcap'
        # open for the writer's lifetime (closed by close()), so no `with` block
        self._fh = open(self.path / self.file_name, 'wb')  # noqa: SIM115
        self._mcap = Writer(self._fh, chunk_size=self.chunk_size, compression=CompressionType.ZSTD)
        self._mcap.start(profile='ros2', library='equimus_record')
        self._ts = _typestore()
        self._schemas: dict[str, int] = {}
        self._last_flush = time.monotonic()
        self.start_ns: int | None = None
        self.end_ns = 0
        self.flushed_count = 0
        self.closed = False
        self._write_metadata()

    def add_topic(self, topic: str, msgtype: str, qos: list[dict] | None = None) -> None:
        """Register a topic; `qos` lists the publishers' profiles in rosbag2's v9 notation.

        Raises BagError for a type without a known definition.
        """
        qos = list(qos or [])
        if topic in self.topics:
            return
        if msgtype not in self._schemas:
            try:
                msgdef, _ = self._ts.generate_msgdef(msgtype, ros_version=2)
            except Exception as exc:
                raise BagError(
                    f'no message definition known for {msgtype}; topic {topic} not recorded'
                ) from exc
            self._schemas[msgtype] = self._mcap.register_schema(msgtype, 'ros2msg', msgdef.encode())
        rihs = self._ts.hash_rihs01(msgtype)
        cid = self._mcap.register_channel(
            topic,
            'cdr',
            self._schemas[msgtype],
            {'offered_qos_profiles': yaml.safe_dump(qos, sort_keys=False)},
        )
        self.topics[topic] = _Topic(topic, msgtype, cid, qos, rihs)

    def write(self, topic: str, stamp_ns: int, data: bytes) -> None:
        t = self.topics[topic]
        self._mcap.add_message(
            t.channel_id,
            log_time=stamp_ns,
            data=bytes(data),
            publish_time=stamp_ns,
            sequence=t.count,
        )
        t.count += 1
        self.start_ns = stamp_ns if self.start_ns is None else min(self.start_ns, stamp_ns)
        self.end_ns = max(self.end_ns, stamp_ns)
        self.flush_if_due()

    def flush_if_due(self) -> bool:
        """Flush if messages are pending and `flush_period` has passed since the last flush.

        Called on every write and by the owner's timer, so the tail of a stream that has gone
        quiet is on disk within one period too, not only when the next message arrives."""
        if (
            time.monotonic() - self._last_flush >= self.flush_period
            and self.count != self.flushed_count
        ):
            self.flush()
            return True
        return False

    @property
    def count(self) -> int:
        return sum(t.count for t in self.topics.values())

    def flush(self) -> None:
        """Close the pending chunk and push it to disk: everything written so far is durable."""
        self._mcap.flush()
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._last_flush = time.monotonic()
        self.flushed_count = self.count

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._mcap.finish()
        self._fh.close()
        self.flushed_count = self.count
        self._write_metadata()
        _release_lock(self.path, self._lock)

    def _write_metadata(self) -> None:
        entries = [(t.name, t.msgtype, t.qos, t.rihs01, t.count) for t in self.topics.values()]
        write_metadata(self.path, self.file_name, entries, self.start_ns or 0, self.end_ns)


def write_metadata(
    bag: Path,
    file_name: str,
    topics: list[tuple[str, str, list, str, int]],
    start_ns: int,
    end_ns: int,
) -> None:
    """rosbag2 metadata.yaml (format 9), written atomically."""
    count = sum(t[4] for t in topics)
    duration = max(0, end_ns - start_ns)
    info = {
        'version': FORMAT_VERSION,
        'storage_identifier': STORAGE,
        'duration': {'nanoseconds': duration},
        'starting_time': {'nanoseconds_since_epoch': start_ns},
        'message_count': count,
        'topics_with_message_count': [
            {
                'topic_metadata': {
                    'name': name,
                    'type': msgtype,
                    'serialization_format': 'cdr',
                    'offered_qos_profiles': qos,
                    'type_description_hash': rihs,
                },
                'message_count': n,
            }
            for name, msgtype, qos, rihs, n in topics
        ],
        'compression_format': '',
        'compression_mode': '',
        'relative_file_paths': [file_name],
        'files': [
            {
                'path': file_name,
                'starting_time': {'nanoseconds_since_epoch': start_ns},
                'duration': {'nanoseconds': duration},
                'message_count': count,
            }
        ],
        'custom_data': {},
        'ros_distro': 'kilted',
    }
    tmp = Path(bag) / 'metadata.yaml.tmp'
    tmp.write_text(yaml.safe_dump({'rosbag2_bagfile_information': info}, sort_keys=False))
    os.replace(tmp, Path(bag) / 'metadata.yaml')


def _hold_lock(bag: Path) -> int:
    """Take the bag's writer lock (exclusive flock, pid inside); returns its descriptor."""
    fd = os.open(Path(bag) / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        pid = _lock_pid(Path(bag))
        raise BagError(f'{bag} is being written by pid {pid}; stop that process first') from exc
    os.ftruncate(fd, 0)
    os.write(fd, f'{os.getpid()}\n'.encode())
    return fd


def _release_lock(bag: Path, fd: int) -> None:
    """Remove the lock file while still holding it, so no other process takes a stale copy."""
    try:
        (Path(bag) / LOCK_NAME).unlink(missing_ok=True)
    finally:
        os.close(fd)


def _lock_pid(bag: Path) -> int | None:
    try:
        return int((Path(bag) / LOCK_NAME).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def writer_pid(bag: Path) -> int | None:
    """The pid of the process writing `bag` now, or None if no live writer holds its lock.

    Read-only: the lock file is opened for reading and the shared lock released at once."""
    try:
        fd = os.open(Path(bag) / LOCK_NAME, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return _lock_pid(Path(bag)) or -1
        raise
    finally:
        os.close(fd)  # also drops the shared lock if it was taken
    return None


def _mcap_file(bag: Path) -> Path:
    files = sorted(Path(bag).glob('*.mcap'))
    if not files:
        raise BagError(f'{bag} holds no .mcap file: is it a bag directory recorded by equimus?')
    return files[0]


def _checked_mcap_file(bag: Path) -> Path:
    """The bag's MCAP file, refused with BagError if it does not start like one."""
    f = _mcap_file(bag)
    with open(f, 'rb') as fh:
        head = fh.read(8)
    if head != MAGIC[: len(head)]:  # shorter: a file just created, read as empty
        raise BagError(f'{bag}: {f.name} is not an MCAP file (it does not start with the magic)')
    return f


def is_complete(bag: Path) -> bool:
    """True when the MCAP file ends with its footer magic (the writer closed it)."""
    f = _mcap_file(Path(bag))
    with open(f, 'rb') as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() < 16:
            return False
        fh.seek(-8, os.SEEK_END)
        return fh.read(8) == MAGIC


@dataclass
class _Stream:
    """Records of an MCAP file read in order, stopping quietly at a truncated or torn tail."""

    path: Path
    truncated: bool = False
    error: str = ''

    def records(self) -> Iterator[Any]:
        from mcap.exceptions import McapError
        from mcap.stream_reader import StreamReader

        with open(self.path, 'rb') as fh:
            it = iter(StreamReader(fh, skip_magic=False, validate_crcs=True).records)
            while True:
                try:
                    record = next(it)
                except StopIteration:
                    return
                except (McapError, EOFError, ValueError, OSError, struct.error) as exc:
                    # A chunk still being written, or cut by a crash: everything before it is
                    # whole (each chunk carries its CRC), everything from it on is not read.
                    self.truncated = True
                    self.error = f'{type(exc).__name__}: {exc}'
                    return
                yield record


def raw_messages(bag: Path, topics: list[str] | None) -> Iterator[tuple[str, str, int, bytes]]:
    """(topic, type, log time ns, CDR bytes) in file order, read-only, in constant memory."""
    from mcap.records import Channel, Message, Schema

    bag = Path(bag)
    if (bag / 'metadata.yaml').exists() and is_complete(bag):
        from rosbags.highlevel import AnyReader

        try:
            with AnyReader([bag], default_typestore=_typestore()) as reader:
                conns = [c for c in reader.connections if topics is None or c.topic in topics]
                for conn, stamp, raw in reader.messages(connections=conns):
                    yield conn.topic, conn.msgtype, stamp, raw
        except Exception as exc:  # rosbags raises many types for a damaged bag: one for users
            first = str(exc).replace('\n', ' ').strip() or type(exc).__name__
            raise BagError(f'{bag}: not a readable rosbag2 bag ({first})') from None
        return
    f = _checked_mcap_file(bag)
    schemas: dict[int, str] = {}
    channels: dict[int, tuple[str, str]] = {}
    for record in _Stream(f).records():
        if isinstance(record, Schema):
            schemas[record.id] = record.name
        elif isinstance(record, Channel):
            channels[record.id] = (record.topic, schemas.get(record.schema_id, ''))
        elif isinstance(record, Message) and record.channel_id in channels:
            topic, msgtype = channels[record.channel_id]
            if topics is None or topic in topics:
                yield topic, msgtype, record.log_time, record.data


def pressures(msg: Any) -> list[float]:
    """The pressures (kPa) of a /valve/applied or /valve/pressure message: the stamped
    sensor_msgs/JointState's `effort`, or the `data` of the Float64MultiArray that bags recorded
    before the pressures were stamped hold."""
    values = getattr(msg, 'effort', None)
    return [float(v) for v in (msg.data if values is None else values)]


def read_messages(
    bag: Path, topics: list[str] | None = None
) -> Iterator[tuple[str, int, Any]]:  # Any: a message of whichever type the topic has
    """Yield (topic, log time ns, deserialized message); never writes to the bag.

    An unfinished bag yields what was complete on disk when each chunk was reached."""
    ts = _typestore()
    for topic, msgtype, stamp, raw in raw_messages(bag, topics):
        try:
            msg = ts.deserialize_cdr(raw, msgtype)
        except Exception as exc:
            raise BagError(f'{bag}: cannot decode a {msgtype} message on {topic}: {exc}') from exc
        yield topic, stamp, msg


def topic_counts(bag: Path) -> dict[str, tuple[str, int, float]]:
    """topic -> (type, message count, mean rate in Hz between that topic's first and last
    message).

    Each topic's own span, not the bag's: topics are discovered (and so recorded) at different
    times.
    """
    spans: dict[str, list] = {}
    for topic, msgtype, stamp, _ in raw_messages(Path(bag), None):
        span = spans.setdefault(topic, [stamp, stamp, 0, msgtype])
        span[0], span[1], span[2] = min(span[0], stamp), max(span[1], stamp), span[2] + 1
    out = {}
    for topic, (first, last, n, msgtype) in spans.items():
        rate = (n - 1) / ((last - first) * 1e-9) if n > 1 and last > first else 0.0
        out[topic] = (msgtype, n, rate)
    return out


def status(bag: Path) -> str:
    """'' for a complete bag; otherwise one line saying why it is unfinished and what to do."""
    bag = Path(bag)
    if is_complete(bag):
        return ''
    pid = writer_pid(bag)
    if pid is not None:
        return (
            f'unfinished: still being recorded (writer pid {pid}); counts are what is on disk '
            'so far'
        )
    return (
        'unfinished: its writer stopped without closing it; counts are the complete chunks. '
        f'`equimus bag repair {bag}` makes it a closed bag (the original file is kept)'
    )


def describe(bag: Path) -> str:
    bag = Path(bag)
    rows = topic_counts(bag)
    lines = [f'{bag}: {sum(r[1] for r in rows.values())} messages']
    state = status(bag)
    if state:
        lines.append(f'  {state}')
    for topic, (msgtype, n, hz) in sorted(rows.items()):
        lines.append(f'  {topic:28s} {msgtype:40s} {n:8d} msgs {hz:8.1f} Hz')
    return '\n'.join(lines)


def repair(bag: Path) -> str:
    """Rewrite a bag whose writer never closed it, keeping every complete chunk.

    Streams record by record (constant memory), refuses while the writer is alive, writes the new
    file beside the old one and swaps it in atomically; the original stays as `*.mcap.broken`."""
    bag = Path(bag)
    src = _checked_mcap_file(bag)
    if is_complete(bag):
        return f'{bag}: complete, nothing to repair'
    try:
        lock = _hold_repair_lock(bag)
    except OSError as exc:  # a read-only file system or folder: nothing was written
        raise BagError(
            f'{bag}: cannot repair it where it is ({exc.strerror}); copy the bag folder to a '
            'writable place and repair the copy'
        ) from None
    tmp = src.with_name(src.name + '.repairing')
    try:
        return _repair_locked(bag, src, tmp)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise BagError(f'{bag}: repair failed ({exc}); the original file is kept') from None
    finally:
        _release_lock(bag, lock)


def _repair_locked(bag: Path, src: Path, tmp: Path) -> str:
    from mcap.records import Channel, Message, Schema
    from mcap.writer import CompressionType, Writer

    kept = src.with_name(src.name + ORIGINAL_SUFFIX)
    if kept.exists():
        raise BagError(f'{kept} exists already; move it away before repairing {bag} again')
    stream = _Stream(src)
    ts = _typestore()
    sid: dict[int, int] = {}
    schema_names: dict[int, str] = {}
    cid: dict[int, int] = {}
    channels: dict[int, Channel] = {}
    counts: dict[int, int] = {}
    first, last = None, 0
    with open(tmp, 'wb') as fh:
        w = Writer(fh, compression=CompressionType.ZSTD)
        w.start(profile='ros2', library='equimus_record repair')
        for r in stream.records():
            if isinstance(r, Schema) and r.id not in sid:
                sid[r.id] = w.register_schema(r.name, r.encoding, r.data)
                schema_names[r.id] = r.name
            elif isinstance(r, Channel) and r.id not in cid and r.schema_id in sid:
                cid[r.id] = w.register_channel(
                    r.topic, r.message_encoding, sid[r.schema_id], r.metadata
                )
                channels[r.id] = r
            elif isinstance(r, Message) and r.channel_id in cid:
                w.add_message(
                    cid[r.channel_id],
                    log_time=r.log_time,
                    data=r.data,
                    publish_time=r.publish_time,
                    sequence=r.sequence,
                )
                counts[r.channel_id] = counts.get(r.channel_id, 0) + 1
                first = r.log_time if first is None else min(first, r.log_time)
                last = max(last, r.log_time)
        w.finish()
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(src, kept)  # the original stays, under its new name, before the swap
    except OSError:  # a file system without hard links: copy it
        shutil.copy2(src, kept)
    os.replace(tmp, src)
    topics = []
    for k, c in channels.items():
        msgtype = schema_names[c.schema_id]
        try:
            rihs = ts.hash_rihs01(msgtype)
        except Exception:
            rihs = ''
        qos = yaml.safe_load(c.metadata.get('offered_qos_profiles', '') or '[]') or []
        topics.append((c.topic, msgtype, qos, rihs, counts.get(k, 0)))
    write_metadata(bag, src.name, topics, first or 0, last)
    n = sum(counts.values())
    return f'{bag}: recovered {n} messages on {len(topics)} topics (original kept as {kept.name})'


def _hold_repair_lock(bag: Path) -> int:
    try:
        return _hold_lock(bag)
    except BagError:
        pid = _lock_pid(bag)
        raise BagError(
            f'{bag} is still being recorded (writer pid {pid}): stop the recorder first '
            '(Ctrl-C or SIGTERM closes the bag, and a closed bag needs no repair)'
        ) from None
