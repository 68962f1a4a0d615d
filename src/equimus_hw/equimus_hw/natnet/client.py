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
import ipaddress
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from equimus_description.config import ConfigError, param, validate_fields

from . import protocol as P
from .checks import Plausibility, implausible_reason

KEEPALIVE_PERIOD_S = 1.0
ECHO_PERIOD_S = 1.0
ECHO_WINDOW = 16
#: While no echo of the window came back within ECHO_GOOD_RTT_S (a busy machine, or just
#: connected), echoes go out every ECHO_FAST_PERIOD_S: the clock mapping is only as good as its
#: best round trip (50-100 ms seen at startup with both cores busy).
ECHO_GOOD_RTT_S = 0.002
ECHO_FAST_PERIOD_S = 0.1
RECV_BUFFER = 1 << 20
MODELDEF_RETRY_S = 1.0
#: Frames held while the model definitions are still unknown (so the first frames are published).
PENDING_FRAMES = 240
#: Frame datagrams rejected in a row, with none accepted, before the layout counts as mismatched.
MISMATCH_AFTER = 10
COMMAND_REPLY_TIMEOUT_S = 0.5
#: socket.SO_BUSY_POLL (Linux); Python's socket module does not export it.
SO_BUSY_POLL = getattr(socket, 'SO_BUSY_POLL', 46)
#: busy_poll: a frame this late (s) means the stream has stopped; sleep in select until it resumes.
BUSY_POLL_LATE_S = 0.1
#: Frames behind next_frame_ns (a quarter of a second at 120 Hz).
NEXT_FRAME_WINDOW = 32
# A frame number at most this far behind the last one, or sent (server's transmit stamp) before
# it, is a late datagram (UDP reordering) and is discarded; further back, or a run of this many
# behind, is a new sequence (a looped or scrubbed take, a restarted server): taken, counted and
# reported.
REORDER_WINDOW = 8
LOG_PERIOD_S = 1.0  # at most one line a second of each kind a stream can repeat (_log_limited)


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
    foreign_packets: int = 0
    last_foreign_sender: str = ''
    implausible_frames: int = 0
    last_implausible_reason: str = ''
    non_monotonic_timestamps: int = 0
    frame_number_resets: int = 0
    # One frame whose number was off (corrupt) while its neighbours followed each other.
    frame_number_glitches: int = 0
    last_frame_number: int | None = None
    last_stamp_transmit: int = 0
    last_timestamp: float | None = None
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
    bitstream_version: str = param(
        P.version_text(P.NEWEST_VERSION),
        "NatNet version to request from Motive in unicast ('' = use the server's); "
        'multicast streams cannot be switched per client',
    )
    allowed_senders: tuple[str, ...] = param(
        ('',),
        'IPv4 addresses accepted as NatNet senders besides server_address (e.g. a second NIC '
        "of the Motive host); [''] = none. Datagrams from other senders are dropped and counted",
    )
    quaternion_norm_tolerance: float = param(
        1e-3,
        'a tracked body whose |q| differs from 1 by more than this makes the frame implausible '
        '(dropped, counted)',
        range=(1e-7, 0.5),
    )
    workspace_min: tuple[float, ...] = param(
        (-10.0, -10.0, -10.0),
        'm, Motive frame: lower x, y, z corner of the capture volume; a tracked body outside '
        'makes the frame implausible',
    )
    workspace_max: tuple[float, ...] = param(
        (10.0, 10.0, 10.0), 'm, Motive frame: upper x, y, z corner of the capture volume'
    )
    busy_poll_window: float = param(
        0.0,
        's before each expected frame during which the receive thread polls its sockets without '
        'sleeping (no wake-up from an idle CPU when the datagram lands); 0 = sleep in select '
        'until a datagram arrives; at least the frame period = poll all the time (one core '
        'busy)',
        range=(0.0, 1.0),
    )
    so_busy_poll_us: int = param(
        0,
        'SO_BUSY_POLL on the sockets: us the kernel polls the device queue in a blocking '
        'receive (needs a NAPI network driver, so not loopback; above net.core.busy_read it '
        'needs CAP_NET_ADMIN, and a refusal is logged); 0 = off',
        range=(0, 100000),
    )
    receive_priority: int = param(
        0,
        'SCHED_FIFO priority (1-98) of the receive thread (in the fused control loop it runs '
        'the chain to the serial write); 0 = normal scheduling; if refused (EPERM: needs '
        'CAP_SYS_NICE or `ulimit -r`) it is logged and normal scheduling kept',
        range=(0, 98),
    )
    receive_cpu: int = param(
        -1,
        'CPU the receive thread is pinned to (its own core, e.g. with busy_poll_window); -1 = any',
        range=(-1, 1023),
    )

    def __post_init__(self) -> None:
        validate_fields(self)
        addresses = [(n, getattr(self, n)) for n in ('server_address', 'local_address')]
        addresses += [('multicast_group', self.multicast_group)]
        addresses += [('allowed_senders', a) for a in self.allowed_senders if a]
        for name, value in addresses:
            try:
                socket.inet_aton(value)
            except OSError:
                raise ConfigError(f'{name}={value!r}: not an IPv4 address') from None
        if self.multicast and not ipaddress.IPv4Address(self.multicast_group).is_multicast:
            raise ConfigError(
                f'multicast_group={self.multicast_group!r}: not a multicast address '
                "(224.0.0.0-239.255.255.255; Motive's default is 239.255.42.99)"
            )
        if self.bitstream_version:
            try:
                P.check_version(P.parse_version(self.bitstream_version))
            except (ValueError, P.NatNetDecodeError):
                raise ConfigError(
                    f'bitstream_version={self.bitstream_version!r}: not one of '
                    f"{P.SUPPORTED_TEXT} (or '' for the server's)"
                ) from None
        for name in ('workspace_min', 'workspace_max'):
            if len(getattr(self, name)) != 3:
                raise ConfigError(f'{name} must have 3 values (x, y, z in m)')
        if any(lo >= hi for lo, hi in zip(self.workspace_min, self.workspace_max, strict=True)):
            raise ConfigError(
                f'workspace_min {list(self.workspace_min)} must be below workspace_max '
                f'{list(self.workspace_max)} on every axis'
            )

    def plausibility(self) -> Plausibility:
        lo, hi = self.workspace_min, self.workspace_max
        return Plausibility(
            self.quaternion_norm_tolerance, (lo[0], lo[1], lo[2]), (hi[0], hi[1], hi[2])
        )


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
        *,
        bitstream_version: str = '',
        allowed_senders: tuple[str, ...] = (),
        plausibility: Plausibility | None = None,
        on_model: Callable[[P.ModelDefinitions], None] | None = None,
        busy_poll_window: float = 0.0,
        so_busy_poll_us: int = 0,
    ):
        self.server = (server_address, int(command_port))
        # Only these hosts are heard (issue 18): a second Motive or a spoofed datagram on the lab
        # network must not become joint angles.
        self.allowed_hosts = {server_address, *(a for a in allowed_senders if a)}
        self.preferred = P.parse_version(bitstream_version) if bitstream_version else None
        self.plausibility = plausibility or Plausibility()
        self.on_model = on_model
        #: Called with (datagram, arrival_ns, channel 0 command / 1 data) for every datagram from
        #: the server, before decoding (``equimus natnet record``).
        self.raw_sink: Callable[[bytes, int, int], None] | None = None
        self.layout_error = ''  # frames do not match the negotiated/announced version
        self.version_note = ''  # what negotiation did (for diagnostics)
        self._frame_rejects_in_row = 0
        self._negotiated: P.Version | None = None
        self._last_implausible_ns: int | None = None
        self._renegotiate = False
        self._responses: collections.deque[P.Message] = collections.deque(maxlen=8)
        self._pending: collections.deque[tuple[P.Frame, int]] = collections.deque(
            maxlen=PENDING_FRAMES
        )
        # Frame datagrams that arrive before the version is settled (multicast frames can beat
        # SERVERINFO; unicast ones the bitstream request): decoded once it is.
        self._pending_raw: collections.deque[tuple[bytes, int]] = collections.deque(
            maxlen=PENDING_FRAMES
        )
        self._negotiating = False
        self._frames: P.FrameReader | None = None  # see _frame_reader
        self.local_address = local_address
        self.data_port = int(data_port)
        self.multicast = bool(multicast)
        self.group = multicast_group
        self.stale_timeout = float(stale_timeout)
        self.on_frame = on_frame
        self._user_log = on_log
        self.clock_ns = clock_ns
        #: this thread's CPU time (ns) when the datagram being handled was read
        self.arrival_cpu_ns = 0
        self.server_info: P.ServerInfo | None = None
        self.version: P.Version | None = None
        self.version_error: str = ''
        self.model: P.ModelDefinitions | None = None
        self.names: dict[int, str] = {}
        self.stats = ClientStats()
        # The frame number before the last discontinuity (a jump forward or back), while the
        # frame after it has not come: that frame tells a corrupt number from a new sequence.
        self._anchor: int | None = None
        self._behind_in_row = 0
        self._limited: dict[str, tuple[int | None, int]] = {}
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
        #: s before an expected frame to poll without sleeping (see NatNetConfig); 0 = off.
        self.busy_poll_window = float(busy_poll_window)
        self.so_busy_poll_us = int(so_busy_poll_us)
        self.so_busy_poll_error = ''  # why SO_BUSY_POLL was refused, if it was
        #: Called in the receive thread with the last frame's datagram once before each
        #: expected frame, ``rehearse_lead_s`` ahead of it, while the thread would sleep (see
        #: `_select`): the fused loop runs its chain's code on spare objects there, so the next
        #: frame finds that code in the caches. None or a lead of 0: off.
        self.rehearse: Callable[[bytes], None] | None = None
        self.rehearse_lead_s = 0.0
        self.last_frame_datagram: bytes | None = None
        self.rehearsals = 0
        #: rehearsals still running at the next frame's earliest arrival (it may have waited)
        self.rehearsals_overran = 0
        self.rehearse_error = ''  # why rehearsals stopped, if one raised
        self._rehearsed_for: int | None = None

    @classmethod
    def from_config(cls, cfg: NatNetConfig, **overrides: Any) -> NatNetClient:
        """A client connecting as `cfg` says (the bridge's parameters), callbacks and any
        setting given by keyword: the one place a configuration becomes a client."""
        settings: dict[str, Any] = {
            'server_address': cfg.server_address,
            'local_address': cfg.local_address,
            'command_port': cfg.command_port,
            'data_port': cfg.data_port,
            'multicast': cfg.multicast,
            'multicast_group': cfg.multicast_group,
            'stale_timeout': cfg.stale_timeout,
            'bitstream_version': cfg.bitstream_version,
            'allowed_senders': cfg.allowed_senders,
            'plausibility': cfg.plausibility(),
            'busy_poll_window': cfg.busy_poll_window,
            'so_busy_poll_us': cfg.so_busy_poll_us,
        }
        return cls(**{**settings, **overrides})

    def spare(self) -> NatNetClient:
        """A client without sockets that decodes and accounts frames as this one does now (its
        version, model and plausibility limits), silently: a rehearsal decodes on it and
        touches nothing of this client."""
        c = NatNetClient(self.server[0], plausibility=self.plausibility, clock_ns=self.clock_ns)
        c.server_info, c.version, c.model = self.server_info, self.version, self.model
        c.names = dict(self.names)
        return c

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
        if self.so_busy_poll_us > 0:
            self._set_busy_poll()

    def _set_busy_poll(self) -> None:
        for sock in (self.cmd_sock, self.data_sock):
            if sock is None:
                continue
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_BUSY_POLL, self.so_busy_poll_us)
            except OSError as e:
                self.so_busy_poll_error = f'{e.strerror or e} (errno {e.errno})'
                self.on_log(
                    'warn',
                    f'so_busy_poll_us={self.so_busy_poll_us} refused: {self.so_busy_poll_error}; '
                    'it needs CAP_NET_ADMIN above net.core.busy_read. Receiving without it',
                )
                return

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
                self.send(self._connect_request())
                next_send = now + 0.25
            self.poll(0.05)
        self._connected_ns = self.clock_ns()
        self._negotiating = True
        try:
            self.negotiate()
        finally:
            self._negotiating = False
        self._flush_raw()
        self.request_modeldef()
        for _ in range(5):
            self.send_echo()
            self.poll(0.02)
        end = time.monotonic() + min(timeout, 0.5)
        while self.model is None and not self.version_error and time.monotonic() < end:
            self.poll(0.02)
        return self.server_info

    def _connect_request(self) -> P.ConnectRequest:
        # SDK 4.x connection options: the bitstream wanted (all zero = the server's default).
        want = (*self.preferred, 0, 0) if self.preferred and not self.multicast else (0, 0, 0, 0)
        return P.ConnectRequest('NatNetLib', (4, 3, 0, 0), (4, 3, 0, 0), False, want)

    def command(self, text: str, timeout: float = COMMAND_REPLY_TIMEOUT_S) -> P.Message | None:
        """Send a NAT_REQUEST and wait for its reply (NAT_RESPONSE or UNRECOGNIZED_REQUEST)."""
        self._responses.clear()
        self.send(P.Request(text))
        end = time.monotonic() + timeout
        while not self._responses and time.monotonic() < end:
            self.poll(0.02)
        return self._responses.popleft() if self._responses else None

    def negotiate(self) -> None:
        """Unicast: ask for the preferred bitstream and confirm it (SDK: `Bitstream,X.Y`, then the
        query `Bitstream` answers `Bitstream,X.Y[.Z]`). Sets ``version`` or ``version_error``."""
        info = self.server_info
        if info is None:
            return
        announced = P.parse_version(info.natnet_version)
        want = self.preferred
        self.version_note = ''
        if want is None or announced == want or info.clock_hz is None:
            return
        if self.multicast:
            self.version_note = (
                f'server streams {P.version_text(announced)}; {P.version_text(want)} can only be '
                'requested in unicast'
            )
            return
        if announced[0] < 4:
            self.version_note = f'NatNet {P.version_text(announced)} servers cannot switch'
            return
        reply = self.command(f'Bitstream,{P.version_text(want)}')
        accepted = isinstance(reply, P.Response) and reply.is_numeric and reply.as_int() == 0
        if accepted:
            self.version, self.version_error = want, ''
            self.version_note = f'requested NatNet {P.version_text(want)}, accepted; confirming'
            query = self.command('Bitstream')
            confirmed = want
            if isinstance(query, P.Response) and query.text.startswith('Bitstream,'):
                with contextlib.suppress(ValueError):
                    confirmed = P.parse_version(query.text.split(',', 1)[1])
            try:
                self.version = P.check_version(confirmed)
            except P.NatNetDecodeError as e:
                self.version, self.version_error = None, e.reason
                return
            self._negotiated = self.version
            self.version_note = (
                f'requested NatNet {P.version_text(want)}, server confirmed '
                f'{P.version_text(confirmed)} (announced {P.version_text(announced)})'
            )
            self.on_log('info', self.version_note)
            return
        answer = (
            'no answer'
            if reply is None
            else f'answer {reply.as_int()}'
            if isinstance(reply, P.Response) and reply.is_numeric
            else 'unrecognized request'
            if isinstance(reply, P.Empty)
            else f'answer {reply!r}'
        )
        self.version_note = f'server refused Bitstream,{P.version_text(want)} ({answer})'
        if self.version is None:
            self.version_error = (
                f'Motive streams NatNet {P.version_text(announced)}, which this bridge cannot '
                f'decode, and refused to switch to {P.version_text(want)} ({answer}). In Motive, '
                "set the streaming pane's bitstream (NatNet) version to one of "
                f'{P.SUPPORTED_TEXT}, or update equimus'
            )
            self.on_log('error', self.version_error)
        else:
            self.on_log('warn', f'{self.version_note}; decoding NatNet {P.version_text(announced)}')

    def request_modeldef(self) -> None:
        self._last_modeldef_req = self.clock_ns()
        self.send(P.Empty(P.MessageId.REQUEST_MODELDEF))

    def send_echo(self) -> None:
        self._last_echo = self.clock_ns()
        self.send(P.EchoRequest(self._last_echo))

    # -- clock mapping ------------------------------------------------------------------------
    def _best_echo(self) -> tuple[int, float] | None:
        """(round trip ns, offset ticks) of the smallest-RTT recent echo: the one mapped with."""
        with self._lock:
            return min(self._echo) if self._echo else None

    @property
    def clock_offset_ticks(self) -> float | None:
        """server_ticks - client_ns * clock_hz / 1e9, from the smallest-RTT recent echo."""
        best = self._best_echo()
        return None if best is None else best[1]

    @property
    def clock_uncertainty_s(self) -> float | None:
        """The most the clock mapping can be off: half the round trip of the echo it uses (the
        server read its clock somewhere within that round trip)."""
        best = self._best_echo()
        return None if best is None else best[0] / 2e9

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
            ready = self._select(socks, timeout)
        except (OSError, ValueError):
            return
        for s in ready:
            self._read_all(s)
        self._housekeeping()

    def _select(self, socks: list[socket.socket], timeout: float) -> list[socket.socket]:
        """select() for reading, up to `timeout` s; when a rehearsal falls due in that time
        and nothing has arrived by then, it runs first and the wait goes on after it."""
        due = self._rehearsal_due()
        if due is not None:
            at, expected = due
            now = self.clock_ns()
            end = now + int(timeout * 1e9)
            if at < end:
                if at > now:
                    ready, _, _ = select.select(socks, [], [], (at - now) * 1e-9)
                    if ready:
                        return ready
                self._rehearse_now(expected)
                timeout = max(0.0, (end - self.clock_ns()) * 1e-9)
        ready, _, _ = select.select(socks, [], [], timeout)
        return ready

    def datagram_waiting(self) -> bool:
        """Whether a datagram waits on a socket (a rehearsal stops for it between stages)."""
        socks = [s for s in (self.cmd_sock, self.data_sock) if s is not None]
        try:
            return bool(socks) and bool(select.select(socks, [], [], 0)[0])
        except (OSError, ValueError):
            return False

    def _rehearsal_due(self) -> tuple[int, int] | None:
        """When (clock_ns) to rehearse before the expected frame, and that frame's expected
        time; None: not before this one (off, no frame yet, rehearsed already, or the frame is
        due now)."""
        if self.rehearse is None or self.rehearse_lead_s <= 0 or self.last_frame_datagram is None:
            return None
        expected = self.next_frame_ns()
        if expected is None or expected == self._rehearsed_for:
            return None
        if self.clock_ns() >= expected:  # late or lost: a rehearsal now could hold it up
            return None
        return expected - int(self.rehearse_lead_s * 1e9), expected

    def _rehearse_now(self, expected: int) -> None:
        self._rehearsed_for = expected
        rehearse, data = self.rehearse, self.last_frame_datagram
        if rehearse is None or data is None:
            return
        try:
            rehearse(data)
        except Exception as e:  # noqa: BLE001 - a rehearsal must never stop reception
            self.rehearse = None
            self.rehearse_error = f'{type(e).__name__}: {e}'
            self.on_log('error', f'rehearsals stopped (frames go on): {self.rehearse_error}')
            return
        self.rehearsals += 1
        if self.clock_ns() > expected:
            self.rehearsals_overran += 1

    def _read_all(self, s: socket.socket) -> int:
        """Handle every datagram waiting on the non-blocking socket ``s``; how many."""
        n = 0
        for _ in range(256):
            try:
                data, addr = s.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:  # e.g. ICMP port unreachable surfaced on the socket
                self.on_log('debug', f'receive error: {e}')
                break
            now = self.clock_ns()
            self.arrival_cpu_ns = time.thread_time_ns()
            if self.raw_sink is not None and addr[0] in self.allowed_hosts:
                self.raw_sink(data, now, 1 if s is self.data_sock else 0)
            self.handle_datagram(data, now, addr)
            n += 1
        return n

    def next_frame_ns(self) -> int | None:
        """The earliest time (clock_ns) the next frame can arrive: the last one's transmit time
        on the server's clock plus the mean transmit interval of the recent frames (the server's
        clock, unlike the arrivals, is not bunched by this machine's scheduling), plus their
        shortest transit. None before two frames."""
        recent = list(self._arrivals)[-NEXT_FRAME_WINDOW:]  # (arrival_ns, transmit ticks)
        if len(recent) < 2:
            return None
        hz = self.server_info.clock_hz if self.server_info and self.server_info.clock_hz else 0
        if not hz:  # no server clock: from the arrivals alone
            return recent[-1][0] + (recent[-1][0] - recent[0][0]) // (len(recent) - 1)
        ns_per_tick = 1e9 / hz
        period = (recent[-1][1] - recent[0][1]) / (len(recent) - 1)
        transit = min(a - t * ns_per_tick for a, t in recent)
        return int((recent[-1][1] + period) * ns_per_tick + transit)

    def busy_poll(self, timeout: float) -> None:
        """`poll`, but the last ``busy_poll_window`` s before the next expected frame are spent
        asking the sockets (non-blocking) instead of sleeping in the kernel, so the datagram is
        read as it lands, by a thread already on a CPU. Returns after a datagram or ``timeout``
        s; before the window opens it sleeps in select (a datagram wakes it early)."""
        socks = [s for s in (self.cmd_sock, self.data_sock) if s is not None]
        if not socks:
            time.sleep(timeout)
            return
        now = self.clock_ns()
        end = now + int(timeout * 1e9)
        expected = self.next_frame_ns()
        if expected is None or now - expected > BUSY_POLL_LATE_S * 1e9:
            self.poll(timeout)  # no stream (yet, or any more): nothing to wait for awake
            return
        spin_from = expected - int(self.busy_poll_window * 1e9)
        if spin_from > now:
            try:
                ready = self._select(socks, (min(spin_from, end) - now) / 1e9)
            except (OSError, ValueError):
                return
            if ready:
                for s in ready:
                    self._read_all(s)
                self._housekeeping()
                return
        due = self._rehearsal_due()
        while True:
            got = 0
            for s in socks:
                got += self._read_all(s)
            if got:
                break
            now = self.clock_ns()
            if now >= end:
                break
            if due is not None and now >= due[0]:
                self._rehearse_now(due[1])
                due = None
        self._housekeeping()

    def _flush_raw(self) -> None:
        while self._pending_raw and not self._negotiating and (self.version or self.version_error):
            self.handle_datagram(*self._pending_raw.popleft())

    def _housekeeping(self) -> None:
        if self._connected_ns is None or self.cmd_sock is None:
            return
        self._flush_raw()
        now = self.clock_ns()
        try:
            if not self.multicast and now - self._last_keepalive > KEEPALIVE_PERIOD_S * 1e9:
                self._last_keepalive = now
                self.send(P.Empty(P.MessageId.KEEPALIVE))
            unc = self.clock_uncertainty_s
            good = unc is not None and 2 * unc <= ECHO_GOOD_RTT_S
            if now - self._last_echo > (ECHO_PERIOD_S if good else ECHO_FAST_PERIOD_S) * 1e9:
                self.send_echo()
            if self.model is None and now - self._last_modeldef_req > MODELDEF_RETRY_S * 1e9:
                self.request_modeldef()
        except OSError as e:
            self.on_log('warn', f'cannot send to the NatNet server: {e}')

    def reject(self, reason: str) -> None:
        self.stats.rejected_packets += 1
        self.stats.last_reject_reason = reason
        self._log_limited(
            'warn', f'rejected NatNet packet #{self.stats.rejected_packets}: {reason}'
        )

    def handle_datagram(
        self, data: bytes, arrival_ns: int, sender: tuple[str, int] | None = None
    ) -> FrameEvent | None:
        """Decode and account one datagram. Never raises: bad input is counted as rejected.
        ``sender`` (host, port): anything not from the configured server is dropped and counted."""
        if sender is not None and sender[0] not in self.allowed_hosts:
            self.stats.foreign_packets += 1
            if self.stats.last_foreign_sender != f'{sender[0]}:{sender[1]}':
                self.on_log(
                    'warn',
                    f'dropped NatNet datagram from {sender[0]}:{sender[1]}: not the configured '
                    f'server {self.server[0]} (add it to allowed_senders if it is Motive)',
                )
            self.stats.last_foreign_sender = f'{sender[0]}:{sender[1]}'
            return None
        is_frame = len(data) >= 2 and data[0] == P.MessageId.FRAMEOFDATA and data[1] == 0
        if is_frame and (self._negotiating or (self.version is None and not self.version_error)):
            self._pending_raw.append((data, arrival_ns))
            return None
        try:
            msg = P.decode_message(data, self.version, self._frame_reader())
            if is_frame:
                self.last_frame_datagram = data
        except P.NatNetDecodeError as e:
            if self.version_error:
                self.reject(self.version_error)
            else:
                self.reject(e.reason)
            if is_frame:
                self._frame_rejected(data)
            return None
        except Exception as e:  # noqa: BLE001 - a decoder bug must not kill the receive loop
            self.reject(f'internal decoder error {type(e).__name__}: {e}')
            return None
        try:
            return self._dispatch(msg, arrival_ns)
        except Exception as e:  # noqa: BLE001 - same: count, log, carry on
            self.reject(f'error handling {type(msg).__name__}: {type(e).__name__}: {e}')
            return None

    def _frame_reader(self) -> P.FrameReader | None:
        """The stream's FrameReader, new whenever the version is (it keeps frames' layouts)."""
        reader, version = self._frames, self.version
        if version is None or version not in P.SUPPORTED_VERSIONS:
            return None
        if reader is None or reader.version != version:
            reader = self._frames = P.FrameReader(version)
        return reader

    def _frame_rejected(self, data: bytes) -> None:
        """Every frame rejected in a row: find out whether another version's layout fits."""
        self._frame_rejects_in_row += 1
        if self._frame_rejects_in_row < MISMATCH_AFTER or self.version is None:
            return
        fits = []
        for v in P.SUPPORTED_VERSIONS:
            if v == self.version:
                continue
            with contextlib.suppress(P.NatNetDecodeError):
                P.decode_message(data, v)
                fits.append(P.version_text(v))
        told = P.version_text(self.version)
        text = (
            f'the last {self._frame_rejects_in_row} frames were all rejected: they do not match '
            f'the NatNet {told} layout the server announced'
        )
        if fits:
            text += f' (they decode as NatNet {" / ".join(fits)})'
        text += (
            "; Motive's announced and streamed versions disagree: set the bitstream version in "
            "Motive's streaming pane, or use unicast (multicast: false) so the bridge can request "
            'it'
        )
        self._log_limited('error', text, 'layout')
        self.layout_error = text

    def _dispatch(self, msg: P.Message, arrival_ns: int) -> FrameEvent | None:
        if isinstance(msg, P.Frame):
            self._frame_rejects_in_row = 0
            self.layout_error = ''
            if self.model is None:
                # Names are unknown until the model definitions arrive: hold the frames so the
                # first ones are published instead of dropped as unknown ids.
                self._pending.append((msg, arrival_ns))
                return None
            return self._on_frame(msg, arrival_ns)
        if isinstance(msg, P.Response) or (
            isinstance(msg, P.Empty) and msg.message_id == P.MessageId.UNRECOGNIZED_REQUEST
        ):
            self._responses.append(msg)
            return None
        if isinstance(msg, P.ServerInfo):
            self.server_info = msg
            v = P.parse_version(msg.natnet_version)
            if self._negotiated is not None and v != self._negotiated:
                # A repeated handshake (e.g. a restarted Motive): ask for our version again.
                self._renegotiate = True
                return None
            try:
                self.version = P.check_version(v)
                self.version_error = ''
            except P.NatNetDecodeError as e:
                self.version = None
                self.version_error = e.reason
                if self.multicast or self.preferred is None:  # else negotiate() reports it
                    self.on_log('error', e.reason)
            if msg.clock_hz is None:
                self.version_error = self.version_error or 'server info without clock (pre-3.0)'
        elif isinstance(msg, P.ModelDefinitions):
            self.model = msg
            self.names = {d.id: d.name for d in msg.rigid_bodies()}
            if self.on_model is not None:
                self.on_model(msg)
            while self._pending:
                self._on_frame(*self._pending.popleft())
        elif isinstance(msg, P.EchoResponse):
            self._on_echo(msg, arrival_ns)
        elif isinstance(msg, P.MessageString):
            self.on_log('info', f'server: {msg.text}')
        return None

    def _on_frame(self, f: P.Frame, arrival_ns: int) -> FrameEvent | None:
        if not self._sequence(f):
            return None
        st = self.stats
        st.last_frame_number = f.frame_number
        st.last_stamp_transmit = f.stamp_transmit
        st.last_timestamp = f.timestamp
        reason = implausible_reason(f, self.plausibility)
        if reason:  # counted here, not as a dropped frame
            st.implausible_frames += 1
            st.last_implausible_reason = reason
            self._last_implausible_ns = arrival_ns
            self.on_log('warn', f'implausible frame {f.frame_number} dropped: {reason}')
            return None
        st.frames += 1
        self._arrivals.append((arrival_ns, f.stamp_transmit))
        unknown_model = f.models_changed or any(b.id not in self.names for b in f.rigid_bodies)
        if (
            unknown_model
            and self.cmd_sock is not None
            and self.clock_ns() - self._last_modeldef_req > MODELDEF_RETRY_S * 1e9
        ):
            with contextlib.suppress(OSError):
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

    def _sequence(self, f: P.Frame) -> bool:
        """Account `f`'s frame number against the last one; False: discard it (a repeat or a
        late datagram).

        A number that goes back is a new sequence unless the frame is late: a looped take or a
        restarted server resynchronises at once, a take scrubbed back by a few frames within
        REORDER_WINDOW frames, where the old rule dropped every frame until the old number was
        passed. A single corrupt number (N, N+512, N+2) is recognised by the frame after it and
        costs nothing: that frame continues from N."""
        st = self.stats
        last = st.last_frame_number
        n = f.frame_number
        if last is None:
            return True
        if n == last:
            st.out_of_order += 1  # a repeat: nothing new
            return False
        anchor = self._anchor
        self._anchor = None
        sent_before = bool(f.stamp_transmit) and f.stamp_transmit < st.last_stamp_transmit
        late = n < last and (last - n <= REORDER_WINDOW or sent_before)
        if late and self._behind_in_row < REORDER_WINDOW:
            self._behind_in_row += 1
            st.out_of_order += 1
            self._anchor = anchor  # still waiting for the frame after the discontinuity
            return False
        self._behind_in_row = 0
        if (
            anchor is not None
            and anchor < n <= anchor + REORDER_WINDOW
            and (n < last or last < anchor)
        ):
            # The last frame's number was the odd one out: undo what it counted.
            if last > anchor:
                st.dropped_frames -= last - anchor - 1
            else:
                st.frame_number_resets -= 1
            st.frame_number_glitches += 1
            self._report_resync(f'frame number {last} was corrupt: {anchor} was followed by {n}')
            st.dropped_frames += max(n - anchor - 2, 0)  # the corrupt one was one of them
            return True
        if n < last:
            st.frame_number_resets += 1  # a looped or scrubbed take, a restarted server
            self._anchor = last
            self._report_resync(f'frame number went back from {last} to {n}: resynchronised')
        elif n > last + 1:
            st.dropped_frames += n - last - 1
            self._anchor = last
        elif st.last_timestamp is not None and f.timestamp < st.last_timestamp:
            # The number went up but Motive's frame clock went back: flagged, still used.
            st.non_monotonic_timestamps += 1
        return True

    def _report_resync(self, text: str) -> None:
        self._log_limited('warn', text, 'resync')

    def _log_limited(self, level: str, text: str, kind: str = '') -> None:
        """Log at most one line of a `kind` (default: the level) per LOG_PERIOD_S, saying how
        many were left out: a stream of bad frames is one line a second, not one a frame."""
        key = kind or level
        now = self.clock_ns()
        logged, skipped = self._limited.get(key, (None, 0))
        if logged is not None and now - logged < LOG_PERIOD_S * 1e9:
            self._limited[key] = (logged, skipped + 1)
            return
        self._limited[key] = (now, 0)
        self.on_log(
            level,
            text + (f' ({skipped} more like it in the last {LOG_PERIOD_S:g} s)' if skipped else ''),
        )

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

    def implausible_recently(self) -> bool:
        """An implausible frame arrived within the stale timeout (the stream is garbage, not
        stopped)."""
        t = self._last_implausible_ns
        return t is not None and (self.clock_ns() - t) / 1e9 <= self.stale_timeout

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
                    text = (
                        f'{info.app_name} {P.version_text(info.app_version)}, NatNet '
                        f'{P.version_text(info.natnet_version)}'
                    )
                    if self.version_error or self.version is None:
                        self.on_log('error', f'connected to {text} but {self.version_error}')
                    else:
                        self.on_log(
                            'info',
                            f'connected to {text}; decoding NatNet {P.version_text(self.version)}',
                        )
                except NatNetConnectError as e:
                    self.on_log('warn', str(e))
                    stop.wait(retry_period)
                    continue
                except OSError as e:
                    self.on_log('error', f'socket error while connecting: {e}')
                    stop.wait(retry_period)
                    continue
            if self.busy_poll_window > 0:
                self.busy_poll(0.05)
            else:
                self.poll(0.05)
            if self._renegotiate:
                self._renegotiate = False
                self._negotiated = None
                self.version = None
                with contextlib.suppress(OSError):
                    self._dispatch(self.server_info, self.clock_ns())  # type: ignore[arg-type]
                    self.negotiate()
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
                    self.send(self._connect_request())
