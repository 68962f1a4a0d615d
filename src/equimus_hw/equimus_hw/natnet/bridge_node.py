"""ROS 2 node ``natnet_bridge``: NatNet rigid bodies -> /mocap/<name>/pose (thin wrapper).

The protocol, clock mapping and health counters live in :mod:`.client` (no ROS). This node only
declares parameters, runs the client's receive loop in a thread, turns frames into
PoseStamped messages and reports on /diagnostics.

A managed (lifecycle) node: `configure` opens the NatNet sockets, `activate` starts the receive
thread (connect, stream, publish), `deactivate` stops it (no pose is published), `cleanup` and
`shutdown` close the sockets. The launch files and the supervisor take it to active;
`autostart: true` does so alone (a bare `ros2 run`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import struct
import sys
import threading
import time
from collections.abc import Callable

from geometry_msgs.msg import PoseStamped
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.publisher import Publisher
from sensor_msgs.msg import PointCloud2, PointField

from equimus_description.config import ConfigError, param, validate_fields
from equimus_description.interface import (
    BODIES,
    DIAGNOSTICS,
    FRAME_MOCAP,
    MOCAP_MARKERS,
    mocap_pose,
)
from equimus_description.motive import (
    DEFAULT_UP_AXIS,
    NAN_POSE,
    Pose,
    check_up_axis,
    motive_to_ros,
)
from equimus_ros.clocks import now_ns, stamp_msg
from equimus_ros.diagnostics import Diagnostics, Level
from equimus_ros.executors import timer_callback
from equimus_ros.lifecycle import bring_up
from equimus_ros.main import run_node
from equimus_ros.params import bind
from equimus_ros.qos import publisher

from . import protocol as P
from .checks import BodyMatch, match_bodies, topic_token
from .client import FrameEvent, NatNetClient, NatNetConfig

_POINT = struct.Struct('<fffI')
_S = math.sqrt(0.5)
#: s the stream waits once every pose topic has a subscriber. That count is this side's half of
#: the match; a subscriber keeps a sample only from a publisher its own process has matched,
#: from the same discovery exchange, which a loaded machine can delay (the likeliest reading of
#: a test's reader missing 8 frames of each body once, docs/reliability.md).
READER_MATCH_S = 0.25


#: The fused loop's sink: a frame's stamp (ns, node clock) and its (topic token, pose) pairs.
FrameSink = Callable[[int, list[tuple[str, Pose]]], None]


@dataclasses.dataclass(frozen=True)
class BridgeConfig:
    """What the bridge publishes (the connection is NatNetConfig's)."""

    frame_id: str = param(FRAME_MOCAP, 'frame_id of the published poses')
    up_axis: str = param(
        DEFAULT_UP_AXIS,
        "Motive's Streaming > Up Axis setting: 'y_up' (Motive's default; rotated +90 deg about "
        "X into the Z-up frame) or 'z_up' (passed as is); the poses are Z-up (REP-103) either way",
    )
    rigid_bodies: tuple[str, ...] = param(
        BODIES,
        'rigid body names to publish (Motive asset names; an all-digit name that is not a '
        "Motive name is taken as the streaming id); [''] = every body of Motive's model",
    )

    publish_markers: bool = param(
        False,
        "publish Motive's labeled markers on /mocap/markers (sensor_msgs/PointCloud2: x, y, z "
        'float32 m in frame_id, id uint32), one cloud per frame',
    )
    autostart: bool = param(
        False,
        'configure and activate at start-up (a bare `ros2 run`); the launch files and the '
        'supervisor leave it false and drive the lifecycle transitions',
    )
    discovery_wait: float = param(
        1.0,
        's to wait at start, before connecting, for every pose topic to have a subscriber (so a '
        'recorder started first gets the first frames); 0 = connect at once',
        range=(0.0, 30.0),
    )

    def __post_init__(self) -> None:
        validate_fields(self)
        try:
            check_up_axis(self.up_axis)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        dup = sorted({n for n in self.rigid_bodies if self.rigid_bodies.count(n) > 1})
        if dup:
            raise ConfigError(f'rigid_bodies lists {dup} more than once; list each body once')
        tokens: dict[str, str] = {}
        for n in self.rigid_bodies:
            if n and tokens.setdefault(topic_token(n), n) != n:
                raise ConfigError(
                    f'rigid_bodies {tokens[topic_token(n)]!r} and {n!r} would both publish '
                    f'{mocap_pose(topic_token(n)).name}; rename one in Motive'
                )


class NatNetBridge(LifecycleNode):
    """`downstream`, if given, gets each frame's poses as plain tuples in the receive thread
    before any message is built: the fused control loop (equimus_bringup.control_loop) chains
    the estimator there without a DDS hop, and the PoseStamped messages are built and published
    after the frame's valve command is written."""

    def __init__(self, downstream: FrameSink | None = None, **kwargs):
        # Before the node exists: destroy_node may run on a half-built bridge (bad parameters).
        self._stop = threading.Event()
        self._stop.set()
        self._thread: threading.Thread | None = None
        self._sockets_open = False
        super().__init__('natnet_bridge', **kwargs)
        self.downstream = downstream
        self.frame_arrival_ns = 0  # perf_counter_ns of the datagram being handled
        self.frame_decoded_ns = 0  # perf_counter_ns when its decoded frame reached the bridge
        self.frame_decoded_cpu_ns = 0  # the receive thread's CPU time then (thread_time_ns)

        self.connection = bind(self, NatNetConfig(), apply=self._apply)
        bridge = bind(self, BridgeConfig()).config
        net = self.connection.config
        self.server_address, self.command_port = net.server_address, net.command_port
        self.multicast, self.group = net.multicast, net.multicast_group
        self.data_port = net.data_port
        self.frame_id, self.up_axis = bridge.frame_id, bridge.up_axis
        self.discovery_wait = bridge.discovery_wait
        self.markers_pub = (
            publisher(self, PointCloud2, MOCAP_MARKERS) if bridge.publish_markers else None
        )
        wanted = [b for b in bridge.rigid_bodies if b]
        self.wanted: list[str] | None = wanted or None
        self.match: BodyMatch | None = None
        self.body_error = ''
        self.topic_for_id: dict[int, str] = {}  # streaming id -> published body name

        # Publishers exist before the first frame, so subscribers (the recorder) are matched by
        # the time poses flow; the rest are created when the model definitions name them.
        self.pubs: dict[str, Publisher] = {}
        for name in wanted:
            self._pub(name)
        self.diagnostics = Diagnostics(
            self,
            DIAGNOSTICS,
            'natnet_bridge: stream',
            f'natnet://{self.server_address}:{self.command_port}',
        )
        self.client = NatNetClient.from_config(
            net, on_frame=self._on_frame, on_log=self._log, on_model=self._on_model
        )
        self.receive_priority, self.receive_cpu = net.receive_priority, net.receive_cpu
        self.receive_scheduling = 'normal'  # what the receive thread got (diagnostics)
        self.discovery = ''  # how the discovery wait ended (diagnostics)
        self.autostart = bridge.autostart
        self._last_diag = 0.0
        self._last_level: Level | None = None
        self._prev = (0, 0, 0)
        self._prev_more = (0, 0, 0)
        self._reject_log_t = 0.0
        self.create_timer(0.1, timer_callback(self._diagnostics))
        mode = f'multicast {self.group}:{self.data_port}' if self.multicast else 'unicast'
        self.get_logger().info(
            f'NatNet bridge: server {self.server_address}:{self.command_port}, {mode}, '
            f'frame {self.frame_id} (Z-up, from Motive {self.up_axis}); unconfigured'
        )

    # -- lifecycle --------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Open the sockets (binding the data port may fail: the transition then fails)."""
        try:
            self.client.open()
        except OSError as e:
            self.client.close()
            self.get_logger().fatal(
                f'cannot open NatNet sockets ({e}); check local_address/data_port/multicast_group'
            )
            return TransitionCallbackReturn.FAILURE
        self._sockets_open = True
        self.get_logger().info('configured: NatNet sockets open')
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Start the receive thread: connect to Motive, stream and publish."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True, name='natnet-rx')
        self._thread.start()
        self.get_logger().info('active: streaming')
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.stop_receiving()
        self.get_logger().info('inactive: no pose is published')
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._close_sockets()
        self.get_logger().info('cleaned up: NatNet sockets closed')
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._close_sockets()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._close_sockets()
        return TransitionCallbackReturn.SUCCESS

    def _close_sockets(self) -> None:
        self.stop_receiving()
        if self._sockets_open:
            self._sockets_open = False
            self.client.close()

    def _apply(self, cfg: NatNetConfig) -> None:
        """Runtime: the stale timeout (the receive thread reads it on every check)."""
        self.client.stale_timeout = cfg.stale_timeout

    # -- receive thread ---------------------------------------------------------------------
    def _wait_for_subscribers(self) -> None:
        """Up to discovery_wait for every pose topic to have a subscriber; a timeout is logged
        and kept for /diagnostics (`discovery`): those topics' first frames reach no one."""
        if not self.pubs:
            self.discovery = 'no rigid body configured: nothing to wait for'
            return
        start = time.monotonic()
        end = start + self.discovery_wait
        while not self._stop.is_set() and time.monotonic() < end:
            if all(p.get_subscription_count() > 0 for p in list(self.pubs.values())):
                self.discovery = (
                    f'every pose topic subscribed after {time.monotonic() - start:.2f} s'
                )
                self._stop.wait(READER_MATCH_S)
                return
            self._stop.wait(0.01)
        if self._stop.is_set() or self.discovery_wait <= 0:
            return
        alone = sorted(
            p.topic_name for p in list(self.pubs.values()) if p.get_subscription_count() == 0
        )
        if alone:
            self.discovery = (
                f'discovery_wait {self.discovery_wait:g} s timed out: no subscriber on '
                f'{", ".join(alone)}'
            )
            self.get_logger().warning(
                f'{self.discovery}; streaming anyway, their first frames reach no one (a '
                'recorder still discovering misses them: raise discovery_wait)'
            )

    def _receive(self) -> None:
        stop = self._stop
        self._tune_receive_thread()
        self._wait_for_subscribers()
        self.client.run(stop)

    def _tune_receive_thread(self) -> None:
        """receive_priority and receive_cpu for this thread only (Linux: pid 0 = the calling
        thread). A refusal is logged with what to do, and the thread runs on as it is."""
        parts = []
        if self.receive_priority > 0:
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.receive_priority))
                parts.append(f'SCHED_FIFO {self.receive_priority}')
            except (OSError, AttributeError) as e:
                why = getattr(e, 'strerror', None) or str(e)
                parts.append(f'normal (SCHED_FIFO {self.receive_priority} refused: {why})')
                self.get_logger().warning(
                    f'receive_priority={self.receive_priority} not applied ({why}); grant '
                    'CAP_SYS_NICE or raise `ulimit -r`, or set receive_priority:=0. Receiving '
                    'with normal scheduling'
                )
        if self.receive_cpu >= 0:
            try:
                os.sched_setaffinity(0, {self.receive_cpu})
                parts.append(f'on CPU {self.receive_cpu}')
            except (OSError, AttributeError) as e:
                why = getattr(e, 'strerror', None) or str(e)
                parts.append(f'any CPU (CPU {self.receive_cpu} refused: {why})')
                self.get_logger().warning(
                    f'receive_cpu={self.receive_cpu} not applied ({why}); this machine has CPUs '
                    f'{sorted(os.sched_getaffinity(0))}. Receiving on any CPU'
                )
        if not parts and hasattr(os, 'sched_getscheduler'):
            with contextlib.suppress(OSError):
                if os.sched_getscheduler(0) == os.SCHED_FIFO:  # from the process (chrt -f)
                    parts.append(f'SCHED_FIFO {os.sched_getparam(0).sched_priority} (process)')
        window = self.client.busy_poll_window
        if window >= 0.1:  # longer than any frame period in use
            parts.append('busy-poll always')
        elif window > 0:
            parts.append(f'busy-poll {window * 1e3:g} ms before each frame')
        self.receive_scheduling = ', '.join(parts) or 'normal'

    def _log(self, level: str, msg: str) -> None:
        log = self.get_logger()
        if msg.startswith('rejected'):
            now = time.monotonic()  # rate-limit: a burst of garbage must not flood the log
            if now - self._reject_log_t < 1.0:
                return
            self._reject_log_t = now
        if level == 'error':
            log.error(msg)
        elif level == 'warn':
            log.warning(msg)
        elif level == 'info':
            log.info(msg)
        else:
            log.debug(msg)

    def _pub(self, name: str):
        pub = self.pubs.get(name)
        if pub is None:
            pub = publisher(self, PoseStamped, mocap_pose(topic_token(name)))
            self.pubs[name] = pub
        return pub

    def _on_model(self, model: P.ModelDefinitions) -> None:
        """Receive thread: compare Motive's bodies with rigid_bodies, loudly."""
        m = match_bodies(self.wanted, model)
        self.topic_for_id = {i: name for name, i in m.ids.items()}
        for name in m.ids:
            if topic_token(name) != name:
                self.get_logger().warning(
                    f'Motive body {name!r} is published on {mocap_pose(topic_token(name)).name} '
                    '(ROS topic names cannot hold it as is)'
                )
            self._pub(name)
        for name in m.by_id:
            self.get_logger().info(f'rigid_bodies entry {name!r} matched by streaming id')
        error = m.error()
        if error and error != self.body_error:
            self.get_logger().error(error)
        elif not error and self.body_error:
            self.get_logger().info(f'every configured rigid body is streamed: {m.streamed}')
        self.match, self.body_error = m, error

    def _on_frame(self, ev: FrameEvent) -> None:
        if self._stop.is_set() or not self.context.ok():
            return  # shutting down (Ctrl-C invalidates the context before the receive thread stops)
        self.frame_arrival_ns = ev.arrival_ns
        self.frame_decoded_ns = time.perf_counter_ns()
        self.frame_decoded_cpu_ns = time.thread_time_ns()
        age_ns = time.perf_counter_ns() - ev.arrival_ns + int(ev.exposure_age_s * 1e9)
        stamp_ns = max(0, now_ns(self.get_clock()) - age_ns)
        poses = self.poses(ev)
        if self.downstream is not None:  # the whole frame, before any message is built
            self.downstream(stamp_ns, poses)
        stamp = stamp_msg(stamp_ns)
        try:
            for name, (pos, q) in poses:
                msg = PoseStamped()
                msg.header.stamp = stamp
                msg.header.frame_id = self.frame_id
                o = msg.pose.position
                o.x, o.y, o.z = pos
                r = msg.pose.orientation
                r.x, r.y, r.z, r.w = q
                self._pub(name).publish(msg)
            if self.markers_pub is not None:
                self.markers_pub.publish(self._marker_cloud(ev, stamp))
        except Exception:
            # Ctrl-C may shut the context down mid-frame: that is the end, not a bad packet.
            if self.context.ok():
                raise

    def poses(self, ev: FrameEvent) -> list[tuple[str, Pose]]:
        """The frame's bodies in the ROS frame, by topic name; NaN for an untracked one."""
        return [
            (
                name,
                motive_to_ros(b.position, b.orientation, self.up_axis)
                if b.tracking_valid
                else NAN_POSE,
            )
            for b in ev.bodies
            if (name := self.topic_for_id.get(b.id)) is not None
        ]

    def _marker_cloud(self, ev: FrameEvent, stamp) -> PointCloud2:
        """Labeled markers (occluded ones included: Motive still gives their last position, the
        id tells them apart) as an unordered cloud of (x, y, z, id)."""
        pts = []
        for m in ev.frame.labeled_markers:
            p = motive_to_ros(m.position, (0.0, 0.0, 0.0, 1.0), self.up_axis)[0]
            pts.append(_POINT.pack(*p, m.id & 0xFFFFFFFF))
        msg = PointCloud2()
        msg.header.stamp = stamp
        msg.header.frame_id = self.frame_id
        msg.height, msg.width = 1, len(pts)
        msg.fields = [
            PointField(name='x', offset=0, datatype=PointField.FLOAT32, count=1),
            PointField(name='y', offset=4, datatype=PointField.FLOAT32, count=1),
            PointField(name='z', offset=8, datatype=PointField.FLOAT32, count=1),
            PointField(name='id', offset=12, datatype=PointField.UINT32, count=1),
        ]
        msg.is_bigendian = False
        msg.point_step, msg.row_step = _POINT.size, _POINT.size * len(pts)
        msg.data = b''.join(pts)
        msg.is_dense = True
        return msg

    # -- diagnostics ------------------------------------------------------------------------
    def _diagnostics(self) -> None:
        c, st = self.client, self.client.stats
        drops, rej = st.dropped_frames, st.rejected_packets
        new_drops, new_rej = drops - self._prev[0], rej - self._prev[1]
        new_foreign = st.foreign_packets - self._prev_more[0]
        new_implausible = st.implausible_frames - self._prev_more[1]
        new_ts = st.non_monotonic_timestamps - self._prev_more[2]
        if self._stop.is_set():
            level, text = Level.WARN, 'not active (lifecycle): no pose is published'
        elif c.version_error:
            level, text = Level.ERROR, f'cannot decode the stream: {c.version_error}'
        elif c.layout_error:
            level, text = Level.ERROR, f'cannot decode the stream: {c.layout_error}'
        elif self.body_error:
            level, text = Level.ERROR, self.body_error
        elif not c.connected:
            level, text = (
                Level.ERROR,
                (f'no answer from NatNet server {self.server_address}:{self.command_port}'),
            )
        elif c.stream_stopped() and c.implausible_recently():
            level, text = (
                Level.ERROR,
                f'every frame is implausible and dropped: {st.last_implausible_reason}',
            )
        elif c.stream_stopped():
            level, text = (
                Level.ERROR,
                (
                    f'stream stopped: no frame for {c.seconds_since_last_frame():.2f} s '
                    f'(stale_timeout {c.stale_timeout} s)'
                ),
            )
        elif st.untracked_bodies:
            level, text = Level.WARN, f'untracked: {", ".join(st.untracked_bodies)}'
        elif new_drops or new_rej or new_foreign or new_implausible or new_ts:
            parts = [
                f'{n} {what}'
                for n, what in (
                    (new_drops, 'dropped frames'),
                    (new_rej, 'rejected packets'),
                    (new_foreign, f'datagrams from foreign sender {st.last_foreign_sender}'),
                    (new_implausible, 'implausible frames dropped'),
                    (new_ts, 'frames with a backwards timestamp'),
                )
                if n
            ]
            level, text = Level.WARN, ', '.join(parts) + ' since last report'
        else:
            level, text = Level.OK, 'streaming'
        now = time.monotonic()
        if level == self._last_level and now - self._last_diag < 1.0:
            return
        self._last_level, self._last_diag = level, now
        self._prev = (drops, rej, 0)
        self._prev_more = (st.foreign_packets, st.implausible_frames, st.non_monotonic_timestamps)
        info = c.server_info
        kv = {
            'frame_rate_hz': f'{c.frame_rate():.1f}',
            'frames': st.frames,
            'dropped_frames': drops,
            'rejected_packets': rej,
            'last_reject_reason': st.last_reject_reason,
            'out_of_order_frames': st.out_of_order,
            'untracked_bodies': ','.join(st.untracked_bodies),
            'untracked_body_frames': st.untracked_body_frames,
            'exposure_age_ms': f'{st.last_exposure_age_s * 1e3:.3f}',
            'system_latency_ms': f'{st.last_system_latency_s * 1e3:.3f}',
            'software_latency_ms': f'{st.last_software_latency_s * 1e3:.3f}',
            'clock_offset_ticks': ''
            if c.clock_offset_ticks is None
            else f'{c.clock_offset_ticks:.0f}',
            'clock_uncertainty_ms': ''
            if c.clock_uncertainty_s is None
            else f'{c.clock_uncertainty_s * 1e3:.3f}',
            'stream_stopped': str(c.stream_stopped()).lower(),
            'natnet_version': '' if info is None else '.'.join(map(str, info.natnet_version)),
            'server_app': '' if info is None else info.app_name,
            'version_error': c.version_error,
            'decoding_version': '' if c.version is None else P.version_text(c.version),
            'version_negotiation': c.version_note,
            'layout_error': c.layout_error,
            'body_error': self.body_error,
            'streamed_bodies': '' if self.match is None else ', '.join(self.match.streamed),
            'foreign_packets': st.foreign_packets,
            'last_foreign_sender': st.last_foreign_sender,
            'implausible_frames': st.implausible_frames,
            'last_implausible_reason': st.last_implausible_reason,
            'non_monotonic_timestamps': st.non_monotonic_timestamps,
            'frame_number_resets': st.frame_number_resets,
            'frame_number_glitches': st.frame_number_glitches,
            'receive_thread': self.receive_scheduling,
            'discovery': self.discovery,
            'so_busy_poll': (
                'off'
                if c.so_busy_poll_us <= 0
                else (f'refused: {c.so_busy_poll_error}' if c.so_busy_poll_error else 'set')
            ),
        }
        self.diagnostics.publish(level, text, kv)

    def is_receive_thread(self) -> bool:
        thread = self._thread
        return thread is not None and threading.get_ident() == thread.ident

    def stop_receiving(self) -> None:
        """Stop the receive thread (no frame is handled after this returns, unless it hangs)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=2.0)

    def destroy_node(self):
        self._close_sockets()
        return super().destroy_node()


def natnet_bridge() -> NatNetBridge:
    """The node; taken to active here only with `autostart: true` (else by launch/supervisor)."""
    node = NatNetBridge()
    if node.autostart:
        bring_up(node)
    return node


def main(args=None) -> int:
    return run_node(
        natnet_bridge, args, config_hint='Fix config/natnet.yaml or the --ros-args overrides.'
    )


if __name__ == '__main__':
    sys.exit(main())
