"""The console scripts of setup.py: a Ctrl-C while the node still imports is one line
(equimus_ros.entry)."""

from equimus_ros.entry import run


def estimator() -> int:
    return run('equimus_control.estimator_node')


def controller() -> int:
    return run('equimus_control.controller_node')


def reference() -> int:
    return run('equimus_control.reference_node')
