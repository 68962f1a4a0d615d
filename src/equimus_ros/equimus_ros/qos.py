"""QoS profiles of the shared topics, in one place so publishers and subscribers always match.

A topic object (equimus_description.interface.Topic: `name`, `qos`) names its QoS class, a key of
PROFILES; `qos_for` maps it to the profile. This module imports no equimus package.
Sensor streams (poses, joint states) use rclpy's ``qos_profile_sensor_data``.
"""

from typing import Any

from rclpy.node import Node
from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)

__all__ = [
    'CLOCK_QOS',
    'COMMAND_QOS',
    'DIAG_QOS',
    'LATCHED_QOS',
    'PROFILES',
    'SENSOR_QOS',
    'TF_QOS',
    'WRITER_DEPTH',
    'publisher',
    'qos_for',
    'subscription',
]

#: /valve/command, /reference/joint: every command matters, none is worth replaying late.
COMMAND_QOS = QoSProfile(
    depth=10,
    reliability=ReliabilityPolicy.RELIABLE,
    history=HistoryPolicy.KEEP_LAST,
    durability=DurabilityPolicy.VOLATILE,
)
#: /diagnostics, as diagnostic_aggregator and rqt_robot_monitor expect it.
DIAG_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
#: /clock: only the newest time is of use.
CLOCK_QOS = QoSProfile(
    depth=1,
    reliability=ReliabilityPolicy.BEST_EFFORT,
    history=HistoryPolicy.KEEP_LAST,
    durability=DurabilityPolicy.VOLATILE,
)
SENSOR_QOS = qos_profile_sensor_data
#: /tf, as tf2_ros's broadcaster and listener use it.
TF_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
#: /tf_static and /robot_description: published once, kept for subscribers that join later.
LATCHED_QOS = QoSProfile(
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    history=HistoryPolicy.KEEP_LAST,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)

#: A reliable KEEP_LAST writer drops a message from its history once `depth` newer ones were
#: written, acknowledged by every reader or not, and can then no longer resend it to a reader
#: that missed its datagram: with depth 10 (83 ms of commands at 120 Hz) a recorder starved of
#: CPU lost 12 of 1793 /valve/command messages in a fused soak with both cores busy. Readers
#: keep their own depth (the valve driver still acts on at most the 10 newest).
WRITER_DEPTH = 200

PROFILES: dict[str, QoSProfile] = {
    'sensor': SENSOR_QOS,
    'command': COMMAND_QOS,
    'diagnostics': DIAG_QOS,
    'clock': CLOCK_QOS,
    'tf': TF_QOS,
    'latched': LATCHED_QOS,
}


def qos_for(topic: Any) -> QoSProfile:
    """The profile of a topic object with a `qos` class name (a str or a str enum)."""
    return PROFILES[getattr(topic.qos, 'value', topic.qos)]


def publisher(node: Node, msg_type: type, topic: Any):  # noqa: ANN201 (rclpy's Publisher)
    """A publisher on a shared topic with the topic's own QoS; a reliable, volatile one keeps
    WRITER_DEPTH messages for its readers (see WRITER_DEPTH)."""
    qos = qos_for(topic)
    if (
        qos.reliability == ReliabilityPolicy.RELIABLE
        and qos.durability == DurabilityPolicy.VOLATILE
        and qos.depth < WRITER_DEPTH
    ):
        qos = QoSProfile(
            depth=WRITER_DEPTH,
            reliability=qos.reliability,
            history=qos.history,
            durability=qos.durability,
        )
    return node.create_publisher(msg_type, topic.name, qos)


def subscription(node: Node, msg_type: type, topic: Any, callback):  # noqa: ANN001,ANN201
    """A subscription to a shared topic with the topic's own QoS."""
    return node.create_subscription(msg_type, topic.name, callback, qos_for(topic))
