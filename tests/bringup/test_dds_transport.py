"""On Fast DDS the graph's processes talk UDP only (`graph_environment`), so a process that dies
holding its shared-memory port's lock cannot block their publishers (docs/reliability.md, "A
SIGKILLed recorder stalled"). Real processes: a graph node started from its description
delivers messages to a participant of this process on the LOCALHOST range, and its memory maps
show whether it opened Fast DDS shared memory."""

import contextlib
import dataclasses
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import dds_domain
import pytest
import rclpy
from sensor_msgs.msg import JointState

from equimus_bringup.graph import (
    DISCOVERY_RANGE_ENV,
    FAST_DDS_2_FOLDER,
    FASTDDS_PROFILE_ENVS,
    TRANSPORT_CHOICE_ENVS,
    UDP_LOCALHOST_PROFILE,
    UDP_PROFILE,
    dds_profile,
    describe_graph,
    graph_environment,
    localhost_environment,
    participant_environment,
)
from equimus_bringup.supervisor import Supervisor
from equimus_description.interface import REFERENCE
from equimus_ros.qos import qos_for


@pytest.fixture
def no_user_choice(monkeypatch):
    for k in (*TRANSPORT_CHOICE_ENVS, DISCOVERY_RANGE_ENV, 'RMW_IMPLEMENTATION', 'ROS_DISTRO'):
        monkeypatch.delenv(k, raising=False)


def test_every_graph_gets_a_udp_profile_and_the_users_choice_wins(no_user_choice):
    for mode, args, profile in (
        ('sim', {'composed': 'false'}, UDP_LOCALHOST_PROFILE),
        ('sim', {'composed': 'true'}, UDP_LOCALHOST_PROFILE),
        ('hardware', {'record': 'true', 'bag': 'b'}, UDP_PROFILE),
        ('hardware', {'fused_loop': 'true', 'record': 'true', 'bag': 'b'}, UDP_PROFILE),
    ):
        specs = describe_graph(mode, args)
        for s in specs:
            assert os.path.basename(dds_profile(s.env) or '') == profile
            assert os.path.isfile(s.env['FASTDDS_DEFAULT_PROFILES_FILE'])
    # a localhost-only graph: the loopback profile on the SUBNET range, joined here as LOCALHOST
    env = graph_environment('hardware', {DISCOVERY_RANGE_ENV: 'LOCALHOST'})
    assert os.path.basename(env['FASTDDS_DEFAULT_PROFILES_FILE']) == UDP_LOCALHOST_PROFILE
    assert env[DISCOVERY_RANGE_ENV] == 'SUBNET'
    assert participant_environment(env)[DISCOVERY_RANGE_ENV] == 'LOCALHOST'
    # one profile variable: Fast DDS 2.x's name on the distributions that ship it
    jazzy = graph_environment('sim', {'ROS_DISTRO': 'jazzy'})
    assert [k for k in FASTDDS_PROFILE_ENVS if k in jazzy] == ['FASTRTPS_DEFAULT_PROFILES_FILE']
    # ... and the profile in Fast DDS 2.x's element names, the same profile otherwise
    fast_dds_2 = Path(jazzy['FASTRTPS_DEFAULT_PROFILES_FILE'])
    assert fast_dds_2.parent.name == FAST_DDS_2_FOLDER
    fast_dds_3 = fast_dds_2.parent.parent / fast_dds_2.name
    renamed = re.sub(r'(</?)heartbeat_period>', r'\1heartbeatPeriod>', fast_dds_3.read_text())
    assert '<heartbeat_period>' in fast_dds_3.read_text() and fast_dds_2.read_text() == renamed
    # the user's transports or profile, or another DDS: no profile
    for user in ({'FASTDDS_BUILTIN_TRANSPORTS': 'SHM'}, {FASTDDS_PROFILE_ENVS[1]: 'mine.xml'}):
        assert graph_environment('sim', user) == {DISCOVERY_RANGE_ENV: 'LOCALHOST'}
    assert graph_environment('hardware', {'RMW_IMPLEMENTATION': 'rmw_cyclonedds_cpp'}) == {}


