"""One way for every node to report on /diagnostics (diagnostic_msgs, as rqt_robot_monitor and
diagnostic_aggregator read it): a named status with a level, a message and key/value pairs."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node

from .qos import qos_for, tolerant_publisher

__all__ = ['Diagnostics', 'Level']


class Level(enum.IntEnum):
    OK = int.from_bytes(DiagnosticStatus.OK, 'little')
    WARN = int.from_bytes(DiagnosticStatus.WARN, 'little')
    ERROR = int.from_bytes(DiagnosticStatus.ERROR, 'little')
    STALE = int.from_bytes(DiagnosticStatus.STALE, 'little')


class Diagnostics:
    """`publish(level, message, values)` sends one status named `name` for `node` on `topic`
    (equimus_description.interface.DIAGNOSTICS)."""

    def __init__(self, node: Node, topic: Any, name: str, hardware_id: str = '') -> None:
        self.node, self.name, self.hardware_id = node, name, hardware_id
        self.pub = tolerant_publisher(node, DiagnosticArray, topic.name, qos_for(topic))

    def status(
        self,
        level: Level,
        message: str,
        values: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> DiagnosticStatus:
        return DiagnosticStatus(
            level=bytes([int(level)]),
            name=name or self.name,
            message=message,
            hardware_id=self.hardware_id,
            values=[KeyValue(key=str(k), value=str(v)) for k, v in (values or {}).items()],
        )

    def publish(
        self,
        level: Level,
        message: str,
        values: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        if not self.node.context.ok():
            return
        arr = DiagnosticArray(status=[self.status(level, message, values, name)])
        arr.header.stamp = self.node.get_clock().now().to_msg()
        self.pub.publish(arr)
