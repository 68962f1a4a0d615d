"""The console scripts of setup.py: a Ctrl-C while the node still imports is one line
(equimus_ros.entry)."""

from equimus_ros.entry import run


def rig_emulator() -> int:
    return run('equimus_bringup.rig_emulator')


def control_loop() -> int:
    return run('equimus_bringup.control_loop')


def sim_graph() -> int:
    return run('equimus_bringup.sim_graph')


def pressure_player() -> int:
    return run('equimus_bringup.pressure_player')