def test_a_graph_kept_on_this_host_talks_udp_only_in_a_test_session_too(no_user_choice):
    """localhost_environment, the soak's graph: the loopback profile on the SUBNET range from
    a plain environment or the LOCALHOST range; a test session's environment, which holds that
    profile already, is kept (the soak set LOCALHOST over it, on which rmw_fastrtps adds shared
    memory, and then SIGKILLed nodes); the user's own profile stays, on this host."""
    env = localhost_environment('hardware', {})
    assert os.path.basename(dds_profile(env) or '') == UDP_LOCALHOST_PROFILE
    assert env[DISCOVERY_RANGE_ENV] == 'SUBNET'
    assert localhost_environment('hardware', {DISCOVERY_RANGE_ENV: 'LOCALHOST'}) == env
    assert localhost_environment('hardware', env) == {}
    mine = {FASTDDS_PROFILE_ENVS[0]: 'mine.xml'}
    assert localhost_environment('hardware', mine) == {DISCOVERY_RANGE_ENV: 'LOCALHOST'}


def _fastdds_shm_maps(pid: int) -> list[str]:
    with open(f'/proc/{pid}/maps') as fh:
        return sorted({ln.split()[-1] for ln in fh if '/dev/shm/fastdds' in ln})


@pytest.mark.parametrize('graph_profile', [True, False])
def test_a_graph_process_delivers_over_udp_without_shared_memory(
    ros_node, monkeypatch, no_user_choice, graph_profile
):
    """The reference node as a localhost-only graph starts it reaches this process (LOCALHOST
    range, shared memory on) and maps no shared memory; on the plain LOCALHOST range it maps
    Fast DDS's shared-memory segments (the check can fail)."""
    monkeypatch.setenv(DISCOVERY_RANGE_ENV, 'LOCALHOST')
    spec = next(s for s in describe_graph('hardware', {}) if s.name == 'reference')
    assert spec.env[DISCOVERY_RANGE_ENV] == 'SUBNET'
    if not graph_profile:
        spec = dataclasses.replace(spec, env={})
    got: list[JointState] = []
    ros_node.create_subscription(JointState, REFERENCE.name, got.append, qos_for(REFERENCE))
    sup = Supervisor([spec], echo=False)
    sup.start()
    try:
        end = time.monotonic() + 15.0
        while len(got) < 5 and time.monotonic() < end:
            rclpy.spin_once(ros_node, timeout_sec=0.1)
        assert len(got) >= 5, f'{len(got)} reference messages in 15 s'
        maps = _fastdds_shm_maps(sup.procs['reference'].pid)
        assert bool(maps) != graph_profile, maps
    finally:
        sup.stop()


