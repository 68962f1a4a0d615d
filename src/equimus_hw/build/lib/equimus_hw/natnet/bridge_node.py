"""ROS 2 node ``natnet_bridge``: NatNet rigid bodies -> /mocap/<name>/pose (thin wrapper).

The protocol, clock mapping and health counters live in :mod:`.client` (no ROS). This node only
declares parameters, runs the client's receive loop in a thread, turns frames into
PoseStamped messages and reports on /diagnostics.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import threading
import time
from collections.abc import Callable

from geometry_msgs.msg import PoseStamped
from rclpy.duration import Duration
from rclpy.node import Node

from equimus_description.config import param, validate_fields
from equimus_description.interface import BODIES, DIAGNOSTICS, FRAME_MOCAP, mocap_pose
from equimus_ros.diagnostics import Diagnostics, Level
from equimus_ros.main import run_node
from equimus_ros.params import bind
from equimus_ros.qos import publisher

from .client import FrameEvent, NatNetClient, NatNetConfig

NAN = float('nan')
_S = math.sqrt(0.5)


def y_up_to_z_up(p, q):
    """Motive Y-up -> ROS Z-up: +90 deg about X. (x, y, z) -> (x, -z, y); same for q's vector."""
    return (p[0], -p[2], p[1]), (q[0], -q[2], q[1], q[3])


PoseSink = Callable[[str, PoseStamped], None]


@dataclasses.dataclass(frozen=True)
class BridgeConfig:
    """What the bridge publishes (the connection is NatNetConfig's)."""

    frame_id: str = param(FRAME_MOCAP, 'frame_id of the published poses')
    convert_to_z_up: bool = param(
        False,
        'rotate Motive Y-up into Z-up (+90 deg about X) before '
        "publishing (the graph's topics are in Motive's Y-up frame)",
    )
    rigid_bodies: tuple[str, ...] = param(
        BODIES, "rigid body names to publish; [''] = every body of Motive's model"
    )

    def __post_init__(self) -> None:
        validate_fields(self)


