"""Supervisor.start: a start that fails leaves no process behind (real processes)."""

import pytest

from equimus_bringup.graph import ProcessSpec
from equimus_bringup.supervisor import GraphError, Supervisor


def test_a_failed_start_stops_what_it_had_started():
    """A node started, then a gate (the rig check's place in a graph) that fails: the node is
    stopped before the GraphError reaches the caller, whoever the caller is (a test that
    forgot, once, left a live valve driver that answered the next graph's lifecycle calls)."""
    specs = [
        ProcessSpec('reference', 'equimus_control', 'reference'),
        ProcessSpec(
            'gate',
            'equimus_bringup',
            'equimus',
            is_ros_node=False,
            arguments=['check', 'rig', '--no-such-option'],
            gate=True,
        ),
    ]
    sup = Supervisor(specs, echo=False)
    with pytest.raises(GraphError, match='gate failed'):
        sup.start()
    node = sup.procs['reference']
    assert node.poll() is not None, 'the node started before the failed gate is still running'
