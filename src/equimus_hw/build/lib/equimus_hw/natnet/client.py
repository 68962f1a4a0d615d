"""NatNet UDP client (no ROS): handshake, frame reception, health counters, exposure timing.

Time reconstruction (see docs/natnet.md): the server's tick clock is mapped onto this process's
``perf_counter_ns`` by echo request/response (Cristian's algorithm, smallest round trip of the
recent samples). For each frame the client computes ``exposure_age_s`` -- how long before the
datagram arrived the cameras were mid-exposure -- and the caller stamps the pose with
``arrival_time - exposure_age_s`` on its own clock (ROS time in the bridge).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from equimus_description.config import ConfigError, param, validate_fields

from . import protocol as P

KEEPALIVE_PERIOD_S = 1.0
ECHO_PERIOD_S = 1.0
ECHO_WINDOW = 16
RECV_BUFFER = 1 << 20
MODELDEF_RETRY_S = 1.0


class NatNetConnectError(RuntimeError):
    """The server did not answer the handshake."""


@dataclass
class BodyPose:
    id: int
    name: str
    position: tuple[float, float, float]
    orientation: tuple[float, float, float, float]  # x, y, z, w
    tracking_valid: bool
    mean_error: float


@dataclass
class FrameEvent:
    frame: P.Frame
    arrival_ns: int  # perf_counter_ns when the datagram was read
    exposure_age_s: float  # arrival - mid-exposure, in seconds (>= 0)
    stamp_source: str  # 'mid_exposure', 'received+echo' or 'received'
    bodies: list[BodyPose]


@dataclass
class ClientStats:
    frames: int = 0
    dropped_frames: int = 0
    out_of_order: int = 0
    rejected_packets: int = 0
    last_reject_reason: str = ''
    untracked_bodies: list[str] = field(default_factory=list)
    untracked_body_frames: int = 0
    unknown_body_ids: int = 0
    last_frame_number: int | None = None
    last_exposure_age_s: float = float('nan')
    last_system_latency_s: float = float('nan')
    last_software_latency_s: float = float('nan')


@dataclasses.dataclass(frozen=True)
class NatNetConfig:
    """Where the NatNet server is and how its stream arrives (the bridge node's parameters)."""

    server_address: str = param('127.0.0.1', 'Motive host IPv4 address')
    local_address: str = param(
        '127.0.0.1', 'local interface IPv4 address (multicast join + command socket)'
    )
    multicast: bool = param(
        True, 'true: multicast data stream; false: unicast (keep-alives are sent automatically)'
    )
    command_port: int = param(1510, 'server command port (UDP)', range=(1, 65535))
    data_port: int = param(1511, 'data port (UDP)', range=(1, 65535))
    multicast_group: str = param('239.255.42.99', 'multicast group of the data stream')
    stale_timeout: float = param(
        0.5,
        's without frames before the stream counts as stopped (diagnostics ERROR)',
        range=(0.01, 60.0),
        runtime=True,
    )

    def __post_init__(self) -> None:
        validate_fields(self)
        for name in ('server_address', 'local_address', 'multicast_group'):
            try:
                socket.inet_aton(getattr(self, name))
            except OSError:
                raise ConfigError(f'{name}={getattr(self, name)!r}: not an IPv4 address') from None


_D = NatNetConfig()


class NatNetClient:
    """One connection to a NatNet server. Thread use: call :meth:`run` in one thread only."""

    def __init__(
        self,
        server_address: str = _D.server_address,
        local_address: str = _D.local_address,
        command_port: int = _D.command_port,
        data_port: int = _D.data_port,
        multicast: bool = _D.multicast,
        multicast_group: str = _D.multicast_group,
        stale_timeout: float = _D.stale_timeout,
        on_frame: Callable[[FrameEvent], None] | None = None,
        on_log: Callable[[str, str], None] | None = None,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
    ):
        self.server = (server_address, int(command_port))
        self.local_address = local_address
        self.data_port = int(data_port)
        self.multicast = bool(multicast)
        self.group = multicast_group
        self.stale_timeout = float(stale_timeout)
        self.on_frame = on_frame
        self._user_log = on_log
        self.clock_ns = clock_ns
        self.server_info: P.ServerInfo | None = None
        self.version: P.Version | None = None
        self.version_error: str = ''
        self.model: P.ModelDefinitions | None = None
        self.names: dict[int, str] = {}
        self.stats = ClientStats()
        self._lock = threading.Lock()
        self._echo: collections.deque[tuple[int, float]] = collections.deque(maxlen=ECHO_WINDOW)
        self._arrivals: collections.deque[tuple[int, int]] = collections.deque(maxlen=1024)
        self._last_keepalive = 0
        self._last_echo = 0
        self._last_modeldef_req = 0
        self._last_reconnect = 0
        self._connected_ns: int | None = None
        self.cmd_sock: socket.socket | None = None
        self.data_sock: socket.socket | None = None

    def on_log(self, level: str, msg: str) -> None:
        """Forward to the user's logger; a failing logger must not break reception."""
        if self._user_log is not None:
            with contextlib.suppress(Exception):
                self._user_log(level, msg)

    # -- sockets ------------------------------------------------------------------------------
    def open(self) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)
        s.bind((self.local_address, 0))
        s.setblocking(False)
        self.cmd_sock = s
        if self.multicast:
            d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            d.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            d.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)
            # Bound to the group address, so only this group's datagrams arrive here.
            d.bind((self.group, self.data_port))
            d.setsockopt(
                socket.IPPROTO_IP,
                socket.IP_ADD_MEMBERSHIP,
                socket.inet_aton(self.group) + socket.inet_aton(self.local_address),
            )
            d.setblocking(False)
            self.data_sock = d

    def close(self) -> None:
        if self.cmd_sock is not None and self._connected_ns is not None and not self.multicast:
            with contextlib.suppress(OSError):
                self.cmd_sock.sendto(P.packet(P.MessageId.DISCONNECT), self.server)
        for s in (self.cmd_sock, self.data_sock):
            if s is not None:
                s.close()
        self.cmd_sock = self.data_sock = None

    def send(self, msg: P.Message) -> None:
        if self.cmd_sock is None:
            raise RuntimeError('NatNet client is not open: call open() or connect() first')
        self.cmd_sock.sendto(P.encode_message(msg, self.version), self.server)

    # -- handshake ----------------------------------------------------------------------------
    def connect(self, timeout: float = 2.0) -> P.ServerInfo:
        """CONNECT -> SERVERINFO, then model definitions and a first clock sync."""
        if self.cmd_sock is None:
            self.open()
        self.server_info = None
        deadline = time.monotonic() + timeout
        next_send = 0.0
        while self.server_info is None:
            now = time.monotonic()
            if now > deadline:
                raise NatNetConnectError(
                    f'no NatNet server info from {self.server[0]}:{self.server[1]} within '
                    f'{timeout:.1f} s: is Motive (or natnet_emulator) running and streaming '
                    'with this command port?'
                )
            if now >= next_send:
                self.send(
                    P.ConnectRequest('NatNetLib', (4, 1, 0, 0), (4, 1, 0, 0), False, (0, 0, 0, 0))
                )
                next_send = now + 0.25
            self.poll(0.05)
        self._connected_ns = self.clock_ns()
        self.request_modeldef()
        for _ in range(5):
            self.send_echo()
            self.poll(0.02)
        end = time.monotonic() + min(timeout, 0.5)
        while self.model is None and not self.version_error and time.monotonic() < end:
            self.poll(0.02)
        return self.server_info

    def request_modeldef(self) -> None:
        self._last_modeldef_req = self.clock_ns()
        self.send(P.Empty(P.MessageId.REQUEST_MODELDEF))

    def send_echo(self) -> None:
        self._last_echo = self.clock_ns()
        self.send(P.EchoRequest(self._last_echo))

    # -- clock mapping ------------------------------------------------------------------------
    @property
    def clock_offset_ticks(self) -> float | None:
        """server_ticks - client_ns * clock_hz / 1e9, from the smallest-RTT recent echo."""
        with self._lock:
            if not self._echo:
                return None
            return min(self._echo)[1]

    def server_ticks_at(self, client_ns: int) -> float | None:
        off = self.clock_offset_ticks
        info = self.server_info
        if off is None or info is None or not info.clock_hz:
            return None
        return client_ns * info.clock_hz / 1e9 + off

    def _on_echo(self, msg: P.EchoResponse, arrival_ns: int) -> None:
        if not self.server_info or not self.server_info.clock_hz:
            return
        rtt = arrival_ns - msg.client_time
        if rtt < 0 or rtt > 1e9:
            return  # not one of ours, or far too old to be useful
        mid = (msg.client_time + arrival_ns) / 2
        offset = msg.server_ticks - mid * self.server_info.clock_hz / 1e9
        with self._lock:
            self._echo.append((rtt, offset))

    # -- receive ------------------------------------------------------------------------------
    def poll(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for datagrams and handle all that are ready; housekeeping."""
        socks = [s for s in (self.cmd_sock, self.data_sock) if s is not None]
        try:
            ready, _, _ = select.select(socks, [], [], timeout)
        except (OSError, ValueError):
            return
        for s in ready:
            for _ in range(256):
                try:
                    data, addr = s.recvfrom(65536)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as e:  # e.g. ICMP port unreachable surfaced on the socket
                    self.on_log('debug', f'receive error: {e}')
                    break
                self.handle_datagram(data, self.clock_ns())
        self._housekeeping()

    def _housekeeping(self) -> None:
        if self._connected_ns is None or self.cmd_sock is None:
            return
        now = self.clock_ns()
        try:
            if not self.multicast and now - self._last_keepalive > KEEPALIVE_PERIOD_S * 1e9:
                self._last_keepalive = now
                self.send(P.Empty(P.MessageId.KEEPALIVE))
            if now - self._last_echo > ECHO_PERIOD_S * 1e9:
                self.send_echo()
            if self.model is None and now - self._last_modeldef_req > MODELDEF_RETRY_S * 1e9:
                self.request_modeldef()
        except OSError as e:
            self.on_log('warn', f'cannot send to the NatNet server: {e}')

    def reject(self, reason: str) -> None:
        self.stats.rejected_packets += 1
        self.stats.last_reject_reason = reason
        self.on_log('warn', f'rejected NatNet packet #{self.stats.rejected_packets}: {reason}')

    def handle_datagram(self, data: bytes, arrival_ns: int) -> FrameEvent | None:
        """Decode and account one datagram. Never raises: bad input is counted as rejected."""
        try:
            msg = P.decode_message(data, self.version)
        except P.NatNetDecodeError as e:
            if self.version_error:
                self.reject(self.version_error)
            else:
                self.reject(e.reason)
            return None
        except Exception as e:  # noqa: BLE001 - a decoder bug must not kill the receive loop
            self.reject(f'internal decoder error {type(e).__name__}: {e}')
            return None
        try:
            return self._dispatch(msg, arrival_ns)
        except Exception as e:  # noqa: BLE001 - same: count, log, carry on
            self.reject(f'error handling {type(msg).__name__}: {type(e).__name__}: {e}')
            return None

    def _dispatch(self, msg: P.Message, arrival_ns: int) -> FrameEvent | None:
        if isinstance(msg, P.Frame):
            return self._on_frame(msg, arrival_ns)
        if isinstance(msg, P.ServerInfo):
            self.server_info = msg
            v = P.parse_version(msg.natnet_version)
            try:
                self.version = P.check_version(v)
                self.version_error = ''
            except P.NatNetDecodeError as e:
                self.version = None
                self.version_error = e.reason
                self.on_log('error', e.reason)
            if msg.clock_hz is None:
                self.version_error = self.version_error or 'server info without clock (pre-3.0)'
        elif isinstance(msg, P.ModelDefinitions):
            self.model = msg
            self.names = {d.id: d.name for d in msg.rigid_bodies()}
        elif isinstance(msg, P.EchoResponse):
            self._on_echo(msg, arrival_ns)
        elif isinstance(msg, P.MessageString):
            self.on_log('info', f'server: {msg.text}')
        return None

    def _on_frame(self, f: P.Frame, arrival_ns: int) -> FrameEvent | None:
        st = self.stats
        last = st.last_frame_number
        if last is not None:
            if f.frame_number <= last and last - f.frame_number < 1000:
                st.out_of_order += 1
                return None
            if f.frame_number > last + 1:
                st.dropped_frames += f.frame_number - last - 1
        st.last_frame_number = f.frame_number
        st.frames += 1
        self._arrivals.append((arrival_ns, f.stamp_transmit))
        unknown_model = f.models_changed or any(b.id not in self.names for b in f.rigid_bodies)
        if unknown_model and self.clock_ns() - self._last_modeldef_req > MODELDEF_RETRY_S * 1e9:
            self.request_modeldef()
        age, source = self.exposure_age(f, arrival_ns)
        bodies = []
        untracked = []
        for b in f.rigid_bodies:
            name = self.names.get(b.id)
            if name is None:
                st.unknown_body_ids += 1
                continue
            if not b.tracking_valid:
                untracked.append(name)
            bodies.append(
                BodyPose(b.id, name, b.position, b.orientation, b.tracking_valid, b.mean_error)
            )
        st.untracked_bodies = untracked
        if untracked:
            st.untracked_body_frames += 1
        ev = FrameEvent(f, arrival_ns, age, source, bodies)
        if self.on_frame is not None:
            self.on_frame(ev)
        return ev

    def exposure_age(self, f: P.Frame, arrival_ns: int) -> tuple[float, str]:
        """Seconds between mid-exposure and arrival (see module docstring and docs/natnet.md)."""
        hz = self.server_info.clock_hz if self.server_info and self.server_info.clock_hz else None
        st = self.stats
        if hz is None:
            return 0.0, 'arrival'
        st.last_software_latency_s = (f.stamp_transmit - f.stamp_data_received) / hz
        st.last_system_latency_s = (
            (f.stamp_transmit - f.stamp_mid_exposure) / hz if f.stamp_mid_exposure else float('nan')
        )
        now_ticks = self.server_ticks_at(arrival_ns)
        if f.stamp_mid_exposure:
            if now_ticks is not None:
                age, src = (now_ticks - f.stamp_mid_exposure) / hz, 'mid_exposure'
            else:
                age, src = st.last_system_latency_s, 'mid_exposure-transit'
        elif now_ticks is not None:
            age, src = (now_ticks - f.stamp_data_received) / hz, 'received+echo'
        else:
            age, src = st.last_software_latency_s, 'received'
        age = min(max(age, 0.0), 1.0)
        st.last_exposure_age_s = age
        return age, src

    # -- health -------------------------------------------------------------------------------
    def frame_rate(self, window_s: float = 1.0) -> float:
        """Frames received per second over the last ``window_s`` of arrivals, measured on the
        server's transmit clock so that client-side scheduling bursts do not distort it; 0 when
        the stream has stopped."""
        now = self.clock_ns()
        since = now - int(window_s * 1e9)
        # deque.copy() is one C call under the GIL, so the receive thread cannot append mid-copy;
        # iterating the live deque here once killed the bridge ("deque mutated during iteration").
        recent = [(a, t) for a, t in self._arrivals.copy() if a >= since]
        if len(recent) < 2 or now - recent[-1][0] > self.stale_timeout * 1e9:
            return 0.0
        hz = self.server_info.clock_hz if self.server_info and self.server_info.clock_hz else 1e9
        span = (recent[-1][1] - recent[0][1]) / hz
        return (len(recent) - 1) / span if span > 0 else 0.0

    def seconds_since_last_frame(self) -> float | None:
        ref: int | None
        try:
            ref = self._arrivals[-1][0]
        except IndexError:
            ref = self._connected_ns
        return None if ref is None else (self.clock_ns() - ref) / 1e9

    def stream_stopped(self) -> bool:
        s = self.seconds_since_last_frame()
        return s is None or s > self.stale_timeout

    @property
    def connected(self) -> bool:
        return self._connected_ns is not None

    def run(
        self, stop: threading.Event, connect_timeout: float = 2.0, retry_period: float = 1.0
    ) -> None:
        """Receive loop for a thread: (re)connects as needed, never raises on bad packets."""
        while not stop.is_set():
            if self._connected_ns is None:
                try:
                    info = self.connect(connect_timeout)
                    self.on_log(
                        'info',
                        f'connected to {info.app_name} '
                        f'{".".join(map(str, info.app_version))}, NatNet '
                        f'{".".join(map(str, info.natnet_version))}',
                    )
                except NatNetConnectError as e:
                    self.on_log('warn', str(e))
                    stop.wait(retry_period)
                    continue
                except OSError as e:
                    self.on_log('error', f'socket error while connecting: {e}')
                    stop.wait(retry_period)
                    continue
            self.poll(0.05)
            # A long-stopped stream may mean the server restarted: re-handshake (cheap, unicast
            # re-registers the client; multicast just refreshes server info).
            since = self.seconds_since_last_frame()
            now = self.clock_ns()
            if (
                since is not None
                and since > max(5 * self.stale_timeout, 2.0)
                and now - self._last_reconnect > retry_period * 1e9
            ):
                self._last_reconnect = now
                with contextlib.suppress(OSError):
                    self.send(
                        P.ConnectRequest(
                            'NatNetLib', (4, 1, 0, 0), (4, 1, 0, 0), False, (0, 0, 0, 0)
                        )
                    )
