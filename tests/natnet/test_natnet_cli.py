"""`equimus natnet list|record|replay` as a user runs them (subprocesses, real sockets)."""

import subprocess
import sys
import time

from natnet_util import wait_for

from equimus_hw.natnet import protocol as P
from equimus_hw.natnet.capture import read_capture
from equimus_hw.natnet.client import NatNetClient
from equimus_hw.natnet.emulator import NatNetEmulator


def equimus(*args, timeout=30):
    return subprocess.run(
        [sys.executable, '-m', 'equimus_bringup.cli', 'natnet', *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def port_args(ports):
    return ['--unicast', '--command-port', str(ports[0]), '--data-port', str(ports[1])]


def test_list_prints_bodies_and_topics(ports):
    with NatNetEmulator(
        version='4.3',
        command_port=ports[0],
        data_port=ports[1],
        multicast=False,
        bodies=['base', 'Rigid Body 2', '7'],
    ) as emu:
        r = equimus('list', *port_args(ports))
        assert emu.bitstream_requests == []  # listing never switches Motive's bitstream
    assert r.returncode == 0, r.stderr
    assert 'NatNet 4.3.0.0' in r.stdout and '3 rigid bodies' in r.stdout
    assert "'base'" in r.stdout and '/mocap/base/pose' in r.stdout
    assert "'Rigid Body 2'" in r.stdout and '/mocap/Rigid_Body_2/pose' in r.stdout
    assert '/mocap/body_7/pose' in r.stdout


def test_list_without_a_server_is_one_line_exit_2(ports):
    r = equimus('list', *port_args(ports), '--timeout', '0.5')
    assert r.returncode == 2 and 'Traceback' not in r.stderr
    assert r.stderr.count('\n') == 1 and 'no NatNet server info' in r.stderr


def test_record_and_replay(ports, tmp_path):
    out = tmp_path / 's.natnet'
    with NatNetEmulator(version='4.1', command_port=ports[0], data_port=ports[1], multicast=False):
        r = equimus('record', str(out), '-d', '0.8', *port_args(ports))
    assert r.returncode == 0, r.stderr
    assert 'NatNet 4.1.0.0' in r.stdout
    frames = [d.data for d in read_capture(out) if d.message_id == P.MessageId.FRAMEOFDATA]
    assert len(frames) > 50
    replay = subprocess.Popen(
        [sys.executable, '-m', 'equimus_bringup.cli', 'natnet', 'replay', str(out)]
        + ['--unicast', '--command-port', str(ports[0]), '--data-port', str(ports[1])],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    got = []
    c = NatNetClient(command_port=ports[0], data_port=ports[1], multicast=False)
    c.raw_sink = lambda d, t, ch: got.append(d) if d[:2] == b'\x07\x00' else None
    c.open()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                c.connect(0.5)
                break
            except Exception:  # noqa: BLE001 - the replay process is still starting
                continue
        assert wait_for(lambda: (c.poll(0.02), len(got) >= len(frames))[1], 10)
    finally:
        c.close()
    assert got == frames
    assert replay.wait(10) == 0
    assert f'sent {len(frames)} frames' in replay.stdout.read()


def test_record_without_a_server_leaves_no_file(ports, tmp_path):
    out = tmp_path / 'none.natnet'
    r = equimus('record', str(out), '-d', '0.5', *port_args(ports))
    assert r.returncode == 2 and 'Traceback' not in r.stderr and not out.exists()
