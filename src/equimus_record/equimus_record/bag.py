"""rosbag2 bags in MCAP storage: crash-tolerant writing, repair and reading (no ROS imports).

Writing uses the `mcap` library (Foxglove's reference implementation) with the ros2 profile, the
message definitions of every type (so `ros2 bag info`, Foxglove and `rosbags` open the bag without
the message packages) and small chunks flushed on a timer: a recorder killed mid-run loses at most
the last flush period. `metadata.yaml` (rosbag2 format version 9) is written on open and on close.
A write error (a full disk) stops the writer; closing it then cuts the file back to its last
flush and ends it with a footer, so the bag is complete with every message that was durable,
or, when not even that can be written, leaves whole chunks for `repair()`.

A writer holds an exclusive `flock` on `recording.lock` in the bag directory (with its pid in it)
for as long as it writes; the kernel releases it when the writer dies, however it dies.

Readers never write. A complete bag is read through `rosbags`, an independent implementation, so
tests check real interop; a bag without a footer (being recorded, or its writer was killed) is
streamed read-only up to its last complete chunk and reported as unfinished. Only `repair()`
(`equimus bag repair`) rewrites a bag: in constant memory, never while its writer is alive, and
keeping the original file; it skips chunks that fail their checksum and says what it could not
save.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import yaml

STORAGE = 'mcap'
FORMAT_VERSION = 9
#: Held (flock) by the writer of a bag for as long as it writes; holds the writer's pid.
LOCK_NAME = 'recording.lock'
#: Space set aside while writing (freed at close) so that a full disk still leaves room to end
#: the bag: its footer and metadata.yaml (about 12 KB for the sim graph's 20 topics).
RESERVE_NAME = 'recording.reserve'
RESERVE_BYTES = 64 * 1024
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


class _File:
    """The MCAP file, unbuffered: each write reaches the kernel whole (a short write is
    continued) or raises, and `tell()` is the size written, also after a failure."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.pos = 0

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            self.pos += n
            view = view[n:]
        return len(data)

    def tell(self) -> int:
        return self.pos

    def flush(self) -> None:
        """Nothing is buffered here (`BagWriter.flush` syncs)."""

    def close(self) -> None:
        os.close(self.fd)


def _end_records() -> bytes:
    """DataEnd and a footer without a summary (readers scan the data section), then the magic."""
    from mcap.data_stream import RecordBuilder
    from mcap.records import DataEnd, Footer

    builder = RecordBuilder()
    DataEnd(0).write(builder)
    Footer(0, 0, 0).write(builder)
    return bytes(builder.end()) + MAGIC


@dataclass
class _Durable:
    """What the last flush made durable: the file's size then, and the messages before it."""

    offset: int
    counts: dict[str, int]
    start_ns: int | None
    end_ns: int


