"""Recorder node: every topic of the graph, as serialized messages, into a rosbag2 MCAP bag.

Topics are discovered continuously, subscribed with `raw=True` (bytes are written as received,
never re-encoded) and with a QoS compatible with their publishers. The bag is flushed on a timer,
closed on Ctrl-C/SIGTERM; a write error (disk full) stops recording with an error on /diagnostics
while the rest of the graph keeps running.
"""
from __future__ import annotations

import importlib
import sys

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from equimus_record.bag import BagError, BagWriter
from equimus_ros.main import run_node


def message_class(type_name: str):
    """'std_msgs/msg/String' -> the generated Python class."""
    pkg, kind, name = type_name.split('/')
    return getattr(importlib.import_module(f'{pkg}.{kind}'), name)


def _time(duration) -> dict:
    sec, nsec = divmod(int(duration.nanoseconds), 10**9)
    return {'sec': sec, 'nsec': nsec}


def qos_dicts(profiles) -> list:
    """Publishers' QoS in rosbag2's metadata notation, so a replay offers the same QoS."""
    return [{'history': p.history.name.lower(), 'depth': p.depth,
             'reliability': p.reliability.name.lower(), 'durability': p.durability.name.lower(),
             'deadline': _time(p.deadline), 'lifespan': _time(p.lifespan),
             'liveliness': p.liveliness.name.lower(),
             'liveliness_lease_duration': _time(p.liveliness_lease_duration),
             'avoid_ros_namespace_conventions': bool(p.avoid_ros_namespace_conventions)}
            for p in profiles]


class Recorder(Node):
    def __init__(self):
        super().__init__('recorder')
        d = ParameterDescriptor
        self.declare_parameter('bag_path', 'bags/equimus', d(description='bag directory to create (must not exist)'))
        self.declare_parameter('flush_period', 0.5, d(description='seconds between durable flushes to disk'))
        self.declare_parameter('discovery_period', 0.25, d(description='seconds between topic discovery passes'))
        self.declare_parameter('exclude_topics', [''], d(description='topics never recorded'))
        path = self.get_parameter('bag_path').value
        self.exclude = {t for t in self.get_parameter('exclude_topics').value if t}
        self.error = ''
        try:
            self.writer = BagWriter(path, flush_period=float(self.get_parameter('flush_period').value))
        except (BagError, OSError) as exc:
            raise SystemExit(f'recorder: cannot create bag {path}: {exc}')
        self.subs = {}
        self.skipped = set()
        self.diag_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self.create_timer(float(self.get_parameter('discovery_period').value), self.discover)
        self.create_timer(1.0, self.publish_diagnostics)
        self.create_timer(self.writer.flush_period, self._flush_if_due)
        self.get_logger().info(f'recording every topic to {path}')
        self.discover()

    def discover(self):
        if self.error:
            return
        for topic, types in self.get_topic_names_and_types():
            if topic in self.subs or topic in self.exclude or topic in self.skipped:
                continue
            type_name = types[0]
            pubs = self.get_publishers_info_by_topic(topic)
            if not pubs:
                continue
            profiles = [p.qos_profile for p in pubs]
            reliable = all(p.reliability == ReliabilityPolicy.RELIABLE for p in profiles)
            latched = all(p.durability == DurabilityPolicy.TRANSIENT_LOCAL for p in profiles)
            qos = QoSProfile(depth=1000,
                             reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)
            try:
                cls = message_class(type_name)
                self.writer.add_topic(topic, type_name, qos_dicts(profiles))
            except (BagError, ImportError, AttributeError, ValueError) as exc:
                self.get_logger().warning(f'not recording {topic} ({type_name}): {exc}')
                self.skipped.add(topic)
                continue
            self.subs[topic] = self.create_subscription(
                cls, topic, lambda data, t=topic: self.on_message(t, data), qos, raw=True)
            self.get_logger().info(f'recording {topic} [{type_name}]')

    def on_message(self, topic: str, data: bytes):
        if self.error:
            return
        try:
            self.writer.write(topic, self.get_clock().now().nanoseconds, data)
        except OSError as exc:
            self.stop_recording(exc)

    def _flush_if_due(self):
        if self.error or self.writer.closed:
            return
        try:
            self.writer.flush_if_due()
        except OSError as exc:
            self.stop_recording(exc)

    def stop_recording(self, exc: Exception):
        self.error = (f'recording stopped: {exc}. {self.writer.flushed_count} messages are safe in '
                      f'{self.writer.path}; free disk space and start a new bag')
        self.get_logger().error(self.error)
        for sub in self.subs.values():
            self.destroy_subscription(sub)
        self.subs.clear()

    def publish_diagnostics(self):
        st = DiagnosticStatus(name='recorder', hardware_id='rosbag2')
        st.level = DiagnosticStatus.ERROR if self.error else DiagnosticStatus.OK
        st.message = self.error or f'recording {len(self.subs)} topics'
        st.values = [KeyValue(key='bag', value=str(self.writer.path)),
                     KeyValue(key='messages', value=str(self.writer.count)),
                     KeyValue(key='messages_on_disk', value=str(self.writer.flushed_count))]
        msg = DiagnosticArray(status=[st])
        msg.header.stamp = self.get_clock().now().to_msg()
        self.diag_pub.publish(msg)

    def destroy_node(self):
        self.close()
        return super().destroy_node()

    def close(self):
        if self.error or self.writer.closed:
            return
        # Called after Ctrl-C has shut ROS down, so this reports on stdout, not /rosout.
        try:
            self.writer.close()
            print(f'recorder: bag closed: {self.writer.count} messages in {self.writer.path}', flush=True)
        except OSError as exc:
            print(f'recorder: closing the bag failed: {exc}; run `equimus bag repair {self.writer.path}`',
                  file=sys.stderr, flush=True)


def main(args=None) -> int:
    return run_node(Recorder, args, config_hint='Fix config/recorder.yaml or the --ros-args overrides.')


if __name__ == '__main__':
    sys.exit(main())
