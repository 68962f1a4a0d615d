"""Each test session claims a DDS domain of its own (tests/dds_domain.py, used by conftest.py).

Real processes, real locks, real rclpy/DDS: concurrent claims are distinct, a killed session's
domain is free again, a domain with a live participant is skipped, and two pytest sessions started
together with an exported ROS_DOMAIN_ID do not hear each other (while two sessions that use that
exported domain do: the probe can see cross-talk).
"""

import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import dds_domain
import pytest

TESTS = pathlib.Path(__file__).resolve().parent
PROBE_SECONDS = 5.0  # both sessions overlap for most of it, even when one starts late

CLAIMER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import dds_domain
    try:
        got = dds_domain.claim(domains={domains!r}, lock_dir={lock_dir!r})
    except RuntimeError as e:
        print('none', e, flush=True)
        sys.exit(3)
    print(got.domain, flush=True)
    sys.stdin.read()  # hold the claim until told to stop
    """
)


def start_claimer(domains, lock_dir) -> subprocess.Popen:
    code = CLAIMER.format(tests=str(TESTS), domains=list(domains), lock_dir=str(lock_dir))
    return subprocess.Popen(
        [sys.executable, '-c', code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@contextlib.contextmanager
def free_domains(n: int) -> Iterator[list[int]]:
    """n domains that no session and no participant holds, kept from the other test sessions
    (their locks held in the sessions' own lock folder) while the test's claimers compete for
    them in a folder of the test's own. Released at once, a domain could be claimed by another
    session and get its participants between the check and the claims (the suite's run of
    2026-12-04: `none no free ROS domain`)."""
    claims = [dds_domain.claim() for _ in range(n)]
    try:
        yield sorted(c.domain for c in claims)
    finally:
        for c in claims:
            c.release()


def test_concurrent_claims_are_distinct_and_a_killed_session_frees_its_domain(tmp_path):
    with free_domains(4) as domains:
        _claim_concurrently(domains, tmp_path)


def _claim_concurrently(domains: list[int], tmp_path: pathlib.Path) -> None:
    procs = [start_claimer(domains, tmp_path) for _ in range(4)]
    try:
        got = [int(p.stdout.readline()) for p in procs]
        assert sorted(got) == domains
        extra = start_claimer(domains, tmp_path)
        line = extra.stdout.readline()
        assert extra.wait(timeout=30) == 3 and line.startswith('none no free ROS domain'), line
        procs[1].send_signal(signal.SIGKILL)  # no clean-up: the kernel drops its lock
        procs[1].wait(timeout=10)
        again = start_claimer(domains, tmp_path)
        procs.append(again)
        assert int(again.stdout.readline()) == got[1]
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)


def test_a_domain_with_a_live_participant_is_skipped(tmp_path):
    with free_domains(2) as (busy, free):
        _skip_the_busy_one(busy, free, tmp_path)


def _skip_the_busy_one(busy: int, free: int, tmp_path: pathlib.Path) -> None:
    node = subprocess.Popen(
        [
            sys.executable,
            '-c',
            'import rclpy, sys; rclpy.init(); n = rclpy.create_node("holder"); '
            'print("up", flush=True); sys.stdin.read()',
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, ROS_DOMAIN_ID=str(busy)),
    )
    try:
        assert node.stdout.readline() == 'up\n'
        assert dds_domain.has_participant(busy)
        got = dds_domain.claim(domains=[busy, free], lock_dir=tmp_path)
    finally:
        node.kill()
        node.wait(timeout=10)
    assert got.domain == free
    got.release()


PROBE_TEST = textwrap.dedent(
    """
    import os, time
    import rclpy
    from std_msgs.msg import String

    def test_hears_only_itself():
        rclpy.init()
        node = rclpy.create_node('probe')
        heard = []
        node.create_subscription(String, '/cross_talk_probe', lambda m: heard.append(m.data), 50)
        pub = node.create_publisher(String, '/cross_talk_probe', 50)
        me = str(os.getpid())
        end = time.monotonic() + {seconds}
        while time.monotonic() < end:
            pub.publish(String(data=me))
            rclpy.spin_once(node, timeout_sec=0.05)
        node.destroy_node()
        rclpy.try_shutdown()
        print('domain', os.environ['ROS_DOMAIN_ID'], 'heard', sorted(set(heard)))
        assert me in heard, 'the probe did not even hear itself'
        assert set(heard) == {{me}}, f'cross-talk: {{sorted(set(heard))}}'
    """
)


def run_two_sessions(folder: pathlib.Path, exported: int) -> list[tuple[int, str]]:
    """Two pytest sessions of the probe test, started together, with ROS_DOMAIN_ID exported."""
    env = dict(os.environ, ROS_DOMAIN_ID=str(exported))
    cmd = [sys.executable, '-m', 'pytest', '-s', '-p', 'no:cacheprovider', '-o', 'addopts=']
    procs = [
        subprocess.Popen(
            [*cmd, str(folder / 'test_probe.py')],
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    return [(p.wait(timeout=120), p.stdout.read()) for p in procs]


@pytest.fixture
def exported_domain(tmp_path):
    """A domain as a user would export it, held by this test so no other session uses it."""
    got = dds_domain.claim()
    yield got.domain
    got.release()


@pytest.mark.slow
def test_two_sessions_with_an_exported_domain_do_not_hear_each_other(tmp_path, exported_domain):
    """The repository's conftest.py, copied beside a probe test: both sessions pass and their
    headers name different domains, neither the exported one."""
    isolated = tmp_path / 'isolated'
    isolated.mkdir()
    shutil.copy(TESTS / 'conftest.py', isolated)
    shutil.copy(TESTS / 'dds_domain.py', isolated)
    (isolated / 'test_probe.py').write_text(PROBE_TEST.format(seconds=PROBE_SECONDS))
    results = run_two_sessions(isolated, exported_domain)
    assert [rc for rc, _ in results] == [0, 0], results
    headers = [
        next(line for line in out.splitlines() if line.startswith('ROS_DOMAIN_ID='))
        for _, out in results
    ]
    domains = {h.split('=')[1].split()[0] for h in headers}
    assert len(domains) == 2 and str(exported_domain) not in domains, headers
    assert all(f'the exported {exported_domain} not used' in h for h in headers), headers


@pytest.mark.slow
def test_the_probe_sees_cross_talk_on_a_shared_domain(tmp_path, exported_domain):
    """Control: without the claim (no conftest), both sessions use the exported domain and each
    hears the other, so the test above can fail."""
    shared = tmp_path / 'shared'
    shared.mkdir()
    (shared / 'test_probe.py').write_text(PROBE_TEST.format(seconds=PROBE_SECONDS))
    results = run_two_sessions(shared, exported_domain)
    assert [rc for rc, _ in results] == [1, 1], results
    assert all('cross-talk' in out for _, out in results), results
