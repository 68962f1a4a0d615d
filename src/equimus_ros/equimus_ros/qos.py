"""QoS profiles of the shared topics, in one place so publishers and subscribers always match.

A topic object (equimus_description.interface.Topic: `name`, `qos`) names its QoS class, a key of
PROFILES; `qos_for` maps it to the profile. This module imports no equimus package.
Sensor streams (poses, joint states) use rclpy's ``qos_profile_sensor_data``.
"""

import time
from collections.abc import Callable
from typing import Any

from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from rclpy.publisher import Publisher
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
    'DDS_REFUSAL',
    'DIAG_QOS',
    'LATCHED_QOS',
    'PROFILES',
    'SENSOR_QOS',
    'TolerantPublisher',
    'TF_QOS',
    'WRITER_DEPTH',
    'is_dds_refusal',
    'publisher',
    'qos_for',
    'tolerant_publisher',
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
#: CPU lost 12 of 1793 /valve/command messages in a fused soak with both cores busy. A reader
#: asks for a missed message only when a heartbeat comes, and Fast DDS sends one every 3 s (its
#: default period; piggybacked ones only after a socket buffer's worth of bytes): the history
#: must outlast that. 200 (1.7 s at 120 Hz) did not: a CI soak lost 6 consecutive commands the
#: probe had received. 1000 holds 8.3 s at 120 Hz. The graph's own Fast DDS profiles send a
#: heartbeat every 100 ms (share/equimus_bringup/dds); the depth covers a user's profile or
#: another DDS. Readers keep their own depth (the valve driver still acts on at most the 10
#: newest).
WRITER_DEPTH = 1000

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


#: What Fast DDS says when it refuses a publication: a reliable writer whose history is full of
#: messages a reader has not acknowledged (a stopped or starved subscriber process, a slow link)
#: waited its blocking time in vain.
DDS_REFUSAL = 'cannot publish data'


def is_dds_refusal(exc: BaseException) -> bool:
    return isinstance(exc, _rclpy.RCLError) and DDS_REFUSAL in str(exc)


class TolerantPublisher(Publisher):
    """A publisher whose publication DDS refuses is counted and reported, not raised: a
    subscriber elsewhere that stopped acknowledging (rqt on a remote machine, a stopped process)
    must not stop the node. For the readers a refused message is a lost one; the safety chain's
    timeouts (the controller's stale guard, the driver's and the board's watchdogs) are for that.
    Any other error still raises."""

    #: Called with the refusal's first line; set by `publisher` (a warning at most once a second).
    on_refused: Callable[[str], None] | None = None
    #: The node's `context.ok`, set by `tolerant_publisher`: a publication that fails because a
    #: signal shut the context down while a callback ran (rclpy's signal handler does not wait
    #: for the executor) is a stop, not an error. The events executor logs a callback's error
    #: as FATAL with its traceback, which a Ctrl-C must not print.
    context_ok: Callable[[], bool] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refused = 0

    def publish(self, msg: Any) -> None:
        try:
            super().publish(msg)
        except (_rclpy.RCLError, _rclpy.InvalidHandle) as exc:
            if not is_dds_refusal(exc):
                # its context shut down (RCLError) or the publisher destroyed with it
                if self.context_ok is not None and not self.context_ok():
                    return
                raise
            self.refused += 1
            if self.on_refused is not None:
                self.on_refused(str(exc).splitlines()[0])


def _warn_refusals(node: Node, pub: TolerantPublisher, period_s: float = 1.0) -> None:
    last = [-float('inf')]

    def warn(first_line: str) -> None:
        now = time.monotonic()
        if now - last[0] >= period_s:
            last[0] = now
            node.get_logger().warning(
                f'{pub.refused} publication(s) on {pub.topic_name} refused by DDS ({first_line}): '
                'a reliable subscriber stopped acknowledging (a stopped or starved process, a slow '
                'link); those messages were not sent, the node runs on'
            )

    pub.on_refused = warn


def tolerant_publisher(node: Node, msg_type: type, name: str, qos: QoSProfile) -> Any:
    """`node.create_publisher` with a TolerantPublisher that warns about refusals."""
    pub = node.create_publisher(msg_type, name, qos, publisher_class=TolerantPublisher)
    assert isinstance(pub, TolerantPublisher)
    pub.context_ok = node.context.ok
    _warn_refusals(node, pub)
    return pub


def publisher(node: Node, msg_type: type, topic: Any):  # noqa: ANN201 (rclpy's Publisher)
    """A publisher on a shared topic with the topic's own QoS; a reliable, volatile one keeps
    WRITER_DEPTH messages for its readers (see WRITER_DEPTH). A reliable one is a
    TolerantPublisher (a publication DDS refuses is counted and warned about); a best-effort
    writer never waits for a reader, so DDS cannot refuse it and it stays rclpy's own Publisher
    (no extra cost on the sensor streams and the clock)."""
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
    if qos.reliability != ReliabilityPolicy.RELIABLE:
        return node.create_publisher(msg_type, topic.name, qos)
    return tolerant_publisher(node, msg_type, topic.name, qos)


def subscription(node: Node, msg_type: type, topic: Any, callback):  # noqa: ANN001,ANN201
    """A subscription to a shared topic with the topic's own QoS."""
    return node.create_subscription(msg_type, topic.name, callback, qos_for(topic))