@dataclass
class BagWriter:
    """Write serialized (CDR) messages as they arrive; nothing is re-encoded.

    After a write error (`failed`), every write raises and `close()` keeps what the last flush
    made durable (`flushed_count` messages): see `close`."""

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
        try:
            _reserve(self.path / RESERVE_NAME, RESERVE_BYTES)
            self._file = _File(self.path / self.file_name)
        except OSError:
            (self.path / RESERVE_NAME).unlink(missing_ok=True)
            _release_lock(self.path, self._lock)
            raise
        # mcap writes through any object with write/tell/flush; _File is not an io class.
        sink = cast(IO[bytes], self._file)
        self._mcap = Writer(sink, chunk_size=self.chunk_size, compression=CompressionType.ZSTD)
        self._ts = _typestore()
        self._schemas: dict[str, int] = {}
        self._last_flush = time.monotonic()
        self.start_ns: int | None = None
        self.end_ns = 0
        self.flushed_count = 0
        self.closed = False
        #: The write error that stopped this writer ('' while it writes).
        self.failed = ''
        try:
            self._mcap.start(profile='ros2', library='equimus_record')
            self._durable = _Durable(self._file.tell(), {}, None, 0)
            self._write_metadata()
        except OSError:
            self._file.close()
            (self.path / RESERVE_NAME).unlink(missing_ok=True)
            _release_lock(self.path, self._lock)
            raise

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
        self._check_writable()
        try:
            self._mcap.add_message(
                t.channel_id,
                log_time=stamp_ns,
                data=bytes(data),
                publish_time=stamp_ns,
                sequence=t.count,
            )
        except OSError as exc:
            self._fail(exc)
            raise
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
        self._check_writable()
        self._flush()

    def _flush(self) -> None:
        try:
            self._mcap.flush()
            os.fsync(self._file.fd)
        except OSError as exc:
            self._fail(exc)
            raise
        self._last_flush = time.monotonic()
        self.flushed_count = self.count
        self._durable = _Durable(
            self._file.tell(),
            {t.name: t.count for t in self.topics.values()},
            self.start_ns,
            self.end_ns,
        )

    def _check_writable(self) -> None:
        if self.failed:
            raise OSError(f'the bag stopped at an earlier write error ({self.failed})')
        if self.closed:
            raise OSError(f'{self.path} is closed')

    def _fail(self, exc: OSError) -> None:
        self.failed = exc.strerror or str(exc)

    def close(self) -> None:
        """End the bag with its footer and metadata, and release its lock (always).

        After a write error: the space set aside at the start is freed, the file cut back to
        the last flush and ended with a footer; the bag then holds the `flushed_count` messages
        that were durable. Raises BagError, naming `equimus bag repair`, when not even that can
        be written (the file then ends after its last whole chunk)."""
        if self.closed:
            return
        self.closed = True
        try:
            (self.path / RESERVE_NAME).unlink(missing_ok=True)
            if not self.failed:
                try:
                    if self.count != self.flushed_count:
                        self._flush()  # all of it durable: what a failing summary keeps
                    self._mcap.finish()
                    os.fsync(self._file.fd)
                    self.flushed_count = self.count
                    self._write_metadata()
                    return
                except OSError as exc:
                    self._fail(exc)
            self._close_at_last_flush()
        finally:
            self._file.close()
            _release_lock(self.path, self._lock)

    def _close_at_last_flush(self) -> None:
        durable = self._durable
        self.flushed_count = sum(durable.counts.values())
        fd = self._file.fd
        try:
            os.ftruncate(fd, durable.offset)
            tail = _end_records()
            if os.pwrite(fd, tail, durable.offset) != len(tail):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.fsync(fd)
            entries = [
                (t.name, t.msgtype, t.qos, t.rihs01, durable.counts[t.name])
                for t in self.topics.values()
                if durable.counts.get(t.name)
            ]
            write_metadata(
                self.path, self.file_name, entries, durable.start_ns or 0, durable.end_ns
            )
        except OSError as exc:
            with contextlib.suppress(OSError):  # whole chunks only, what repair reads
                os.ftruncate(fd, durable.offset)
            (self.path / 'metadata.yaml.tmp').unlink(missing_ok=True)
            raise BagError(
                f'{self.path}: recording stopped ({self.failed}) and the bag could not be '
                f'closed ({exc.strerror or exc}); its {self.flushed_count} flushed messages are '
                f'in whole chunks: free disk space, then `equimus bag repair {self.path}`'
            ) from None

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


