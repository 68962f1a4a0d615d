"""Sim graphs are localhost-only: the environment is part of the graph description, and the
rmw here honours it (a process started with range OFF is never discovered; LOCALHOST is)."""

import dataclasses
import time

import pytest
import rclpy

from equimus_bringup.graph import (
    DISCOVERY_RANGE_ENV,
    describe_graph,
    graph_environment,
    participant_environment,
)
from equimus_bringup.supervisor import Supervisor
from equimus_description.interface import REFERENCE


def test_sim_graph_is_localhost_only_and_hardware_keeps_the_default(monkeypatch):
    """Localhost-only is the LOCALHOST range, or on Fast DDS its UDP-only equivalent (the
    loopback profile, test_dds_transport.py), which a participant here joins as LOCALHOST."""
    monkeypatch.delenv(DISCOVERY_RANGE_ENV, raising=False)
    sim = describe_graph('sim', {'record': 'true', 'bag': 'b'})
    assert sim and all(
        participant_environment(s.env).get(DISCOVERY_RANGE_ENV) == 'LOCALHOST' for s in sim
    )
    hw = describe_graph('hardware', {'record': 'true', 'bag': 'b'})
    assert all(DISCOVERY_RANGE_ENV not in s.env for s in hw)
    # the user's own choice wins
    assert DISCOVERY_RANGE_ENV not in graph_environment('sim', {DISCOVERY_RANGE_ENV: 'SUBNET'})


def _seen(node, topic: str, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if node.count_publishers(topic):
            return True
        rclpy.spin_once(node, timeout_sec=0.1)
    return False


@pytest.mark.parametrize(('rng', 'visible'), [('LOCALHOST', True), ('OFF', False)])
def test_the_graph_environment_reaches_the_process(ros_node, monkeypatch, rng, visible):
    monkeypatch.delenv(DISCOVERY_RANGE_ENV, raising=False)
    spec = next(s for s in describe_graph('sim', {'composed': 'false'}) if s.name == 'reference')
    assert participant_environment(spec.env)[DISCOVERY_RANGE_ENV] == 'LOCALHOST'
    spec = dataclasses.replace(spec, env={DISCOVERY_RANGE_ENV: rng})
    sup = Supervisor([spec], echo=False)
    sup.start()
    try:
        assert _seen(ros_node, REFERENCE.name, 8.0 if visible else 5.0) == visible
    finally:
        sup.stop()
