"""rosbag2 bags in MCAP storage: crash-tolerant writing, repair and reading (no ROS imports).

Writing uses the `mcap` library (Foxglove's reference implementation) with the ros2 profile, the
message definitions of every type (so `ros2 bag info`, Foxglove and `rosbags` open the bag without
the message packages) and small chunks flushed on a timer: a recorder killed mid-run loses at most
the last flush period. `metadata.yaml` (rosbag2 format version 9) is written on open and on close;
`repair()` rebuilds both the MCAP summary and the metadata of a bag whose writer never closed.
Reading goes through `rosbags`, an independent implementation, so tests check real interop.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

STORAGE = 'mcap'
FORMAT_VERSION = 9


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


def _mcap_file(bag: Path) -> Path:
    files = sorted(Path(bag).glob('*.mcap'))
    if not files:
        raise BagError(f'{bag} holds no .mcap file: is it a bag directory recorded by equimus?')
    return files[0]


def is_complete(bag: Path) -> bool:
    """True when the MCAP file ends with its footer magic (the writer closed it)."""
    f = _mcap_file(Path(bag))
    with open(f, 'rb') as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() < 16:
            return False
        fh.seek(-8, os.SEEK_END)
        return fh.read(8) == b'\x89MCAP0\r\n'


def repair(bag: Path) -> str:
    """Rewrite a bag cut short by a crash, keeping every complete chunk; returns a summary."""
    from mcap.exceptions import McapError
    from mcap.records import Channel, Message, Schema
    from mcap.stream_reader import StreamReader
    from mcap.writer import CompressionType, Writer

    bag = Path(bag)
    src = _mcap_file(bag)
    if is_complete(bag):
        return f'{bag}: complete, nothing to repair'
    schemas: dict[int, Schema] = {}
    channels: dict[int, Channel] = {}
    messages: list[Message] = []
    with open(src, 'rb') as fh:
        try:
            for record in StreamReader(fh, skip_magic=False).records:
                if isinstance(record, Schema):
                    schemas[record.id] = record
                elif isinstance(record, Channel):
                    channels[record.id] = record
                elif isinstance(record, Message):
                    messages.append(record)
        except (McapError, EOFError, ValueError, OSError):
            pass  # the truncated tail: keep what was complete before it
    broken = src.with_suffix('.mcap.broken')
    os.replace(src, broken)
    ts = _typestore()
    counts: dict[int, int] = {}
    with open(src, 'wb') as fh:
        w = Writer(fh, compression=CompressionType.ZSTD)
        w.start(profile='ros2', library='equimus_record repair')
        sid = {k: w.register_schema(s.name, s.encoding, s.data) for k, s in schemas.items()}
        cid = {
            k: w.register_channel(c.topic, c.message_encoding, sid[c.schema_id], c.metadata)
            for k, c in channels.items()
            if c.schema_id in sid
        }
        for m in messages:
            if m.channel_id in cid:
                w.add_message(
                    cid[m.channel_id],
                    log_time=m.log_time,
                    data=m.data,
                    publish_time=m.publish_time,
                    sequence=m.sequence,
                )
                counts[m.channel_id] = counts.get(m.channel_id, 0) + 1
        w.finish()
    topics = []
    for k, c in channels.items():
        if k not in cid:
            continue
        msgtype = schemas[c.schema_id].name
        try:
            rihs = ts.hash_rihs01(msgtype)
        except Exception:
            rihs = ''
        qos = yaml.safe_load(c.metadata.get('offered_qos_profiles', '') or '[]') or []
        topics.append((c.topic, msgtype, qos, rihs, counts.get(k, 0)))
    stamps = [m.log_time for m in messages if m.channel_id in cid]
    write_metadata(bag, src.name, topics, min(stamps, default=0), max(stamps, default=0))
    return (
        f'{bag}: recovered {len(stamps)} messages on {len(topics)} topics '
        f'(original kept as {broken.name})'
    )


def read_messages(
    bag: Path, topics: list[str] | None = None
) -> Iterator[tuple[str, int, Any]]:  # Any: a message of whichever type the topic has
    """Yield (topic, log time ns, deserialized message) with `rosbags`; repair first if needed."""
    from rosbags.highlevel import AnyReader

    bag = Path(bag)
    if not (bag / 'metadata.yaml').exists() or not is_complete(bag):
        repair(bag)
    with AnyReader([bag], default_typestore=_typestore()) as reader:
        conns = [c for c in reader.connections if topics is None or c.topic in topics]
        for conn, stamp, raw in reader.messages(connections=conns):
            yield conn.topic, stamp, reader.deserialize(raw, conn.msgtype)


def topic_counts(bag: Path) -> dict[str, tuple[str, int, float]]:
    """topic -> (type, message count, mean rate in Hz between that topic's first and last
    message).

    Each topic's own span, not the bag's: topics are discovered (and so recorded) at different
    times.
    """
    from rosbags.highlevel import AnyReader

    bag = Path(bag)
    if not (bag / 'metadata.yaml').exists() or not is_complete(bag):
        repair(bag)
    spans: dict[str, list[int]] = {}
    with AnyReader([bag], default_typestore=_typestore()) as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
        for conn, stamp, _ in reader.messages():
            span = spans.setdefault(conn.topic, [stamp, stamp, 0])
            span[0], span[1], span[2] = min(span[0], stamp), max(span[1], stamp), span[2] + 1
    out = {}
    for topic, (first, last, n) in spans.items():
        rate = (n - 1) / ((last - first) * 1e-9) if n > 1 and last > first else 0.0
        out[topic] = (types[topic], n, rate)
    return out


def describe(bag: Path) -> str:
    rows = topic_counts(bag)
    lines = [f'{bag}: {sum(r[1] for r in rows.values())} messages']
    for topic, (msgtype, n, hz) in sorted(rows.items()):
        lines.append(f'  {topic:28s} {msgtype:40s} {n:8d} msgs {hz:8.1f} Hz')
    return '\n'.join(lines)