def _reserve(path: Path, size: int) -> None:
    """A file of `size` bytes whose blocks are allocated (not a sparse hole)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            os.write(fd, bytes(size))  # a file system without fallocate
    finally:
        os.close(fd)


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
    if not Path(bag).exists():
        raise BagError(f'{bag}: no such bag folder')
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


@dataclass
class _Losses:
    """What a scan of an MCAP file could not read."""

    chunks: int = 0  # chunks that failed their checksum or did not decode
    messages: dict[int, int] = field(default_factory=dict)  # channel id -> messages in them
    first_ns: int | None = None  # log-time span of those chunks
    last_ns: int = 0
    skipped_bytes: int = 0  # bytes between records that could not be read, skipped
    torn_tail: int = 0  # bytes of a record cut short at the end (a writer stopped mid-write)
    orphans: dict[int, int] = field(default_factory=dict)  # channel id -> messages, undefined

    @property
    def damaged(self) -> bool:
        return bool(self.chunks or self.skipped_bytes or self.orphans)


class _Scan:
    """Every record of an MCAP file in order, each chunk checked against its CRC; a chunk that
    fails is skipped (with its message count, from the message indexes after it) and the scan
    goes on. Bytes that are not a record are skipped up to the next chunk that checks out.
    Read through mmap: memory stays flat whatever the file's size."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.losses = _Losses()
        #: Schema and channel records of the summary (a closed bag repeats them there): the
        #: definitions of channels whose own chunk is lost.
        self.summary: list[Any] = []

    def records(self) -> Iterator[Any]:
        import mmap

        with open(self.path, 'rb') as fh:
            size = os.fstat(fh.fileno()).st_size
            if size <= len(MAGIC):
                return
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                self._read_summary(mm, size)
                yield from self._data(mm, size)

    def _data(self, mm: Any, size: int) -> Iterator[Any]:
        from mcap.opcode import Opcode

        pos = len(MAGIC)
        lost_chunk = False  # the message indexes that follow a lost chunk count its messages
        while pos < size:
            if pos + 9 > size:
                self.losses.torn_tail += size - pos
                return
            op = mm[pos]
            (length,) = struct.unpack_from('<Q', mm, pos + 1)
            end = pos + 9 + length
            if end > size or op not in _OPCODES:
                nxt = self._next_chunk(mm, pos + 1, size)
                if nxt is None and end > size and op in _OPCODES:
                    self.losses.torn_tail += size - pos  # cut by a crash: not a corruption
                    return
                stop = size if nxt is None else nxt
                self.losses.skipped_bytes += stop - pos
                pos = stop
                continue
            body = mm[pos + 9 : end]
            if op == Opcode.CHUNK:
                records = self._chunk(body)
                lost_chunk = records is None
                if records is not None:
                    yield from records
            elif op == Opcode.MESSAGE_INDEX:
                if lost_chunk:
                    self._count_lost(body)
            elif op in (Opcode.DATA_END, Opcode.FOOTER):
                return
            else:
                lost_chunk = False
                try:
                    record = _record(op, body)
                except Exception:  # noqa: BLE001 - an unreadable definition or message
                    self.losses.skipped_bytes += end - pos
                    record = None
                if record is not None:
                    yield record
            pos = end

    def _chunk(self, body: bytes) -> list[Any] | None:
        """The records of a chunk, or None when it fails its CRC or does not decode."""
        from mcap.records import Chunk
        from mcap.stream_reader import breakup_chunk

        chunk = None
        try:
            chunk = Chunk.read(_data_stream(body))
            return breakup_chunk(chunk, validate_crc=True)
        except Exception:  # noqa: BLE001 - any decoding failure: the chunk is lost
            self.losses.chunks += 1
            if chunk is not None and chunk.message_end_time >= chunk.message_start_time:
                first = self.losses.first_ns
                start = chunk.message_start_time
                self.losses.first_ns = start if first is None else min(first, start)
                self.losses.last_ns = max(self.losses.last_ns, chunk.message_end_time)
            return None

    def _count_lost(self, body: bytes) -> None:
        from mcap.records import MessageIndex

        try:
            index = MessageIndex.read(_data_stream(body))
        except Exception:  # noqa: BLE001 - an unreadable index: the count stays unknown
            return
        lost = self.losses.messages
        lost[index.channel_id] = lost.get(index.channel_id, 0) + len(index.records)

    def _next_chunk(self, mm: Any, start: int, size: int) -> int | None:
        """The offset of the next chunk record at or after `start` that checks out."""
        from mcap.opcode import Opcode

        probe = _Scan(self.path)
        pos = start
        while True:
            pos = mm.find(bytes([Opcode.CHUNK]), pos, size)
            if pos < 0 or pos + 9 > size:
                return None
            (length,) = struct.unpack_from('<Q', mm, pos + 1)
            if pos + 9 + length <= size and probe._chunk(mm[pos + 9 : pos + 9 + length]):
                return pos
            pos += 1

    def _read_summary(self, mm: Any, size: int) -> None:
        from mcap.opcode import Opcode
        from mcap.records import Footer

        if size < 8 + 37 or mm[size - 8 : size] != MAGIC:
            return
        try:
            footer = Footer.read(_data_stream(mm[size - 37 + 9 : size - 8]))
        except Exception:  # noqa: BLE001 - no usable summary: definitions from the chunks
            return
        pos = footer.summary_start
        while pos > 0 and pos + 9 <= size - 37:
            op = mm[pos]
            (length,) = struct.unpack_from('<Q', mm, pos + 1)
            end = pos + 9 + length
            if end > size - 37:
                return
            if op in (Opcode.SCHEMA, Opcode.CHANNEL):
                # an unreadable one: that definition from its chunk, if at all
                with contextlib.suppress(Exception):
                    self.summary.append(_record(op, mm[pos + 9 : end]))
            pos = end


def _data_stream(body: bytes) -> Any:
    import io

    from mcap.data_stream import ReadDataStream

    return ReadDataStream(io.BytesIO(body))


def _record(op: int, body: bytes) -> Any:
    """A schema, channel or message record outside chunks, None for other kinds (header,
    indexes, statistics...); raises when the record does not decode."""
    from mcap.opcode import Opcode
    from mcap.records import Channel, Message, Schema

    if op == Opcode.SCHEMA:
        return Schema.read(_data_stream(body))
    if op == Opcode.CHANNEL:
        return Channel.read(_data_stream(body))
    if op == Opcode.MESSAGE:
        return Message.read(_data_stream(body), len(body))
    return None


def _opcodes() -> frozenset[int]:
    from mcap.opcode import Opcode

    return frozenset(int(o) for o in Opcode)


_OPCODES = _opcodes()


