"""Property: whatever a bag directory holds (random bytes, a valid bag cut at any byte, a broken
metadata.yaml), the readers and `equimus bag info` end normally or with one BagError line
(exit 2), and never change a byte of it."""

import hashlib
import subprocess
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rclpy.serialization import serialize_message
from std_msgs.msg import Float64MultiArray

from equimus_record import bag

SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
TOPIC = '/valve/command'


def _valid_bag(path, n=300):
    w = bag.BagWriter(path, chunk_size=4096)
    w.add_topic(TOPIC, 'std_msgs/msg/Float64MultiArray')
    for i in range(n):
        w.write(TOPIC, 1000 * (i + 1), serialize_message(Float64MultiArray(data=[float(i)] * 4)))
    w.close()
    return (path / f'{path.name}_0.mcap').read_bytes(), (path / 'metadata.yaml').read_text()


def _digest(d):
    return {p.name: hashlib.sha256(p.read_bytes()).digest() for p in sorted(d.iterdir())}


def _read_all(d):
    """Every reader; returns the message count or the BagError text."""
    try:
        text = bag.describe(d)
        n = sum(1 for _ in bag.read_messages(d))
        assert sum(c[1] for c in bag.topic_counts(d).values()) == n
        assert text.startswith(f'{d}: {n} messages')
        return n
    except bag.BagError as exc:
        assert '\n' not in str(exc) and str(exc).startswith(str(d)), str(exc)
        return str(exc)


@SETTINGS
@given(data=st.binary(max_size=2000), prefix=st.booleans(), suffix=st.booleans())
def test_random_bytes(tmp_path_factory, data, prefix, suffix):
    d = tmp_path_factory.mktemp('rnd') / 'b'
    d.mkdir()
    (d / 'b_0.mcap').write_bytes(
        (bag.MAGIC if prefix else b'') + data + (bag.MAGIC if suffix else b'')
    )
    before = _digest(d)
    _read_all(d)
    assert _digest(d) == before


@SETTINGS
@given(cut=st.integers(0, 10_000), meta=st.sampled_from(['keep', 'none', 'garbage', 'cut']))
def test_a_valid_bag_cut_anywhere(tmp_path_factory, cut, meta):
    src = tmp_path_factory.mktemp('src') / 'good'
    mcap, metadata = _valid_bag(src)
    d = tmp_path_factory.mktemp('cut') / 'b'
    d.mkdir()
    (d / 'b_0.mcap').write_bytes(mcap[: cut % (len(mcap) + 1)])
    if meta == 'keep':
        (d / 'metadata.yaml').write_text(metadata.replace('good_0', 'b_0'))
    elif meta == 'garbage':
        (d / 'metadata.yaml').write_text('rosbag2_bagfile_information: [\n')
    elif meta == 'cut':
        (d / 'metadata.yaml').write_text(metadata[: len(metadata) // 2])
    before = _digest(d)
    got = _read_all(d)
    if isinstance(got, int):
        assert got <= 300
    if cut % (len(mcap) + 1) == len(mcap) and meta == 'keep':
        assert got == 300  # the whole, closed bag
    assert _digest(d) == before


def test_cli_on_garbage_is_one_line_exit_2(tmp_path):
    d = tmp_path / 'b'
    d.mkdir()
    (d / 'b_0.mcap').write_bytes(b'PK\x03\x04 a zip, not a bag')
    before = _digest(d)
    for action in ('info', 'repair'):
        proc = subprocess.run(
            [sys.executable, '-m', 'equimus_bringup.cli', 'bag', action, str(d)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, (proc.stdout, proc.stderr)
        assert 'Traceback' not in proc.stderr
        assert proc.stderr.strip().count('\n') == 0 and 'not an MCAP file' in proc.stderr
    assert _digest(d) == before
    proc = subprocess.run(
        [sys.executable, '-m', 'equimus_bringup.cli', 'bag', 'info', str(tmp_path / 'missing')],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and 'missing: no such bag folder' in proc.stderr, proc.stderr
