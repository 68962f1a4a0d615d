"""The console scripts of setup.py: a Ctrl-C while the node still imports is one line
(equimus_ros.entry)."""

from equimus_ros.entry import run


def natnet_bridge() -> int:
    return run('equimus_hw.natnet.bridge_node')


def natnet_emulator() -> int:
    return run('equimus_hw.natnet.emulator')


def valve_driver() -> int:
    return run('equimus_hw.valve.driver_node')


def dac_board_emulator() -> int:
    return run('equimus_hw.valve.board_emulator')
