"""A bag writer in a child process, for the recorder of the composed sim graph (no ROS).

`BagWriterProcess` has `equimus_record.bag.BagWriter`'s interface and runs a BagWriter in a
child process. Why: the mcap library spends a few dozen Python calls on each message, about 40 %
of a composed lockstep frame with recording on (docs/benchmarks.md, issue 13). In the child that
work runs beside the simulation, on another core when there is one, and the graph pays one pipe
write per batch of messages.

The child also trims what rclpy's `serialize_message` adds: it returns the message's estimated
size, which for a message ending in an empty sequence (JointState's `effort`) has alignment bytes
after the last field that strict readers (rosbags) refuse. A message from DDS ends at its last
field; the exact size is found with rosbags once per topic and length and then cached.

The child runs in its own session and ignores SIGINT: the parent closes the bag in order; if the
parent dies, the closed socket makes the child close the bag itself. The child reports each flush
('flushed', messages durable) and a write error ('failed', (why, messages durable)) on its own,
so the parent's `flushed_count` is what is on disk, as BagWriter's.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import socket
import subprocess
import sys
import threading
import time
from itertools import repeat
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from equimus_record.bag import BagError

BATCH_MESSAGES = 400  # messages per pipe write
BATCH_WALL_S = 0.1  # at most this long (wall s) in the parent's batch when writes go quiet
REPLY_TIMEOUT_S = 60.0  # start-up (imports, typestore) on a loaded machine included


def _locked(method):
    """One user of the socket at a time: the graph's frames write while the recorder's timers
    flush."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return call


