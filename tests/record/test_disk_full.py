"""A full disk, for real: a small tmpfs fills up under the bag writer, the composed graph's
recorder, or a file-size limit; and `bag repair` on a closed bag with a corrupt chunk.

What must hold: the bag is closed at the error with every message flushed before it (footer,
metadata, lock released), and the count the recorder reports as safe is the count a reader
finds; when not even the footer fits, whole chunks stay and the message names `equimus bag
repair`, which then saves them."""

import subprocess
import sys
import textwrap
import time

import pytest
from mcap.reader import make_reader
from sensor_msgs.msg import JointState

from equimus_record import bag
from equimus_ros.cdr import MessageEncoder

TOPICS = ('/joint_states', '/valve/applied')
encode = MessageEncoder(JointState).encode


def _state(i: int) -> bytes:
    ns = 1_000_000 + i * 8_333_333
    m = JointState(name=['hip', 'knee'], position=[1.4 + 1e-4 * i, 0.8], velocity=[0.0, 0.0])
    m.header.stamp.sec, m.header.stamp.nanosec = divmod(ns, 10**9)
    return encode(m)


def _fill(w: bag.BagWriter, n_max: int = 200_000, flush_every: int = 50) -> int:
    """Write until the disk is full (OSError); returns how many writes succeeded."""
    for i in range(n_max):
        try:
            w.write(TOPICS[i % 2], 1_000_000 + i * 4_166_667, _state(i))
            if i % flush_every == flush_every - 1:
                w.flush()
        except OSError:
            return i
    pytest.fail(f'{n_max} messages never filled the disk')


def test_a_full_disk_closes_the_bag_with_every_flushed_message(small_disk):
    path = small_disk('128k') / 'bag'
    w = bag.BagWriter(path, flush_period=1e9, chunk_size=4096)
    for t in TOPICS:
        w.add_topic(t, 'sensor_msgs/msg/JointState')
    written = _fill(w)
    assert w.failed  # the writer knows it stopped, and why
    safe = w.flushed_count
    assert 0 < safe < written
    with pytest.raises(OSError, match='earlier write error'):
        w.write(TOPICS[0], 1, _state(0))
    w.close()  # no exception: the footer fits once the torn chunk is cut away
    assert w.flushed_count == safe
    assert bag.is_complete(path)
    assert not (path / bag.LOCK_NAME).exists()
    assert bag.status(path) == ''
    # rosbags (an independent reader) reads every message that was flushed, and no other
    msgs = list(bag.read_messages(path))
    assert len(msgs) == safe
    assert sum(n for _, n, _ in bag.topic_counts(path).values()) == safe
    meta = (path / 'metadata.yaml').read_text()
    assert f'message_count: {safe}' in meta
    assert 'nothing to repair' in bag.repair(path)


def test_when_not_even_the_footer_fits_whole_chunks_stay_for_repair(tmp_path):
    """A file-size limit at the last flush: the footer cannot be written. The file is cut back
    to its whole chunks, the lock is released, the error names `equimus bag repair`, and repair
    (with room again) saves every flushed message."""
    path = tmp_path / 'bag'
    code = textwrap.dedent(
        f"""
        import os, resource, signal, sys
        sys.path.insert(0, {str(__file__.rsplit('/', 1)[0])!r})
        from test_disk_full import TOPICS, _state
        from equimus_record import bag
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, as ENOSPC, not a signal
        w = bag.BagWriter(bag.Path({str(path)!r}), flush_period=1e9, chunk_size=4096)
        for t in TOPICS:
            w.add_topic(t, 'sensor_msgs/msg/JointState')
        for i in range(300):
            w.write(TOPICS[i % 2], 1_000_000 + i, _state(i))
        w.flush()
        size = os.path.getsize(w.path / w.file_name)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
        try:
            for i in range(300, 100_000):
                w.write(TOPICS[i % 2], 1_000_000 + i, _state(i))
        except OSError:
            pass
        try:
            w.close()
        except bag.BagError as exc:
            print(exc)
        print('flushed', w.flushed_count)
        """
    )
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert 'could not be closed' in r.stdout and f'equimus bag repair {path}' in r.stdout, r
    assert 'flushed 300' in r.stdout
    assert not bag.is_complete(path) and not (path / bag.LOCK_NAME).exists()
    assert len(list(bag.read_messages(path))) == 300  # read-only, up to the last whole chunk
    assert 'recovered 300 messages' in bag.repair(path)
    assert bag.is_complete(path) and len(list(bag.read_messages(path))) == 300