@pytest.mark.parametrize('fixed', [True, False])
def test_equimus_valve_maps_no_shared_memory(monkeypatch, no_user_choice, fixed):
    """`equimus valve` joins as a graph process does, UDP only: no shared-memory segment that a
    killed process of the same domain left behind is opened (a new participant opening such a
    segment can crash in Fast DDS). Without the graph's profile, the LOCALHOST range of this
    session maps Fast DDS's segments (the check can fail). No graph runs: the answer is "not
    offered" after --timeout."""
    monkeypatch.setenv(DISCOVERY_RANGE_ENV, 'LOCALHOST')
    code = (
        'import sys; from equimus_bringup import cli; '
        + (
            ''
            if fixed
            else 'cli.command_environment = lambda mode: dict(__import__("os").environ); '
        )
        + 'sys.exit(cli.main(["valve", "arm", "--timeout", "4"]))'
    )
    proc = subprocess.Popen(
        [sys.executable, '-c', code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        maps: list[str] = []
        # Its whole life (imports, then --timeout 4 s on the domain): a loaded machine took
        # more than the 3 s this once waited to reach the domain at all.
        end = time.monotonic() + 30.0
        while proc.poll() is None and time.monotonic() < end and not maps:
            time.sleep(0.2)
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                maps = _fastdds_shm_maps(proc.pid)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2 and 'is not offered' in err, (proc.returncode, out, err)
    assert bool(maps) != fixed, maps


def test_every_process_of_the_test_session_talks_udp_only():
    """The session's DDS environment (tests/conftest.py) is the same when given again, as a
    pytest-xdist worker inherits it from the main process: the graphs' loopback UDP profile
    with the range SUBNET (before, a worker set the range back to LOCALHOST, on which
    rmw_fastrtps adds shared memory). And a participant started with this process's environment,
    as every process a test starts is, maps no Fast DDS shared memory."""
    import dds_domain

    chosen = (*TRANSPORT_CHOICE_ENVS, DISCOVERY_RANGE_ENV, dds_domain.SESSION_DDS_MARK)
    fresh = {k: v for k, v in os.environ.items() if k not in chosen}
    first = {**fresh, **dds_domain.session_dds_environment(fresh)}
    assert first[DISCOVERY_RANGE_ENV] == 'SUBNET', first
    assert (dds_profile(first) or '').endswith(UDP_LOCALHOST_PROFILE), dds_profile(first)
    assert {**first, **dds_domain.session_dds_environment(first)} == first
    probe = (
        'import rclpy, time\n'
        'rclpy.init()\n'
        'node = rclpy.create_node("session_probe")\n'
        'time.sleep(1.0)\n'
        'maps = open("/proc/self/maps").read().split("\\n")\n'
        'print(sorted({ln.split()[-1] for ln in maps if "/dev/shm/fastdds" in ln}))\n'
    )
    run = subprocess.run(
        [sys.executable, '-c', probe], capture_output=True, text=True, timeout=60, env=os.environ
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == '[]', run.stdout


#: SPDP, Fast DDS's participant announcements, go to this multicast group on the port of
#: the domain (DDSI-RTPS 9.6.1.1); every process bound to it with SO_REUSEADDR gets a copy.
SPDP_GROUP = '239.255.0.1'


def _announcements(domain: int, env: dict[str, str], after_burst_s: float) -> list[float]:
    """When the one participant started with `env` on `domain` announced itself (s, one entry
    per announcement), read off the loopback multicast group until `after_burst_s` past the
    end of its first announcements (five, 100 ms apart)."""
    import socket
    import struct

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(('', dds_domain.discovery_ports(domain)[0]))
    group = struct.pack('4s4s', socket.inet_aton(SPDP_GROUP), socket.inet_aton('127.0.0.1'))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, group)
    sock.settimeout(0.1)
    node = (
        'import rclpy, time\nrclpy.init()\nnode = rclpy.create_node("announcer")\ntime.sleep(60)\n'
    )
    proc = subprocess.Popen([sys.executable, '-c', node], env=env)
    sent: dict[bytes, list[float]] = {}
    try:
        end = time.monotonic() + 30.0
        while time.monotonic() < end and proc.poll() is None:
            with contextlib.suppress(TimeoutError):
                data, _ = sock.recvfrom(65536)
                if data[:4] == b'RTPS':  # header: 'RTPS', version, vendor, GUID prefix
                    sent.setdefault(data[8:20], []).append(time.monotonic())
            times = next(iter(sent.values()), [])
            if times and time.monotonic() > times[0] + 0.6 + after_burst_s:
                break
    finally:
        proc.kill()
        proc.wait()
        sock.close()
    assert len(sent) == 1, f'{len(sent)} participants announced themselves on domain {domain}'
    times = next(iter(sent.values()))
    # a datagram per interface it was sent on: one announcement
    return [t - times[0] for i, t in enumerate(times) if i == 0 or t - times[i - 1] > 0.05]


@pytest.mark.parametrize('graph_profile', [True, False])
def test_a_graph_participant_announces_itself_every_second(no_user_choice, graph_profile):
    """A participant that joins later (the supervisor's lifecycle client, the domain check,
    `equimus valve`) hears a running one at that one's next periodic announcement, every 3 s
    by Fast DDS's default: the supervisor's look for another graph's driver missed a running
    graph so (docs/reliability.md). The graph's profile announces every second: read off the
    loopback multicast group of a domain of this test's own. Without the profile it is 3 s (so
    the check can fail)."""
    claim = dds_domain.claim(avoid=(int(os.environ.get('ROS_DOMAIN_ID', '0')),))
    try:
        spec = describe_graph('sim', {})[0]  # the composed graph's one process
        env = {**os.environ, **spec.env, 'ROS_DOMAIN_ID': str(claim.domain)}
        if not graph_profile:
            for k in FASTDDS_PROFILE_ENVS:
                env.pop(k, None)
        times = _announcements(claim.domain, env, after_burst_s=3.5)
    finally:
        claim.release()
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    periodic = [g for g in gaps if g > 0.5]  # after the first five
    seen = ' '.join(f'{t:.2f}' for t in times)
    assert len(periodic) >= (2 if graph_profile else 1), seen
    # 1 s against 3 s; the margin is for this process read late on a loaded machine
    assert (max(periodic) < 2.2) == graph_profile, seen
