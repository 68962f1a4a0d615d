"""The NatNet servers' ports: free, below the kernel's ephemeral range (a socket bound to port 0
anywhere on the machine can never take one between its check and the server's bind) and below
DDS's ports (a participant started after the check never wants one)."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from equimus_hw.natnet import ports as P


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind(('127.0.0.1', port))
        except OSError:
            return False
        return True


def test_ports_are_free_and_below_the_ephemeral_range_and_dds():
    low = min(int(P.EPHEMERAL_RANGE.read_text().split()[0]), P.DDS_PORT_BASE)
    for _ in range(3):  # each bind below briefly holds a port another test may just have got
        got = P.free_udp_ports(3)
        assert len(set(got)) == 3
        assert all(P.PORT_FLOOR <= p < low and _bindable(p) for p in got), got
    pair = P.free_udp_port_pair()
    assert pair + 1 < low and _bindable(pair) and _bindable(pair + 1)


#: The narrow range's first port: below PORT_FLOOR, so the test's holding a hundred ports never
#: takes one that a test running beside it has just been given (in CI, a rig emulator found
#: its ports in a range held here: 7007/7008, "Address already in use"), and clear of NatNet's
#: 1510/1511 and the privileged ports.
NARROW_FLOOR = 1700


@pytest.fixture
def narrow(tmp_path, monkeypatch):
    """A range of 101 ports (the narrowest taken as a range) that free_udp_ports never gives
    outside this test."""
    floor = NARROW_FLOOR
    assert floor + 101 <= P.PORT_FLOOR
    monkeypatch.setattr(P, 'PORT_FLOOR', floor)
    limits = tmp_path / 'ip_local_port_range'
    limits.write_text(f'{floor + 101}\t60999\n')
    monkeypatch.setattr(P, 'EPHEMERAL_RANGE', limits)
    return range(floor, floor + 101)


def _hold(ports) -> list[socket.socket]:
    """A bound socket on each of `ports` that is free (the others are someone else's)."""
    socks = []
    for port in ports:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind(('127.0.0.1', port))
        except OSError:
            s.close()
            continue
        socks.append(s)
    return socks


def _child_given(narrow: range, call: str) -> subprocess.Popen:
    """A process that asks for ports of `narrow` by `call` (free_udp_ports(...)), prints them and
    keeps them until its stdin closes."""
    return subprocess.Popen(
        [
            sys.executable,
            '-c',
            'import sys\n'
            'from equimus_hw.natnet import ports as P\n'
            f'P.PORT_FLOOR = {narrow.start}\n'
            f'P._ceiling = lambda: {narrow.stop}\n'
            f'print(*P.{call}, flush=True)\n'
            'sys.stdin.read()\n',
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_port_in_use_is_never_given(narrow):
    socks = _hold(narrow)
    held = [s.getsockname()[1] for s in socks]
    free = held.pop(len(held) // 2)
    socks.pop(len(socks) // 2).close()
    try:
        assert P.free_udp_ports(1) == [free]
        socks.append(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        socks[-1].bind(('127.0.0.1', free))
        with pytest.raises(RuntimeError, match='no 1 free UDP ports'):
            P.free_udp_ports(1)
        # The ports found in use were reserved only for their check: free again, they are given.
        for s in socks:
            s.close()
        assert P.free_udp_ports(1)[0] in held
    finally:
        for s in socks:
            s.close()


def test_a_port_given_to_another_live_process_is_not_given_again(narrow):
    """Two processes searching at once, or a server stopped and started again, must not share
    a port: one given to a process stays reserved until that process ends."""
    socks = _hold(narrow)
    # One port left bindable, not yet given to this process, given to the child below.
    s = next(s for s in socks if s.getsockname()[1] not in P._reserved)
    socks.remove(s)
    port = s.getsockname()[1]
    s.close()
    child = _child_given(narrow, 'free_udp_ports(1)')
    try:
        assert child.stdout.readline().strip() == str(port)
        assert _bindable(port)  # free on the network: only the reservation keeps it
        with pytest.raises(RuntimeError, match='no 1 free UDP ports'):
            P.free_udp_ports(1)
        child.stdin.close()
        assert child.wait(10) == 0
        assert P.free_udp_ports(1) == [port]  # the child's end gave it back
    finally:
        if child.poll() is None:
            child.kill()
        for s in socks:
            s.close()


def test_a_port_given_to_another_live_process_is_never_bound_by_the_search(narrow, monkeypatch):
    """The search binds a port for a moment to check it free. Were that a port another process
    had been given, its server could find it "in use" just then: so the search skips a port
    another process holds before it checks, and a refused one is not checked at all."""
    child = _child_given(narrow, 'free_udp_ports(2, consecutive=True)')
    try:
        theirs = [int(p) for p in child.stdout.readline().split()]
        assert len(theirs) == 2
        checked: list[int] = []
        check = P._all_free

        def recording(ports, address):
            checked.extend(ports)
            return check(ports, address)

        monkeypatch.setattr(P, '_all_free', recording)
        # Both searches start at the child's first port, the first one they would check.
        monkeypatch.setattr(P, '_search_start', lambda width: theirs[0] - narrow.start)
        one = P.free_udp_ports(1)
        pair = P.free_udp_ports(2, consecutive=True)
        assert not set(checked) & set(theirs), (checked, theirs)
        assert not set(one + pair) & set(theirs)
        assert checked, 'the search checked no port'
    finally:
        child.stdin.close()
        child.wait(10)
        if child.poll() is None:
            child.kill()


#: A DDS participant's UDP ports, printed by a child process that made one (a real rclpy node).
PARTICIPANT_PORTS = """
import os
import rclpy
rclpy.init()
node = rclpy.create_node('port_probe')
mine = set()
for fd in os.listdir('/proc/self/fd'):
    try:
        link = os.readlink(f'/proc/self/fd/{fd}')
    except OSError:
        continue
    if link.startswith('socket:['):
        mine.add(link[len('socket:['):-1])
with open('/proc/net/udp') as f:
    rows = [line.split() for line in f.read().splitlines()[1:]]
print(*sorted(int(r[1].split(':')[1], 16) for r in rows if r[9] in mine))
node.destroy_node()
rclpy.shutdown()
"""


@pytest.mark.skipif(not Path('/proc/net/udp').exists(), reason='lists sockets from /proc (Linux)')
def test_no_port_a_dds_participant_holds_is_given():
    """A node started after the search (the graph's own, a second later) must not want a port
    it gave: Fast DDS holds one port a participant from 7000 up, below the RTPS mapping's 7400
    (three rig emulators found theirs taken so while the search reached 7400)."""
    out = subprocess.run(
        [sys.executable, '-c', PARTICIPANT_PORTS],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    held = [int(p) for p in out.stdout.split()]
    assert held, out.stderr
    given = range(P.PORT_FLOOR, P._ceiling())
    assert not [p for p in held if p in given], (held, given)