def test_repair_skips_a_corrupt_chunk_and_says_what_it_could_not_save(tmp_path):
    path = tmp_path / 'bag'
    w = bag.BagWriter(path, chunk_size=4096)
    for t in TOPICS:
        w.add_topic(t, 'sensor_msgs/msg/JointState')
    for i in range(1200):
        w.write(TOPICS[i % 2], 1_000_000 + i * 4_166_667, _state(i))
    w.close()
    f = path / 'bag_0.mcap'
    with open(f, 'rb') as fh:
        chunks = make_reader(fh).get_summary().chunk_indexes
    middle = chunks[len(chunks) // 2]  # bytes flipped inside its compressed data
    at = middle.chunk_start_offset + middle.chunk_length // 2
    b = bytearray(f.read_bytes())
    b[at : at + 16] = bytes(x ^ 0x5A for x in b[at : at + 16])
    f.write_bytes(bytes(b))
    with pytest.raises(bag.BagError, match='hecksum'):  # a reader sees the damage
        list(bag.read_messages(path))
    report = bag.repair(path)
    assert 'could not save 1 chunk that failed the checksum' in report, report
    saved = int(report.split('recovered ')[1].split()[0])
    lost = int(report.split('checksum (')[1].split()[0])
    assert saved + lost == 1200 and 0 < lost < 200, report
    assert '/joint_states' in report and '/valve/applied' in report
    # The repaired bag reads back whole: the messages before and after the lost chunk.
    stamps = [s for _, s, _ in bag.read_messages(path)]
    assert len(stamps) == saved
    assert stamps[0] == 1_000_000 and stamps[-1] == 1_000_000 + 1199 * 4_166_667
    assert (path / 'bag_0.mcap.broken').read_bytes() == bytes(b)  # the original is kept
    assert 'nothing to repair' in bag.repair(path)


def test_the_composed_recorder_tells_the_truth_when_the_disk_fills_up(
    ros_node, small_disk, tmp_path
):
    """The composed sim graph records onto a 2 MiB disk. While it records, /diagnostics
    counts the topics it records and the messages on disk; at the full disk the ERROR's "N
    messages are safe" is exactly what the closed bag holds; a clean stop prints no
    traceback and leaves no lock."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray

    from equimus_bringup.graph import describe_graph
    from equimus_bringup.supervisor import Supervisor

    # A flush every 0.1 s and a disk that holds several of them make "some flushes before the
    # error" independent of the machine's load; 2 MiB (about 37 sim s) at 3x real time (about
    # 12 s) also leaves a loaded machine's discovery time to deliver the recorder's first OK
    # report before the disk is full (as fast as possible, 2 MiB filled before it once in CI).
    path = small_disk('2m') / 'bag'
    params = tmp_path / 'recorder.yaml'
    params.write_text('recorder:\n  ros__parameters:\n    flush_period: 0.1\n')
    reports = []

    def on_diag(msg):
        for s in msg.status:
            if s.name == 'recorder':
                values = {kv.key: kv.value for kv in s.values}
                reports.append((int.from_bytes(s.level, 'little'), s.message, values))

    sub = ros_node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, 50)
    specs = describe_graph(
        'sim',
        {
            'record': 'true',
            'bag': str(path),
            'pause_at': '120.0',
            'params_file': str(params),
            'real_time_factor': '3',
        },
    )
    sup = Supervisor(specs, echo=False)
    try:
        sup.start()
        end = time.monotonic() + 180.0
        while not any(r[0] == 2 for r in reports):
            assert time.monotonic() < end, f'no recorder ERROR; last reports {reports[-3:]}'
            assert sup.poll() is None, sup.failed
            rclpy.spin_once(ros_node, timeout_sec=0.1)
    finally:
        codes = sup.stop()
        ros_node.destroy_subscription(sub)
    output = ''.join(line for lines in sup.output.values() for line in lines)
    assert codes == {'sim_graph': 0}, output[-3000:]
    assert 'Traceback' not in output, output[-3000:]
    ok = [r for r in reports if r[0] == 0]
    assert ok, reports
    # Every topic the graph publishes is counted, not only those subscribed over DDS.
    topics = max(int(r[1].split()[1]) for r in ok if r[1].startswith('recording '))
    assert topics >= 15, ok[-1]
    assert max(int(r[2]['messages_on_disk']) for r in ok) > 0  # flushes are reported
    err = next(r for r in reports if r[0] == 2)
    assert 'No space left on device' in err[1], err
    safe = int(err[1].split('. ')[1].split()[0])
    assert f'{safe} messages are safe' in err[1] and 'a closed bag' in err[1], err
    assert int(err[2]['messages_on_disk']) == safe
    assert bag.is_complete(path) and not (path / bag.LOCK_NAME).exists()
    assert len(list(bag.read_messages(path))) == safe > 1000
    print('messages safe at disk full on 2 MiB:', safe)
