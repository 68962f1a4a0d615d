"""The bridge's receive thread settings (issue 18, latency) in a process of their own, against the
emulator over real UDP: SCHED_FIFO and the CPU pin applied where permitted; refused for real
(CAP_SYS_NICE dropped with setpriv), the refusal logged with what to do and frames still flow."""

import os
import shutil
import subprocess
import sys

import pytest
from natnet_util import random_group

from equimus_hw.natnet.emulator import NatNetEmulator

CHILD = r"""
import sys, time, rclpy
from equimus_hw.natnet.bridge_node import NatNetBridge
from equimus_ros.lifecycle import bring_up
from rclpy.executors import SingleThreadedExecutor
cmd, data, group = sys.argv[1:4]
FLOWING = int(sys.argv[4])
rclpy.init(args=['--ros-args', '-p', f'command_port:={cmd}', '-p', f'data_port:={data}',
                 '-p', f'multicast_group:={group}', '-p', 'receive_priority:=50',
                 '-p', 'receive_cpu:=0', '-p', 'busy_poll_window:=0.002',
                 '-p', 'discovery_wait:=0.0'])
bridge = NatNetBridge()
ex = SingleThreadedExecutor()
ex.add_node(bridge)
bring_up(bridge)
# Frames flowing is the point, not their rate: a loaded CI host may deliver fewer in a fixed time.
end = time.monotonic() + 30.0
while time.monotonic() < end and bridge.client.stats.frames < FLOWING:
    ex.spin_once(timeout_sec=0.05)
print('RECEIVE', bridge.receive_scheduling, flush=True)
print('FRAMES', bridge.client.stats.frames, flush=True)
bridge.stop_receiving()
bridge.destroy_node()
rclpy.try_shutdown()
"""


FLOWING = 240  # two seconds of Motive's 120 Hz


def _run(ports, prefix=()):
    group = random_group()
    emu = NatNetEmulator(command_port=ports[0], data_port=ports[1], multicast_group=group).start()
    try:
        r = subprocess.run(
            [*prefix, sys.executable, '-c', CHILD, *map(str, ports), group, str(FLOWING)],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ, PYTHONUNBUFFERED='1'),
        )
    finally:
        emu.stop()
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    receive = next(line for line in r.stdout.splitlines() if line.startswith('RECEIVE'))
    frames = int(next(line for line in r.stdout.splitlines() if line.startswith('FRAMES'))[7:])
    return receive, frames, out


def _fifo_permitted() -> bool:
    r = subprocess.run(['chrt', '-f', '50', 'true'], capture_output=True)
    return shutil.which('chrt') is not None and r.returncode == 0


def test_receive_thread_gets_fifo_and_its_cpu_where_permitted(ports):
    if not _fifo_permitted():
        pytest.skip('SCHED_FIFO not permitted on this machine (see the refusal test)')
    receive, frames, _ = _run(ports)
    assert 'SCHED_FIFO 50' in receive and 'on CPU 0' in receive, receive
    assert 'busy-poll 2 ms before each frame' in receive, receive
    assert frames >= FLOWING, frames


def test_a_refused_priority_is_reported_and_frames_still_flow(ports):
    if shutil.which('setpriv') is None:
        pytest.skip('setpriv (util-linux) is needed to drop CAP_SYS_NICE')
    if os.geteuid() != 0 and _fifo_permitted():
        pytest.skip('not root, yet SCHED_FIFO permitted (rtprio limit): cannot drop it here')
    receive, frames, out = _run(ports, ('setpriv', '--bounding-set', '-sys_nice'))
    assert 'normal (SCHED_FIFO 50 refused: Operation not permitted)' in receive, receive
    assert 'receive_priority=50 not applied (Operation not permitted)' in out, out[-2000:]
    assert 'CAP_SYS_NICE' in out
    assert frames >= FLOWING, frames
