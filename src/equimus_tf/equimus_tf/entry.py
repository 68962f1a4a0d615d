"""The console scripts of setup.py: a Ctrl-C while the node still imports is one line
(equimus_ros.entry)."""

from equimus_ros.entry import run


def state_publisher() -> int:
    return run('equimus_tf.state_publisher')
