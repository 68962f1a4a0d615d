"""The console scripts of setup.py: a Ctrl-C while the node still imports is one line
(equimus_ros.entry)."""

from equimus_ros.entry import run


def sim_node() -> int:
    return run('equimus_sim.sim_node')