class BagWriterProcess:
    """BagWriter's interface (add_topic, write, flush_if_due, flush, close, count, ...)."""

    def __init__(self, path: Path | str, flush_period: float = 0.5) -> None:
        self.path = Path(path)
        self.flush_period = flush_period
        # A fresh interpreter (never fork a process with DDS threads), in its own session so a
        # Ctrl-C to the terminal's process group reaches the parent only.
        parent, child = socket.socketpair()
        self._proc = subprocess.Popen(
            [
                sys.executable,
                '-m',
                'equimus_bringup.bag_process',
                str(child.fileno()),
                str(self.path),
                repr(flush_period),
            ],
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        child.close()
        self._conn = Connection(parent.detach())
        self.topics: dict[str, int] = {}
        self._count = 0  # messages written
        #: what the next pipe write carries, in order: (topic index, log time, data) from
        #: `write`, (log time, entries) from `write_logged`; `_batched` messages in all
        self._batch: list[tuple[int, int, bytes] | tuple[int, list]] = []
        self._batched = 0
        self._last_send = time.monotonic()
        self.flushed_count = 0
        self.closed = False
        #: The child's write error ('' while it writes), as BagWriter.failed.
        self.failed = ''
        self._lock = threading.RLock()
        self._reply()  # BagError if the bag cannot be created

    def _report(self, kind: str, value: Any) -> bool:
        """Take a report the child sends on its own; False for anything else (a reply)."""
        if kind == 'flushed':
            self.flushed_count = value
            return True
        if kind == 'failed':
            self.failed, self.flushed_count = value
            return True
        return False

    def _reply(self) -> Any:
        while True:
            if not self._conn.poll(REPLY_TIMEOUT_S):
                raise BagError(
                    f'the bag writer process did not answer within {REPLY_TIMEOUT_S:g} s'
                )
            try:
                kind, value = self._conn.recv()
            except (EOFError, OSError):
                raise BagError('the bag writer process has stopped') from None
            if self._report(kind, value):
                continue
            if kind == 'error':
                raise BagError(value)
            return value

    def _send(self, item: tuple) -> None:
        try:
            self._conn.send(item)
        except OSError as exc:
            raise OSError(f'the bag writer process has stopped ({exc})') from exc

    @_locked
    def add_topic(
        self,
        topic: str,
        msgtype: str,
        qos: list[dict] | None = None,
        sample: bytes | None = None,
    ) -> int | None:
        """As BagWriter.add_topic. `sample`, one serialised message of the type: the child
        prepares its reader of the type with it before it answers (rosbags builds one on a
        type's first message, 1-8 ms each; met in the first frames, those builds held the
        frames up at the full pipe, 74 ms in one run: docs/benchmarks.md, issue 30); returns the
        sample's size on the wire, found with that reader (None without a sample)."""
        if topic in self.topics:
            return None
        self._send_batch()
        self._send(('topic', (topic, msgtype, list(qos or []), sample)))
        size: int | None = self._reply()
        self.topics[topic] = len(self.topics)
        return size

    @_locked
    def write(self, topic: str, stamp_ns: int, data: bytes) -> None:
        self._batch.append((self.topics[topic], stamp_ns, bytes(data)))
        self._count += 1
        self._batched += 1
        if self._batched >= BATCH_MESSAGES:
            self._send_batch()

    @_locked
    def write_logged(self, entries: list[int | tuple[str, bytes]], stamp_ns: int) -> int:
        """`write` for messages grouped by log time, as sim_graph keeps them: an int entry is
        the log time (ns) of the (topic, data) entries after it, `stamp_ns` that of those
        before the first; returns the log time of the last. The entries go to the child as
        they are, which matches them to topics and times: that loop, about 40 interpreted
        operations a message, runs beside the graph's frames, not in them (docs/benchmarks.md,
        issue 30). The list is kept until it is sent: not to be changed after the call. A topic
        never added fails there, as `write` fails here."""
        if not entries:
            return stamp_ns
        self._batch.append((stamp_ns, entries))
        messages = len(entries) - sum(map(isinstance, entries, repeat(int)))
        self._count += messages
        self._batched += messages
        for entry in reversed(entries):
            if entry.__class__ is int:
                stamp_ns = entry
                break
        if self._batched >= BATCH_MESSAGES:
            self._send_batch()
        return stamp_ns

    def _send_batch(self) -> None:
        if self.failed:
            raise OSError(self.failed)
        if self._batch:
            self._send(('write', self._batch))
            self._batch = []
            self._batched = 0
        self._last_send = time.monotonic()
        while self._conn.poll():  # the child's flushes and a write error, reported on their own
            try:
                kind, value = self._conn.recv()
            except (EOFError, OSError) as exc:
                raise OSError(f'the bag writer process has stopped ({exc})') from exc
            self._report(kind, value)
        if self.failed:
            raise OSError(self.failed)

    @_locked
    def flush_if_due(self) -> bool:
        """Hand the pending batch over once it is BATCH_WALL_S old (the child flushes to disk
        every flush_period itself), and take the child's reports."""
        if time.monotonic() - self._last_send >= BATCH_WALL_S:
            sent = bool(self._batch)
            self._send_batch()
            return sent
        return False

    @property
    def count(self) -> int:
        return self._count

    @_locked
    def flush(self) -> None:
        """Everything written so far is on disk when this returns."""
        self._send_batch()
        self._send(('flush', None))
        self.flushed_count = self._reply()

    @_locked
    def close(self) -> None:
        """As BagWriter.close: raises BagError (naming `equimus bag repair`) when the bag could
        not be ended."""
        if self.closed:
            return
        self.closed = True
        try:
            if not self.failed:
                with contextlib.suppress(OSError):  # the child has the error: its close says
                    self._send_batch()
            self._send(('close', None))
            self.flushed_count = self._reply()
        except OSError as exc:
            raise BagError(
                f'{self.path}: the bag writer process has stopped ({exc}); '
                f'`equimus bag repair {self.path}` closes the bag'
            ) from None
        finally:
            self._conn.close()
            try:
                self._proc.wait(timeout=REPLY_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()


def exact_size(typestore: Any, data: bytes, msgtype: str) -> int:
    """Length of the CDR message in `data` without trailing alignment bytes."""
    for cut in range(min(8, len(data) - 4)):
        try:
            msg = typestore.deserialize_cdr(data[: len(data) - cut], msgtype)
        except Exception:  # rosbags refuses the size: try a shorter one
            continue
        return len(typestore.serialize_cdr(msg, msgtype))
    return len(data)


def _write(
    writer: Any,
    typestore: Any,
    names: list[str],
    types: list[str],
    sizes: dict[tuple[int, int], int],
    i: int,
    stamp: int,
    data: bytes,
) -> None:
    """One message of topic `i` to the bag, trimmed to its exact size (cached per length)."""
    key = (i, len(data))
    size = sizes.get(key)
    if size is None:
        size = sizes[key] = exact_size(typestore, data, types[i])
    writer.write(names[i], stamp, data[:size])


def _write_batch(
    writer: Any,
    typestore: Any,
    names: list[str],
    types: list[str],
    index: dict[str, int],
    sizes: dict[tuple[int, int], int],
    batch: list,
) -> str:
    """A pipe write's messages to the bag, in order; '' or, at a message on a topic never
    added, why the batch stopped there."""
    for item in batch:
        if len(item) == 3:
            i, stamp, data = item
            _write(writer, typestore, names, types, sizes, i, stamp, data)
            continue
        stamp, entries = item  # write_logged's
        for entry in entries:
            if entry.__class__ is int:
                stamp = entry
                continue
            topic, data = entry
            i = index.get(topic, -1)
            if i < 0:
                return f'a message on {topic}, a topic never added to the bag'
            _write(writer, typestore, names, types, sizes, i, stamp, data)
    return ''


def _child(conn: Any, path: str, flush_period: float) -> None:
    """The writer: one BagWriter fed from `conn` until 'close' or the parent's end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from rosbags.typesys import Stores, get_typestore

    from equimus_record.bag import BagWriter

    try:
        writer = BagWriter(Path(path), flush_period=flush_period)
    except (BagError, OSError) as exc:
        conn.send(('error', str(exc)))
        return
    typestore = get_typestore(Stores.ROS2_KILTED)
    names: list[str] = []
    types: list[str] = []
    index: dict[str, int] = {}
    sizes: dict[tuple[int, int], int] = {}
    conn.send(('ok', None))
    reported = 0  # the durable count the parent was last told
    refused = ''  # a message on a topic never added: recording stops there, as at a write error
    failed_sent = False
    kind: str
    value: Any
    try:
        while True:
            try:
                kind, value = conn.recv() if conn.poll(flush_period) else ('', None)
            except EOFError:
                return  # the parent is gone: close the bag below
            try:
                if kind == '':
                    if not writer.failed:
                        writer.flush_if_due()  # the graph is paused or quiet: the tail to disk
                elif kind == 'write':
                    if not (writer.failed or refused):
                        refused = _write_batch(writer, typestore, names, types, index, sizes, value)
                elif kind == 'topic':
                    topic, msgtype, qos, sample = value
                    writer.add_topic(topic, msgtype, qos)
                    index[topic] = len(names)
                    names.append(topic)
                    types.append(msgtype)
                    size = None
                    if sample is not None:  # the type's reader built now, not in a frame
                        size = sizes[len(names) - 1, len(sample)] = exact_size(
                            typestore, sample, msgtype
                        )
                    conn.send(('ok', size))
                elif kind == 'flush':
                    writer.flush()
                    conn.send(('ok', writer.flushed_count))
                elif kind == 'close':
                    writer.close()
                    conn.send(('ok', writer.flushed_count))
                    return
            except OSError as exc:  # a write error: writer.failed says it, once, below
                if kind in ('topic', 'flush'):
                    conn.send(('error', f'{exc}'))
            except BagError as exc:
                conn.send(('error', f'{exc}'))
                if kind == 'close':
                    return
            if writer.failed or refused:
                if not failed_sent:
                    failed_sent = True
                    conn.send(('failed', (writer.failed or refused, writer.flushed_count)))
            elif writer.flushed_count != reported:
                reported = writer.flushed_count
                conn.send(('flushed', reported))
    finally:
        try:
            writer.close()
        except BagError as exc:  # the parent is gone: nobody else can say it
            print(f'recorder: {exc}', file=sys.stderr, flush=True)


if __name__ == '__main__':
    _child(Connection(int(sys.argv[1])), sys.argv[2], float(sys.argv[3]))
