"""Recorder node: every topic of the graph, as serialized messages, into a rosbag2 MCAP bag.

Topics are discovered continuously, subscribed with `raw=True` (bytes are written as received,
never re-encoded) and with a QoS compatible with their publishers. The bag is flushed on a timer,
closed on Ctrl-C/SIGTERM; a write error (disk full) stops recording with an error on /diagnostics
while the rest of the graph keeps running, and closes the bag at once with the messages flushed
before the error (or says to run `equimus bag repair` when not even that fits).
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Callable
from pathlib import Path

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.subscription import Subscription

from equimus_description.config import param, validate_fields
from equimus_description.interface import DIAGNOSTICS
from equimus_record.bag import BagError, BagWriter
from equimus_ros.clocks import time_reader
from equimus_ros.diagnostics import Diagnostics, Level
from equimus_ros.executors import timer_callback
from equimus_ros.main import run_node
from equimus_ros.params import bind


@dataclasses.dataclass(frozen=True)
class RecorderConfig:
    """The recorder's parameters, fixed for a recording (a bag is one run)."""

    bag_path: str = param('bags/equimus', 'bag directory to create (must not exist)')
    flush_period: float = param(
        0.5, 's between durable flushes to disk: the most a crash can lose', range=(0.01, 60.0)
    )
    discovery_period: float = param(0.25, 's between topic discovery passes', range=(0.01, 60.0))
    exclude_topics: tuple[str, ...] = param(('',), "topics never recorded (e.g. ['/rosout'])")

    def __post_init__(self) -> None:
        validate_fields(self)


def message_class(type_name: str):
    """'std_msgs/msg/String' -> the generated Python class."""
    pkg, kind, name = type_name.split('/')
    return getattr(importlib.import_module(f'{pkg}.{kind}'), name)


def _time(duration) -> dict:
    sec, nsec = divmod(int(duration.nanoseconds), 10**9)
    return {'sec': sec, 'nsec': nsec}


def qos_dicts(profiles) -> list:
    """Publishers' QoS in rosbag2's metadata notation, so a replay offers the same QoS."""
    return [
        {
            'history': p.history.name.lower(),
            'depth': p.depth,
            'reliability': p.reliability.name.lower(),
            'durability': p.durability.name.lower(),
            'deadline': _time(p.deadline),
            'lifespan': _time(p.lifespan),
            'liveliness': p.liveliness.name.lower(),
            'liveliness_lease_duration': _time(p.liveliness_lease_duration),
            'avoid_ros_namespace_conventions': bool(p.avoid_ros_namespace_conventions),
        }
        for p in profiles
    ]


class Recorder(Node):
    """`writer` builds the bag writer (BagWriter's interface); the composed sim graph passes one
    that writes in a child process, and its frame time (`frame_time`), the log time of what this
    node takes from DDS in place of the node clock."""

    def __init__(self, writer=BagWriter, frame_time: Callable[[], int] | None = None):
        super().__init__('recorder')
        self._clock_ns = time_reader(self.get_clock(), frame_time)
        cfg = bind(self, RecorderConfig()).config
        path = cfg.bag_path
        self.exclude = {t for t in cfg.exclude_topics if t}
        self.error = ''
        # Called before each message it takes from DDS is written: a composing process hands
        # over what it keeps for the bag first, so the log times stay in order (sim_graph).
        self.before_write: Callable[[], None] | None = None
        try:
            self.writer = writer(Path(path), flush_period=cfg.flush_period)
        except (BagError, OSError) as exc:
            # A ValueError: run_node reports it in one line with the file that set bag_path.
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ValueError(f'bag_path={path!r}: cannot create the bag: {why}') from None
        self.subs: dict[str, Subscription] = {}  # topic -> its raw subscription
        self.skipped: set[str] = set()
        self.diagnostics = Diagnostics(self, DIAGNOSTICS, 'recorder', 'rosbag2')
        self.create_timer(cfg.discovery_period, timer_callback(self.discover))
        self.create_timer(1.0, timer_callback(self.publish_diagnostics))
        self.create_timer(self.writer.flush_period, timer_callback(self._flush_if_due))
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
            qos = QoSProfile(
                depth=1000,
                reliability=ReliabilityPolicy.RELIABLE
                if reliable
                else ReliabilityPolicy.BEST_EFFORT,
                durability=DurabilityPolicy.TRANSIENT_LOCAL
                if latched
                else DurabilityPolicy.VOLATILE,
            )
            try:
                cls = message_class(type_name)
                self.writer.add_topic(topic, type_name, qos_dicts(profiles))
            except OSError as exc:  # the write error is found here first (a new topic)
                self.stop_recording(exc)
                return
            except (BagError, ImportError, AttributeError, ValueError) as exc:
                self.get_logger().warning(f'not recording {topic} ({type_name}): {exc}')
                self.skipped.add(topic)
                continue
            self.subs[topic] = self.create_subscription(
                cls, topic, lambda data, t=topic: self.on_message(t, data), qos, raw=True
            )
            self.get_logger().info(f'recording {topic} [{type_name}]')

    def on_message(self, topic: str, data: bytes):
        if self.error:
            return
        try:
            if self.before_write is not None:
                self.before_write()
            self.writer.write(topic, self._clock_ns(), data)
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
        """A write error: stop, and close the bag now with what the last flush made durable."""
        if self.error:
            return
        for sub in self.subs.values():
            self.destroy_subscription(sub)
        self.subs.clear()
        why = getattr(exc, 'strerror', None) or str(exc)
        path = self.writer.path
        try:
            self.writer.close()
            closed = (
                f'{self.writer.flushed_count} messages are safe in {path}, a closed bag '
                '(what was flushed before the error)'
            )
        except BagError as err:
            closed = str(err)
        self.error = f'recording stopped: {why}. {closed}; free disk space and start a new bag'
        self.get_logger().error(self.error)

    def publish_diagnostics(self):
        self.diagnostics.publish(
            Level.ERROR if self.error else Level.OK,
            self.error or f'recording {len(self.writer.topics)} topics',
            {
                'bag': self.writer.path,
                'messages': self.writer.count,
                'messages_on_disk': self.writer.flushed_count,
            },
        )

    def destroy_node(self):
        self.close()
        return super().destroy_node()

    def close(self):
        # Called after Ctrl-C has shut ROS down, so this reports on stdout, not /rosout.
        # No writer: its construction failed (a ValueError above), nothing to close.
        # Once: run_node closes the node, its destruction closes it again.
        if getattr(self, '_closed', False):
            return
        self._closed = True
        if getattr(self, 'writer', None) is None or self.writer.closed:
            if self.error:
                print(f'recorder: {self.error}', file=sys.stderr, flush=True)
            return
        try:
            self.writer.close()
            print(
                f'recorder: bag closed: {self.writer.flushed_count} messages in {self.writer.path}',
                flush=True,
            )
        except BagError as exc:
            print(f'recorder: {exc}', file=sys.stderr, flush=True)


def main(args=None) -> int:
    # The bag is closed in `close`, before the node's teardown (which run_node may cut short).
    return run_node(
        Recorder,
        args,
        close=Recorder.close,
        config_hint='Fix config/recorder.yaml or the --ros-args overrides.',
    )


if __name__ == '__main__':
    sys.exit(main())
