"""Readers never write: `equimus bag info` on a live recording, explicit repair of a dead one."""

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc

import pytest
import rclpy
from rosproc import start_node, stop
from std_msgs.msg import Float64MultiArray

from equimus_record import bag

TOPIC = '/valve/command'
TYPE = 'std_msgs/msg/Float64MultiArray'


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, '-m', 'equimus_bringup.cli', 'bag', *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _snapshot(path) -> dict[str, str]:
    """Every file of the bag directory with a hash of its content."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


def _wait_subscribed(node, timeout=15.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if node.get_subscriptions_info_by_topic(TOPIC):
            return
        rclpy.spin_once(node, timeout_sec=0.1)
    raise AssertionError('the recorder never subscribed')


def test_bag_info_on_a_live_recording_leaves_it_complete(ros_node, tmp_path):
    path = tmp_path / 'live'
    pub = ros_node.create_publisher(Float64MultiArray, TOPIC, 1000)
    proc = start_node(
        'equimus_record', 'recorder', '-p', f'bag_path:={path}', '-p', 'flush_period:=0.05'
    )
    n, infos = 600, []
    try:
        _wait_subscribed(ros_node)
        time.sleep(0.5)
        for i in range(n):
            pub.publish(Float64MultiArray(data=[float(i)]))
            time.sleep(0.004)
            if i % 150 == 149:  # inspect and try to repair while the recorder writes
                infos.append(_cli('info', str(path)))
                refused = _cli('repair', str(path))
                assert refused.returncode == 2, refused.stdout + refused.stderr
                assert f'pid {proc.pid}' in refused.stderr and 'still being recorded' in (
                    refused.stderr
                )
        time.sleep(0.5)
    finally:
        out = stop(proc, signal.SIGINT)
    assert proc.returncode == 0, out
    for info in infos:
        assert info.returncode == 0, info.stderr
        assert 'still being recorded' in info.stdout, info.stdout
    # the inspections saw the bag grow
    seen = [int(i.stdout.split(': ')[1].split()[0]) for i in infos]
    assert seen == sorted(seen) and seen[-1] > 0, seen
    assert bag.is_complete(path)
    assert sorted(p.name for p in path.iterdir()) == ['live_0.mcap', 'metadata.yaml']
    # every message published after subscription is in the closed bag
    assert bag.topic_counts(path)[TOPIC][1] == n
    values = [m.data[0] for _, _, m in bag.read_messages(path, [TOPIC])]
    assert values == [float(i) for i in range(n)]
    final = _cli('info', str(path))
    assert f'{n} msgs' in final.stdout and 'unfinished' not in final.stdout


def _unclosed_bag(tmp_path, n: int, size: int = 8):
    """A bag as a killed writer leaves it: flushed chunks on disk, no footer, lock released."""
    from rclpy.serialization import serialize_message

    w = bag.BagWriter(tmp_path / 'w', flush_period=1e9, chunk_size=64 * 1024)
    w.add_topic(TOPIC, TYPE)
    for i in range(n):
        w.write(
            TOPIC, 1_000 * (i + 1), serialize_message(Float64MultiArray(data=[float(i)] * size))
        )
    w.flush()
    crashed = tmp_path / 'crashed'
    shutil.copytree(w.path, crashed)
    w.close()
    return crashed


def test_readers_never_write_and_repair_keeps_the_original(tmp_path):
    path = _unclosed_bag(tmp_path, 500)
    before = _snapshot(path)
    info = _cli('info', str(path))
    assert info.returncode == 0 and '500 messages' in info.stdout, info
    assert 'stopped without closing' in info.stdout
    assert [m.data[0] for _, _, m in bag.read_messages(path, [TOPIC])] == list(
        map(float, range(500))
    )
    assert _snapshot(path) == before  # nothing renamed, rewritten or added
    rep = _cli('repair', str(path))
    assert rep.returncode == 0 and 'recovered 500 messages' in rep.stdout, rep
    after = _snapshot(path)
    assert after['w_0.mcap.broken'] == before['w_0.mcap']  # named by the writer's bag
    assert bag.is_complete(path) and bag.topic_counts(path)[TOPIC][1] == 500
    assert 'unfinished' not in _cli('info', str(path)).stdout
    assert 'nothing to repair' in _cli('repair', str(path)).stdout


def test_a_torn_last_chunk_is_skipped_not_fatal(tmp_path):
    path = _unclosed_bag(tmp_path, 2000)
    f = path / 'w_0.mcap'
    size = f.stat().st_size
    os.truncate(f, int(size * 0.6))  # the writer died inside a chunk
    n = bag.topic_counts(path)[TOPIC][1]
    assert 0 < n < 2000
    assert f'recovered {n} messages' in bag.repair(path)
    assert bag.topic_counts(path)[TOPIC][1] == n


@pytest.mark.parametrize('n', [2_000, 20_000])
def test_repair_streams_in_constant_memory(tmp_path, n):
    """Peak Python allocation while repairing stays far below the bag's message bytes."""
    path = _unclosed_bag(tmp_path, n, size=64)  # 20k x ~540 B ≈ 11 MB of messages
    tracemalloc.start()
    try:
        bag.repair(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3_000_000, f'{peak / 1e6:.1f} MB peak for {n} messages'
    assert bag.topic_counts(path)[TOPIC][1] == n
