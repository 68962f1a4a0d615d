"""Helpers for the NatNet tests: subprocess launch of emulator and bridge, a group of their own.

A module of its own, not conftest, so no other test folder's conftest can shadow it.
"""

import contextlib
import os
import random
import subprocess
import sys
import time

DATA = 'data/natnet/motive2.1_natnet3.0'


def random_group() -> str:
    """A multicast group of our own so parallel runs on one host never hear each other."""
    return f'239.255.{random.randint(1, 254)}.{random.randint(1, 254)}'


@contextlib.contextmanager
def streaming_client(ports, **client_kwargs):
    """An in-process NatNet 4.1 emulator streaming on a multicast group of its own, and a
    connected client of it: (emulator, client, frame events, log lines); both stopped after."""
    from equimus_hw.natnet.client import NatNetClient
    from equimus_hw.natnet.emulator import NatNetEmulator

    group = random_group()
    emu = NatNetEmulator(
        version='4.1', command_port=ports[0], data_port=ports[1], multicast_group=group
    ).start()
    events, logs = [], []
    c = NatNetClient(
        command_port=ports[0],
        data_port=ports[1],
        multicast_group=group,
        on_frame=events.append,
        **client_kwargs,
    )
    c._user_log = lambda level, msg: logs.append((level, msg))
    try:
        c.connect()
        yield emu, c, events, logs
    finally:
        c.close()
        emu.stop()


class Proc:
    def __init__(self, args, name):
        self.name = name
        env = dict(os.environ, PYTHONUNBUFFERED='1')
        self.p = subprocess.Popen(
            [sys.executable, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )

    def alive(self):
        return self.p.poll() is None

    def stop(self, timeout=10.0):
        """SIGINT (like Ctrl-C) and return (returncode, output)."""
        if self.p.poll() is None:
            self.p.send_signal(2)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        out = self.p.stdout.read()
        return self.p.returncode, out


def wait_for(cond, timeout, step=0.02):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()
