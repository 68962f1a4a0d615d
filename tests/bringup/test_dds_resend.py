"""A datagram a busy reader missed is sent again within the graph profile's heartbeat period.

A reliable writer resends what a reader asks for, and the reader asks when a heartbeat comes:
Fast DDS's default period is 3 s, so a recorder that missed /valve/command datagrams in the
last seconds before Ctrl-C lost them from the bag (a CI soak: 10 commands, 1.6 s before the
end). Real processes with the graph's environment: a subscriber is stopped (SIGSTOP) while a
30 kB stream fills its socket, and every small message must arrive within 1.2 s of the
subscriber running again (its first message after SIGCONT). Measured here: 0.07 s quiet,
0.60 s beside three busy loops; with the 3 s default, 1.36 s in three of three runs.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from equimus_bringup.graph import DISCOVERY_RANGE_ENV, TRANSPORT_CHOICE_ENVS, graph_environment

PEER = Path(__file__).with_name('dds_resend_peer.py')
STOPS, STOP_S, RUN_S = 4, 0.6, 1.5
LATE_S = 1.2


def _socket_drops(pid: int) -> int:
    """Datagrams the kernel dropped at `pid`'s UDP sockets (their receive buffers were full)."""
    inodes = set()
    for fd in os.listdir(f'/proc/{pid}/fd'):
        with contextlib.suppress(FileNotFoundError):
            link = os.readlink(f'/proc/{pid}/fd/{fd}')
            if link.startswith('socket:['):
                inodes.add(link[8:-1])
    drops = 0
    with open(f'/proc/{pid}/net/udp') as fh:
        for row in list(fh)[1:]:
            cols = row.split()
            if cols[9] in inodes:
                drops += int(cols[-1])
    return drops


def _start(env, *args):
    return subprocess.Popen(
        [sys.executable, str(PEER), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def _expect(proc, word):
    line = proc.stdout.readline().strip()
    assert line == word, f'{PEER.name} said {line!r}, not {word!r} (exit {proc.poll()})'


@pytest.mark.serial  # judges lateness in wall-clock time: alone (pytest.ini)
def test_a_missed_datagram_is_resent_within_the_heartbeat(monkeypatch):
    for k in (*TRANSPORT_CHOICE_ENVS, DISCOVERY_RANGE_ENV, 'RMW_IMPLEMENTATION', 'ROS_DISTRO'):
        monkeypatch.delenv(k, raising=False)
    env = {**os.environ, **graph_environment('sim')}
    n = int(120 * (STOPS * (STOP_S + RUN_S) + 1.0))
    sub = _start(env, 'sub', str(n), '60')
    pub = None
    try:
        _expect(sub, 'ready')
        pub = _start(env, 'pub', str(n))
        _expect(pub, 'matched')
        resumed = []
        for _ in range(STOPS):
            time.sleep(RUN_S / 2)
            os.kill(sub.pid, signal.SIGSTOP)
            time.sleep(STOP_S)
            os.kill(sub.pid, signal.SIGCONT)
            resumed.append(time.monotonic())
            time.sleep(RUN_S / 2)
        _expect(pub, 'sent')
        got = json.loads(sub.stdout.readline())
        drops = _socket_drops(sub.pid)
    finally:
        for p in (sub, pub):
            if p is not None:
                p.stdin.close()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    assert drops > 0, 'the stopped subscriber dropped no datagram: nothing here needed a resend'
    assert len(got) == n, f'{n - len(got)} of {n} messages never arrived'
    # the subscriber ran again at its first arrival after SIGCONT (a busy host delays that)
    ran = [min((a for _, a in got if a >= r), default=r) for r in resumed]
    late = [arrival - max([sent] + [r for r in ran if r <= arrival]) for sent, arrival in got]
    assert max(late) < LATE_S, (
        f'a message arrived {max(late):.2f} s after it was sent or its reader ran again '
        f'({sum(x >= LATE_S for x in late)} later than {LATE_S} s; {drops} datagrams dropped)'
    )