class NatNetBridge(Node):
    """`downstream`, if given, gets every pose in the receive thread before it is published: the
    fused control loop (equimus_bringup.control_loop) chains the estimator there without a DDS
    hop."""

    def __init__(self, downstream: PoseSink | None = None, **kwargs):
        super().__init__('natnet_bridge', **kwargs)
        self.downstream = downstream
        self.frame_arrival_ns = 0  # perf_counter_ns of the datagram being handled

        self.connection = bind(self, NatNetConfig(), apply=self._apply)
        bridge = bind(self, BridgeConfig()).config
        net = self.connection.config
        self.server_address, self.command_port = net.server_address, net.command_port
        self.multicast, self.group = net.multicast, net.multicast_group
        self.data_port = net.data_port
        self.frame_id, self.z_up = bridge.frame_id, bridge.convert_to_z_up
        wanted = [b for b in bridge.rigid_bodies if b]
        self.wanted = set(wanted) if wanted else None

        self.pubs: dict[str, object] = {}
        self.diagnostics = Diagnostics(
            self,
            DIAGNOSTICS,
            'natnet_bridge: stream',
            f'natnet://{self.server_address}:{self.command_port}',
        )
        self.client = NatNetClient(
            net.server_address,
            net.local_address,
            net.command_port,
            net.data_port,
            net.multicast,
            net.multicast_group,
            net.stale_timeout,
            on_frame=self._on_frame,
            on_log=self._log,
        )
        self._stop = threading.Event()
        self._last_diag = 0.0
        self._last_level: Level | None = None
        self._prev = (0, 0, 0)
        self._reject_log_t = 0.0
        self._thread = threading.Thread(target=self._receive, daemon=True, name='natnet-rx')
        self.create_timer(0.1, self._diagnostics)
        self._thread.start()
        mode = f'multicast {self.group}:{self.data_port}' if self.multicast else 'unicast'
        self.get_logger().info(
            f'NatNet bridge: server {self.server_address}:{self.command_port}, {mode}, '
            f'frame {self.frame_id}{" (Z-up)" if self.z_up else " (Motive Y-up)"}'
        )

    def _apply(self, cfg: NatNetConfig) -> None:
        """Runtime: the stale timeout (the receive thread reads it on every check)."""
        self.client.stale_timeout = cfg.stale_timeout

    # -- receive thread ---------------------------------------------------------------------
    def _receive(self) -> None:
        try:
            self.client.open()
        except OSError as e:
            self.get_logger().fatal(
                f'cannot open NatNet sockets ({e}); check local_address/data_port/multicast_group'
            )
            return
        try:
            self.client.run(self._stop)
        finally:
            self.client.close()

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
            pub = publisher(self, PoseStamped, mocap_pose(name))
            self.pubs[name] = pub
        return pub

    def _on_frame(self, ev: FrameEvent) -> None:
        if self._stop.is_set() or not self.context.ok():
            return  # shutting down (Ctrl-C invalidates the context before the receive thread stops)
        self.frame_arrival_ns = ev.arrival_ns
        now = self.get_clock().now()
        age = (time.perf_counter_ns() - ev.arrival_ns) / 1e9 + ev.exposure_age_s
        stamp = (now - Duration(nanoseconds=int(age * 1e9))).to_msg()
        out = []
        for b in ev.bodies:
            if self.wanted is not None and b.name not in self.wanted:
                continue
            msg = PoseStamped()
            msg.header.stamp = stamp
            msg.header.frame_id = self.frame_id
            if b.tracking_valid:
                pos, q = (
                    y_up_to_z_up(b.position, b.orientation)
                    if self.z_up
                    else (b.position, b.orientation)
                )
            else:
                pos, q = (NAN, NAN, NAN), (NAN, NAN, NAN, NAN)
            o = msg.pose.position
            o.x, o.y, o.z = (float(v) for v in pos)
            r = msg.pose.orientation
            r.x, r.y, r.z, r.w = (float(v) for v in q)
            out.append((b.name, msg))
        if self.downstream is not None:  # the whole frame first, then publish
            for name, msg in out:
                self.downstream(name, msg)
        try:
            for name, msg in out:
                self._pub(name).publish(msg)
        except Exception:
            # Ctrl-C may shut the context down mid-frame: that is the end, not a bad packet.
            if self.context.ok():
                raise

    # -- diagnostics ------------------------------------------------------------------------
    def _diagnostics(self) -> None:
        c, st = self.client, self.client.stats
        drops, rej = st.dropped_frames, st.rejected_packets
        new_drops, new_rej = drops - self._prev[0], rej - self._prev[1]
        if c.version_error:
            level, text = Level.ERROR, f'cannot decode the stream: {c.version_error}'
        elif not c.connected:
            level, text = (
                Level.ERROR,
                (f'no answer from NatNet server {self.server_address}:{self.command_port}'),
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
        elif new_drops or new_rej:
            level, text = (
                Level.WARN,
                (f'{new_drops} dropped frames, {new_rej} rejected packets since last report'),
            )
        else:
            level, text = Level.OK, 'streaming'
        now = time.monotonic()
        if level == self._last_level and now - self._last_diag < 1.0:
            return
        self._last_level, self._last_diag = level, now
        self._prev = (drops, rej, 0)
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
            'stream_stopped': str(c.stream_stopped()).lower(),
            'natnet_version': '' if info is None else '.'.join(map(str, info.natnet_version)),
            'server_app': '' if info is None else info.app_name,
            'version_error': c.version_error,
        }
        self.diagnostics.publish(level, text, kv)

    def is_receive_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def stop_receiving(self) -> None:
        """Stop the receive thread (no frame is handled after this returns, unless it hangs)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def destroy_node(self):
        self.stop_receiving()
        return super().destroy_node()


def main(args=None) -> int:
    return run_node(
        NatNetBridge, args, config_hint='Fix config/natnet.yaml or the --ros-args overrides.'
    )


if __name__ == '__main__':
    sys.exit(main())
