"""Fixtures for the NatNet tests; the helpers are in natnet_util."""

import pytest
from natnet_util import DATA, Proc

from equimus_hw.natnet.ports import free_udp_ports


@pytest.fixture
def ports():
    return free_udp_ports(2)


@pytest.fixture
def natnet_data(shared_dir):
    return shared_dir / DATA


@pytest.fixture
def spawn():
    procs = []

    def _spawn(args, name='proc'):
        pr = Proc(args, name)
        procs.append(pr)
        return pr

    yield _spawn
    for pr in procs:
        pr.stop()