def repair(bag: Path) -> str:
    """Rewrite a bag that its writer never closed, or with chunks that fail their checksum,
    keeping every chunk that checks out; the answer says what could not be saved.

    Streams record by record (constant memory), refuses while the writer is alive, writes the new
    file beside the old one and swaps it in atomically; the original stays as `*.mcap.broken`.
    A closed bag is read through first, and rewritten only if a chunk is damaged."""
    bag = Path(bag)
    src = _checked_mcap_file(bag)
    if is_complete(bag):
        check = _Scan(src)
        for _ in check.records():
            pass
        if not check.losses.damaged:
            return f'{bag}: complete, every chunk checks out: nothing to repair'
    try:
        lock = _hold_repair_lock(bag)
    except OSError as exc:  # a read-only file system or folder: nothing was written
        raise BagError(
            f'{bag}: cannot repair it where it is ({exc.strerror}); copy the bag folder to a '
            'writable place and repair the copy'
        ) from None
    tmp = src.with_name(src.name + '.repairing')
    try:
        (bag / RESERVE_NAME).unlink(missing_ok=True)  # a dead writer's: room for the repair
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
    scan = _Scan(src)
    ts = _typestore()
    schemas: dict[int, Schema] = {}
    known: dict[int, Channel] = {}
    sid: dict[int, int] = {}
    cid: dict[int, int] = {}
    counts: dict[int, int] = {}
    first, last = None, 0
    with open(tmp, 'wb') as fh:
        w = Writer(fh, compression=CompressionType.ZSTD)
        w.start(profile='ros2', library='equimus_record repair')
        for r in scan.records():
            if not known and scan.summary:  # the summary's definitions, before any message
                for d in scan.summary:
                    (schemas if isinstance(d, Schema) else known).setdefault(d.id, d)
            if isinstance(r, Schema):
                schemas.setdefault(r.id, r)
            elif isinstance(r, Channel):
                known.setdefault(r.id, r)
            elif isinstance(r, Message):
                c = r.channel_id
                if c not in cid:
                    ch = known.get(c)
                    if ch is None or ch.schema_id not in schemas:
                        scan.losses.orphans[c] = scan.losses.orphans.get(c, 0) + 1
                        continue
                    if ch.schema_id not in sid:
                        s = schemas[ch.schema_id]
                        sid[ch.schema_id] = w.register_schema(s.name, s.encoding, s.data)
                    cid[c] = w.register_channel(
                        ch.topic, ch.message_encoding, sid[ch.schema_id], ch.metadata
                    )
                w.add_message(
                    cid[c],
                    log_time=r.log_time,
                    data=r.data,
                    publish_time=r.publish_time,
                    sequence=r.sequence,
                )
                counts[c] = counts.get(c, 0) + 1
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
    for k in cid:
        ch = known[k]
        msgtype = schemas[ch.schema_id].name
        try:
            rihs = ts.hash_rihs01(msgtype)
        except Exception:
            rihs = ''
        qos = yaml.safe_load(ch.metadata.get('offered_qos_profiles', '') or '[]') or []
        topics.append((ch.topic, msgtype, qos, rihs, counts.get(k, 0)))
    write_metadata(bag, src.name, topics, first or 0, last)
    n = sum(counts.values())
    report = f'{bag}: recovered {n} messages on {len(topics)} topics (original kept as {kept.name})'
    lost = _describe_losses(scan.losses, known, first)
    return f'{report}; could not save {lost}' if lost else report


def _describe_losses(losses: _Losses, channels: dict[int, Any], t0: int | None) -> str:
    """What a repair could not save, in one line ('' when nothing)."""

    def topics(ids: dict[int, int]) -> str:
        names = sorted({channels[c].topic if c in channels else f'channel {c}' for c in ids})
        return ', '.join(names)

    parts = []
    if losses.chunks:
        n = sum(losses.messages.values())
        what = f'{n} messages' if n else 'its messages (no index tells how many)'
        if losses.messages:
            what += f' on {topics(losses.messages)}'
        if losses.first_ns is not None and t0 is not None:
            what += (
                f', {(losses.first_ns - t0) * 1e-9:.2f}-{(losses.last_ns - t0) * 1e-9:.2f} s '
                'after the first message kept'
            )
        chunks = f'{losses.chunks} chunk' + ('s' if losses.chunks > 1 else '')
        parts.append(f'{chunks} that failed the checksum ({what})')
    if losses.skipped_bytes:
        parts.append(f'{losses.skipped_bytes} bytes that were not a readable record')
    if losses.orphans:
        parts.append(
            f'{sum(losses.orphans.values())} messages on {topics(losses.orphans)} whose '
            'channel definition was in a lost chunk'
        )
    return '; '.join(parts)


def _hold_repair_lock(bag: Path) -> int:
    try:
        return _hold_lock(bag)
    except BagError:
        pid = _lock_pid(bag)
        raise BagError(
            f'{bag} is still being recorded (writer pid {pid}): stop the recorder first '
            '(Ctrl-C or SIGTERM closes the bag, and a closed bag needs no repair)'
        ) from None
