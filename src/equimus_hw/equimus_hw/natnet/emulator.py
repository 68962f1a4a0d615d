"""NatNet server emulator: answers the command channel like Motive and streams frames over UDP.

Console tool ``natnet_emulator`` (``--help``) and a Python API (:class:`NatNetEmulator`,
``set_pose``) so a simulation or a soak test can push rigid-body poses. Loopback only by default.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import random
import select
import signal
import socket
import sys
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from equimus_description.interface import BODIES
from equimus_description.motive import DEFAULT_UP_AXIS, UP_AXES, check_up_axis, motive_to_ros

from . import protocol as P

CLOCK_HZ = 10_000_000
DEFAULT_BODIES = BODIES
UNICAST_LEASE_S = 10.0
#: s the stream may fall behind and still send every frame it owes, late, in a burst (a busy
#: machine starves its thread for that long); further behind (a suspended process) it skips them
CATCH_UP_S = 0.25
#: The Motive release announced with each NatNet version (see docs/natnet.md, "Which Motive sends
#: what"); only informative, the layout follows the NatNet version.
MOTIVE_FOR_VERSION: dict[P.Version, tuple[int, int, int, int]] = {
    (3, 0): (2, 1, 0, 0),
    (3, 1): (2, 3, 0, 0),
    (4, 0): (3, 0, 0, 0),
    (4, 1): (3, 1, 0, 0),
    (4, 2): (3, 2, 0, 0),
    (4, 3): (3, 3, 0, 0),
}
Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]
Pose = tuple[Vec3, Quat]


def _vec3(values: Iterable[float]) -> Vec3:
    """A position (x, y, z) as floats; ValueError unless exactly three values."""
    x, y, z = (float(v) for v in values)
    return (x, y, z)


def _quat(values: Iterable[float]) -> Quat:
    """A quaternion (x, y, z, w) as floats; ValueError unless exactly four values."""
    x, y, z, w = (float(v) for v in values)
    return (x, y, z, w)


def ticks_now() -> int:
    """Server high-resolution ticks at 10 MHz (as Windows QueryPerformanceCounter usually runs)."""
    return time.perf_counter_ns() // 100


def monotonic_to_ticks_offset(tries: int = 5) -> int:
    """ticks_now() − time.monotonic() in ticks, from the closest of a few paired readings. A frame's
    due time is converted with it once, not by reading both clocks at send time: a preemption
    between those two readings (a loaded machine) moved exposure stamps by milliseconds."""
    pairs = []
    for _ in range(max(tries, 1)):
        a = time.monotonic()
        t = ticks_now()
        b = time.monotonic()
        pairs.append((b - a, t - int((a + b) / 2 * CLOCK_HZ)))
    return min(pairs)[1]


def _quat_about_z(angle: float) -> tuple[float, float, float, float]:
    return (0.0, 0.0, math.sin(angle / 2), math.cos(angle / 2))


class SwingingLeg:
    """Built-in source: a planar leg swinging in Motive's X-Y plane (Y up), hinges about Z.

    Base fixed 1 m above the floor; thigh and calf 0.25 m; hip swings +-0.4 rad at 0.5 Hz and the
    knee +-0.5 rad at 0.5 Hz (phase-shifted). Extra bodies beyond three sit still at the origin.
    """

    def __init__(self, names: Sequence[str] = DEFAULT_BODIES, a1: float = 0.25, a2: float = 0.25):
        self.names = list(names)
        self.a1, self.a2 = a1, a2

    def __call__(self, t: float) -> dict[str, Pose]:
        hip = 0.4 * math.sin(2 * math.pi * 0.5 * t)
        knee = 0.5 * (1 - math.cos(2 * math.pi * 0.5 * t))
        base = (0.0, 1.0, 0.0)
        # Links hang down (-Y) at zero angle.
        th = (base[0] + 0.5 * self.a1 * math.sin(hip), base[1] - 0.5 * self.a1 * math.cos(hip), 0.0)
        knee_pt = (base[0] + self.a1 * math.sin(hip), base[1] - self.a1 * math.cos(hip), 0.0)
        ca = (
            knee_pt[0] + 0.5 * self.a2 * math.sin(hip + knee),
            knee_pt[1] - 0.5 * self.a2 * math.cos(hip + knee),
            0.0,
        )
        poses = [
            (base, (0.0, 0.0, 0.0, 1.0)),
            (th, _quat_about_z(hip)),
            (ca, _quat_about_z(hip + knee)),
        ]
        out = {}
        for i, n in enumerate(self.names):
            out[n] = poses[i] if i < 3 else ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))
        return out


class TrajectoryFile:
    """Recorded trajectory from CSV: header ``time,body,x,y,z,qx,qy,qz,qw`` (s, m, unit quat).

    Rows may come in any order; each body is interpolated linearly (positions) and by normalised
    linear interpolation (quaternions) between its samples; the file loops at its end.
    """

    def __init__(self, path: str):
        self.tracks: dict[str, tuple[list[float], list[Pose]]] = {}
        with open(path, newline='') as fh:
            rows = csv.DictReader(fh)
            need = {'time', 'body', 'x', 'y', 'z', 'qx', 'qy', 'qz', 'qw'}
            if rows.fieldnames is None or not need <= set(rows.fieldnames):
                raise ValueError(f'{path}: header must contain {",".join(sorted(need))}')
            samples: dict[str, list[tuple[float, Pose]]] = {}
            for i, r in enumerate(rows, start=2):
                try:
                    t = float(r['time'])
                    pose = (
                        _vec3(float(r[k]) for k in 'xyz'),
                        _quat(float(r[k]) for k in ('qx', 'qy', 'qz', 'qw')),
                    )
                except (TypeError, ValueError):
                    raise ValueError(f'{path}:{i}: not a number in {r}') from None
                samples.setdefault(r['body'], []).append((t, pose))
        if not samples:
            raise ValueError(f'{path}: no samples')
        for name, s in samples.items():
            s.sort(key=lambda x: x[0])
            self.tracks[name] = ([x[0] for x in s], [x[1] for x in s])
        self.t0 = min(ts[0] for ts, _ in self.tracks.values())
        self.duration = max(ts[-1] for ts, _ in self.tracks.values()) - self.t0
        self.names = list(self.tracks)

    def __call__(self, t: float) -> dict[str, Pose]:
        if self.duration > 0:
            t = self.t0 + math.fmod(t, self.duration)
        out = {}
        for name, (ts, poses) in self.tracks.items():
            i = bisect_right(ts, t)
            if i == 0:
                out[name] = poses[0]
            elif i >= len(ts):
                out[name] = poses[-1]
            else:
                a = (t - ts[i - 1]) / (ts[i] - ts[i - 1]) if ts[i] > ts[i - 1] else 0.0
                (p0, q0), (p1, q1) = poses[i - 1], poses[i]
                if sum(x * y for x, y in zip(q0, q1, strict=True)) < 0:
                    q1 = _quat(-x for x in q1)
                q = [x + a * (y - x) for x, y in zip(q0, q1, strict=True)]
                nq = math.sqrt(sum(x * x for x in q)) or 1.0
                out[name] = (
                    _vec3(x + a * (y - x) for x, y in zip(p0, p1, strict=True)),
                    _quat(x / nq for x in q),
                )
        return out


@dataclass
class Faults:
    """Fault injection (all off by default).

    Periods are (start_s, duration_s) after streaming starts.
    """

    drop_probability: float = 0.0
    drop_every: int = 0  # drop every N-th frame (0 = off)
    untracked: tuple[tuple[str, float, float], ...] = ()  # (body, start, duration)
    stall: tuple[tuple[float, float], ...] = ()  # (start, duration)
    malformed_every: int = 0  # send a malformed datagram after every N-th frame
    loop_every: int = 0  # frame numbers start again at 1 after N frames: a take looped in Motive


class NatNetEmulator:
    """A Motive-like NatNet server on loopback. ``start()`` runs it in background threads."""

    def __init__(
        self,
        version: str = '4.1',
        address: str = '127.0.0.1',
        command_port: int = 1510,
        data_port: int = 1511,
        multicast: bool = True,
        multicast_group: str = '239.255.42.99',
        rate_hz: float = 120.0,
        bodies: Sequence[str] = DEFAULT_BODIES,
        source: Callable[[float], dict[str, Pose]] | None = None,
        faults: Faults | None = None,
        exposure_latency_s: float = 0.004,
        software_latency_s: float = 0.0008,
        mid_exposure: bool = True,
        seed: int = 0,
        on_sent: Callable[[int, int], None] | None = None,
        before_frame: Callable[[], None] | None = None,
        bitstream_changeable: bool = True,
        announce_version: str | None = None,
        up_axis: str = DEFAULT_UP_AXIS,
    ):
        # Motive's Streaming > Up Axis: the sources give poses in Motive's default Y-up frame;
        # with 'z_up' they are streamed as Motive streams them with Up Axis = Z.
        self.up_axis = check_up_axis(up_axis)
        self.version = P.check_version(P.parse_version(version))
        # False: a server that refuses `Bitstream,X.Y` (-1), like Motive in multicast.
        self.bitstream_changeable = bitstream_changeable
        # Fault: announce another version in SERVERINFO than the one the frames are encoded in.
        self.announce_version = P.parse_version(announce_version) if announce_version else None
        self.bitstream_requests: list[str] = []
        # Replay (`equimus natnet replay`): recorded datagrams served byte for byte.
        self.replay_info: P.ServerInfo | None = None
        self.replay_modeldef: bytes | None = None
        self.replay_frames: list[tuple[float, bytes]] = []
        self.replay_loop = False
        self.replay_done = threading.Event()
        self.client_connected = threading.Event()  # set once the first NAT_CONNECT is answered
        self._connect_seen = False
        self.address = address
        self.command_port = int(command_port)
        self.data_port = int(data_port)
        self.multicast = bool(multicast)
        self.group = multicast_group
        self.rate_hz = float(rate_hz)
        self.bodies = list(bodies)
        self.ids = {n: i + 1 for i, n in enumerate(self.bodies)}
        self.source = source or SwingingLeg(self.bodies)
        self.faults = faults or Faults()
        self.exposure_latency_s = exposure_latency_s
        self.software_latency_s = software_latency_s
        self.mid_exposure = mid_exposure
        self.on_sent = on_sent
        # Called in the stream thread once per frame period, before the frame is built (also
        # while the stream is stalled): a pose source that must step in time with the frames.
        self.before_frame = before_frame
        self.rng = random.Random(seed)
        self._pushed: dict[str, Pose] = {}
        self._untracked_until: dict[str, float] = {}
        self._stall_until = 0.0
        self._malformed_pending = 0
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, int], float] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._frame_number = 0
        self._flags_once = 0
        self.frames_sent = 0
        self.frames_dropped = 0
        self.frames_skipped = 0  # exposures the stream missed while far behind (not sent)
        self.malformed_sent = 0
        self.cmd_sock: socket.socket | None = None
        self.data_sock: socket.socket | None = None
        self.t_start = 0.0

    @classmethod
    def from_capture(cls, path: str, loop: bool = False, **kwargs) -> NatNetEmulator:
        """An emulator that serves a capture (see :mod:`.capture`): its server info (with this
        emulator's ports and mode), its model definitions and its frames with the recorded
        timing; in unicast the frames start when the first client connects."""
        from .capture import CaptureError, first_of, iter_frames, read_capture

        cap = read_capture(path)
        info_raw = first_of(cap, P.MessageId.SERVERINFO)
        if info_raw is None:
            raise CaptureError(f'{path}: no server info recorded (the recording began too late)')
        info = P.decode_message(info_raw)
        assert isinstance(info, P.ServerInfo)
        v = P.parse_version(info.natnet_version)
        emu = cls(version=P.version_text(v if v in P.SUPPORTED_VERSIONS else (4, 1)), **kwargs)
        emu.version = v  # frames and definitions go out raw: any recorded version replays
        emu.replay_info = info
        emu.replay_modeldef = first_of(cap, P.MessageId.MODELDEF)
        frames = list(iter_frames(cap))
        if not frames:
            raise CaptureError(f'{path}: the capture holds no frames')
        emu.replay_frames = [(d.t - frames[0].t, d.data) for d in frames]
        emu.replay_loop = loop
        emu.bitstream_changeable = False  # the recorded bytes cannot change layout
        return emu

    # -- Python API -----------------------------------------------------------------------------
    def set_pose(self, name: str, position, orientation, tracked: bool = True) -> None:
        """Push a pose (m, quaternion x,y,z,w) for a body; it overrides the pose source."""
        if name not in self.ids:
            raise KeyError(f'unknown rigid body {name!r}; the emulator streams {self.bodies}')
        pose = (_vec3(position), _quat(orientation))
        with self._lock:
            self._pushed[name] = pose
            if tracked:
                self._untracked_until.pop(name, None)
            else:
                self._untracked_until[name] = math.inf

    def untrack(self, name: str, duration: float) -> None:
        with self._lock:
            self._untracked_until[name] = time.monotonic() + duration

    def stall(self, duration: float) -> None:
        with self._lock:
            self._stall_until = time.monotonic() + duration

    def inject_malformed(self, count: int = 1) -> None:
        with self._lock:
            self._malformed_pending += count

    @property
    def clients(self) -> list[tuple[str, int]]:
        with self._lock:
            return list(self._clients)

    # -- description / frame building ---------------------------------------------------------
    def server_info(self) -> P.ServerInfo:
        if self.replay_info is not None:
            r = self.replay_info
            return P.ServerInfo(
                r.app_name,
                r.app_version,
                r.natnet_version,
                r.clock_hz or CLOCK_HZ,
                self.data_port,
                self.multicast,
                self.group,
            )
        v = self.announce_version or self.version
        return P.ServerInfo(
            'Motive',
            MOTIVE_FOR_VERSION.get(v, (3, 2, 0, 0)),
            (*v, 0, 0),
            CLOCK_HZ,
            self.data_port,
            self.multicast,
            self.group,
        )

    def _marker_offsets(self) -> list[tuple[float, float, float]]:
        return [(0.02, 0.0, 0.0), (0.0, 0.03, 0.0), (0.0, 0.0, 0.025)]

    def model_definitions(self) -> P.ModelDefinitions:
        d: list[P.Description] = []
        offs = self._marker_offsets()
        for n in self.bodies:
            d.append(
                P.RigidBodyDescription(
                    n,
                    self.ids[n],
                    -1,
                    (0.0, 0.0, 0.0),
                    offs,
                    [0] * len(offs),
                    [f'Marker{i + 1}' for i in range(len(offs))]
                    if self.version >= (4, 0)
                    else None,
                    (0.0, 0.0, 0.0, 1.0) if self.version >= (4, 2) else None,
                )
            )
        for n in self.bodies:
            d.append(P.MarkerSetDescription(n, [f'{n}_{i + 1}' for i in range(len(offs))]))
        d.append(
            P.MarkerSetDescription(
                'all', [f'{n}_{i + 1}' for n in self.bodies for i in range(len(offs))]
            )
        )
        if self.version >= (4, 0):
            d.append(P.CameraDescription('Prime13 #1', (2.0, 2.5, 2.0), (-0.2, 0.37, 0.08, 0.9)))
        return P.ModelDefinitions(d)

    def _poses(self, t: float) -> dict[str, Pose]:
        poses = dict(self.source(t))
        with self._lock:
            poses.update(self._pushed)
        if self.up_axis == 'z_up':
            return {n: motive_to_ros(p, q, DEFAULT_UP_AXIS) for n, (p, q) in poses.items()}
        return poses

    def build_frame(self, t: float) -> P.Frame:
        now_mono = time.monotonic()
        poses = self._poses(t)
        labeled: list[P.Marker] = []
        f = P.Frame(self._frame_number, labeled_markers=labeled)
        offs = self._marker_offsets()
        with self._lock:
            untracked = {n for n, u in self._untracked_until.items() if u > now_mono}
        for n, s, d in self.faults.untracked:
            if s <= t < s + d:
                untracked.add(n)
        for n in self.bodies:
            pos, q = poses.get(n, ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)))
            ok = n not in untracked
            rb_id = self.ids[n]
            if ok:
                f.rigid_bodies.append(P.RigidBody(rb_id, pos, q, 0.00035, 0x01))
            else:
                # Motive keeps the last solve (or zeros) with the tracking-valid bit cleared.
                f.rigid_bodies.append(
                    P.RigidBody(rb_id, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0), 0.0, 0x00)
                )
            markers = [_vec3(p + o for p, o in zip(pos, off, strict=True)) for off in offs]
            f.marker_sets.append(P.MarkerSetData(n, markers))
            for i, m in enumerate(markers):
                labeled.append(
                    P.Marker((rb_id << 16) | (i + 1), m, 0.014, 0x0A if ok else 0x01, 0.0002)
                )
        f.marker_sets.append(
            P.MarkerSetData('all', [m for ms in f.marker_sets for m in ms.positions])
        )
        f.timestamp = self._frame_number / self.rate_hz
        if self.version >= (4, 1):
            f.precision_timestamp = (0, 0)
        f.params = self._flags_once
        self._flags_once = 0
        return f

    def _stamp_and_encode(self, f: P.Frame, due: int | None = None) -> bytes:
        """Transmitted now, its software latency before that; exposed at `due` (ticks) less
        the exposure latency: a frame of the stream sent late (this process starved) keeps the
        regular exposure times a camera system's hardware clock gives them."""
        now = ticks_now()
        due = now if due is None else min(due, now)
        f.stamp_transmit = now
        f.stamp_data_received = now - int(self.software_latency_s * CLOCK_HZ)
        f.stamp_mid_exposure = (
            due - int(self.exposure_latency_s * CLOCK_HZ) if self.mid_exposure else 0
        )
        return P.encode_message(f, self.version)

    # -- sockets -----------------------------------------------------------------------------
    def open(self) -> None:
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            c.bind((self.address, self.command_port))
            d.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            d.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            # Frames leave from the data port (clients may drop frames from any other port).
            d.bind((self.address, self.data_port))
        except OSError:
            c.close()  # neither port stays held by a server that could not open both
            d.close()
            raise
        c.setblocking(False)
        if self.multicast:
            d.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(self.address))
            d.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
            d.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
        self.cmd_sock, self.data_sock = c, d

    def start(self) -> NatNetEmulator:
        if self.cmd_sock is None:
            self.open()
        self._stop.clear()
        self.t_start = time.monotonic()
        stream = self._replay_stream_loop if self.replay_frames else self._stream_loop
        for target in (self._command_loop, stream):
            th = threading.Thread(target=target, daemon=True, name=f'natnet-emu-{target.__name__}')
            th.start()
            self._threads.append(th)
        return self

    def stop(self) -> None:
        self._stop.set()
        for th in self._threads:
            th.join(timeout=2.0)
        self._threads.clear()
        for s in (self.cmd_sock, self.data_sock):
            if s is not None:
                s.close()
        self.cmd_sock = self.data_sock = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- command channel ---------------------------------------------------------------------
    def _command_loop(self) -> None:
        sock = self.cmd_sock
        assert sock is not None, 'start() opens the sockets before it starts this thread'
        while not self._stop.is_set():
            try:
                r, _, _ = select.select([sock], [], [], 0.1)
            except (OSError, ValueError):
                return
            if not r:
                continue
            while True:
                try:
                    data, addr = sock.recvfrom(65536)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    break
                try:
                    reply = self.handle_command(data, addr)
                except P.NatNetDecodeError as e:
                    print(f'natnet_emulator: ignored bad command from {addr}: {e}', file=sys.stderr)
                    continue
                for pkt in reply:
                    with contextlib.suppress(OSError):
                        sock.sendto(pkt, addr)
                if self._connect_seen:
                    self.client_connected.set()

    def handle_command(self, data: bytes, addr: tuple[str, int]) -> list[bytes]:
        """Motive's answer to one command datagram (a list of datagrams to send back)."""
        msg = P.decode_message(data, self.version)
        if isinstance(msg, P.ConnectRequest):
            self._connect_seen = True  # the command loop sets client_connected after replying
            if not self.multicast:
                with self._lock:
                    self._clients[addr] = time.monotonic()
            return [P.encode_message(self.server_info())]
        if isinstance(msg, P.EchoRequest):
            return [P.encode_message(P.EchoResponse(msg.client_time, ticks_now()))]
        if isinstance(msg, P.Request):
            return [self._answer_request(msg.command, addr)]
        if isinstance(msg, P.Empty):
            mid = msg.message_id
            if mid == P.MessageId.REQUEST_MODELDEF:
                if self.replay_info is not None:
                    return [self.replay_modeldef] if self.replay_modeldef else []
                return [P.encode_message(self.model_definitions(), self.version)]
            if mid == P.MessageId.REQUEST_FRAMEOFDATA:
                return [self._stamp_and_encode(self.build_frame(time.monotonic() - self.t_start))]
            if mid == P.MessageId.KEEPALIVE:
                with self._lock:
                    if addr in self._clients or not self.multicast:
                        self._clients[addr] = time.monotonic()
                return []
            if mid == P.MessageId.DISCONNECT:
                with self._lock:
                    self._clients.pop(addr, None)
                return []
        return [P.packet(P.MessageId.UNRECOGNIZED_REQUEST)]

    def _answer_request(self, command: str, addr) -> bytes:
        name, _, arg = command.partition(',')
        name = name.strip()
        if name == 'FrameRate':
            return P.encode_message(P.Response.from_float(self.rate_hz))
        if name == 'UnitsToMillimeters':
            return P.encode_message(P.Response.from_float(1000.0))
        if name == 'Bitstream':
            if not arg:
                return P.encode_message(
                    P.Response.from_text(f'Bitstream,{self.version[0]}.{self.version[1]}')
                )
            self.bitstream_requests.append(arg.strip())
            try:
                v = P.check_version(P.parse_version(arg))
            except (ValueError, P.NatNetDecodeError):
                return P.encode_message(P.Response.from_int(-1))
            if self.multicast or not self.bitstream_changeable:
                return P.encode_message(P.Response.from_int(-1))  # unicast-only in Motive
            self.version = v
            self._flags_once = 0x08
            return P.encode_message(P.Response.from_int(0))
        if name in (
            'TimelinePlay',
            'TimelineStop',
            'SetPlaybackTakeName',
            'StartRecording',
            'StopRecording',
            'LiveMode',
            'EditMode',
        ):
            return P.encode_message(P.Response.from_int(0))
        return P.packet(P.MessageId.UNRECOGNIZED_REQUEST)

    # -- streaming ----------------------------------------------------------------------------
    def _destinations(self) -> list[tuple[str, int]]:
        if self.multicast:
            return [(self.group, self.data_port)]
        now = time.monotonic()
        with self._lock:
            for a in [a for a, t in self._clients.items() if now - t > UNICAST_LEASE_S]:
                del self._clients[a]
            return list(self._clients)

    def _stream_loop(self) -> None:
        period = 1.0 / self.rate_hz
        to_ticks = monotonic_to_ticks_offset()
        next_t = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if now < next_t:
                self._stop.wait(next_t - now)
                continue
            due = next_t  # this frame's time on the stream's clock, however late it goes out
            next_t += period
            self._frame_number += 1
            if now - next_t > CATCH_UP_S:
                # Fell far behind (suspended): the exposures missed are skipped, not sent in a
                # burst, and the camera clock runs on, as a hardware-timed one does; the frame
                # numbers count them, so a client sees them as dropped.
                missed = int((now - due) // period)
                due += missed * period
                next_t = due + period
                self._frame_number += missed
                self.frames_skipped += missed
            if self.faults.loop_every and self._frame_number > self.faults.loop_every:
                self._frame_number = 1
            t = now - self.t_start
            if self.before_frame is not None:
                self.before_frame()
            with self._lock:
                stalled = now < self._stall_until
            stalled = stalled or any(s <= t < s + d for s, d in self.faults.stall)
            fn = self._frame_number
            drop = (self.faults.drop_every and fn % self.faults.drop_every == 0) or (
                self.faults.drop_probability and self.rng.random() < self.faults.drop_probability
            )
            if stalled or drop:
                self.frames_dropped += 1
                continue
            f = self.build_frame(t)
            self.send_frame(f, due=int(due * CLOCK_HZ) + to_ticks)
            with self._lock:
                bad = self._malformed_pending
                self._malformed_pending = 0
            if self.faults.malformed_every and fn % self.faults.malformed_every == 0:
                bad += 1
            for _ in range(bad):
                self._send_all(self.malformed_packet())

    def _replay_stream_loop(self) -> None:
        """Send the recorded frames with their recorded spacing, from the first client's
        NAT_CONNECT on (multicast too), so that client sees the capture from its first frame."""
        while not self.client_connected.wait(0.005):
            if self._stop.is_set():
                return
        while not self._stop.is_set():
            t0 = time.monotonic()
            for t, data in self.replay_frames:
                delay = t0 + t - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    return
                self._send_all(data)
                self.frames_sent += 1
            if not self.replay_loop:
                self.replay_done.set()
                return

    def send_frame(self, f: P.Frame, due: int | None = None) -> None:
        """Stamp (see `_stamp_and_encode`; `due` in ticks, default now) and send one frame."""
        pkt = self._stamp_and_encode(f, due)
        self._send_all(pkt)
        self.frames_sent += 1
        if self.on_sent is not None:
            self.on_sent(f.frame_number, f.stamp_transmit)

    def _send_all(self, pkt: bytes) -> None:
        sock = self.data_sock
        if sock is None:
            raise RuntimeError('NatNet emulator is not open: call open() or start() first')
        for dest in self._destinations():
            with contextlib.suppress(OSError):
                sock.sendto(pkt, dest)

    def malformed_packet(self) -> bytes:
        """A garbage datagram of one of several kinds (truncated, bad length, flipped, random)."""
        good = self._stamp_and_encode(self.build_frame(0.0))
        kind = self.rng.randrange(4)
        self.malformed_sent += 1
        if kind == 0:
            return good[: self.rng.randrange(1, len(good))]
        if kind == 1:
            return good[:2] + (len(good) + 7).to_bytes(2, 'little') + good[4:]
        if kind == 2:
            b = bytearray(good)
            b[-4] ^= 0xFF  # end-of-data marker no longer zero
            return bytes(b)
        return bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(1, 200)))


# ------------------------------------------------------------------------------------------------
def _period(text: str) -> tuple[float, float]:
    a, _, b = text.partition(':')
    return float(a), float(b)


def _untrack(text: str) -> tuple[str, float, float]:
    parts = text.split(':')
    if len(parts) != 3:
        raise argparse.ArgumentTypeError('expected BODY:START:DURATION, e.g. thigh:2:1.5')
    return parts[0], float(parts[1]), float(parts[2])


def _version_arg(text: str) -> str:
    try:
        P.parse_version(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='natnet_emulator',
        description='NatNet (OptiTrack Motive) server emulator on loopback: answers the command '
        'channel and streams rigid-body frames at --rate Hz.',
    )
    p.add_argument(
        '--version',
        default='4.1',
        choices=[P.version_text(v) for v in P.SUPPORTED_VERSIONS],
        help='NatNet bitstream version (default 4.1)',
    )
    p.add_argument('--address', default='127.0.0.1', help='local address to serve on')
    p.add_argument('--command-port', type=int, default=1510)
    p.add_argument('--data-port', type=int, default=1511)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument('--multicast', dest='multicast', action='store_true', default=True)
    mode.add_argument('--unicast', dest='multicast', action='store_false')
    p.add_argument('--multicast-group', default='239.255.42.99')
    p.add_argument('--rate', type=float, default=120.0, help='frame rate, Hz')
    p.add_argument(
        '--bodies',
        default=','.join(DEFAULT_BODIES),
        help='comma-separated rigid body names (default base,thigh,calf)',
    )
    p.add_argument('--trajectory', help='CSV file time,body,x,y,z,qx,qy,qz,qw to play (loops)')
    p.add_argument(
        '--no-mid-exposure',
        action='store_true',
        help='send cam_mid_exposure = 0 (as USB cameras / playback do)',
    )
    p.add_argument(
        '--exposure-latency-ms',
        type=float,
        default=4.0,
        help='mid-exposure to transmit, ms (default 4)',
    )
    p.add_argument('--drop-every', type=int, default=0, help='drop every N-th frame')
    p.add_argument('--drop-probability', type=float, default=0.0)
    p.add_argument(
        '--untrack',
        type=_untrack,
        action='append',
        default=[],
        metavar='BODY:START:DUR',
        help='mark BODY untracked for DUR s from START s',
    )
    p.add_argument(
        '--stall',
        type=_period,
        action='append',
        default=[],
        metavar='START:DUR',
        help='stop streaming for DUR s from START s',
    )
    p.add_argument(
        '--malformed-every',
        type=int,
        default=0,
        help='send a malformed datagram after every N-th frame',
    )
    p.add_argument(
        '--refuse-bitstream',
        action='store_true',
        help='answer -1 to Bitstream,X.Y requests (a server that insists on its version)',
    )
    p.add_argument(
        '--announce-version',
        type=_version_arg,
        help='fault: announce this NatNet version in server info while streaming --version',
    )
    p.add_argument(
        '--up-axis',
        choices=UP_AXES,
        default=DEFAULT_UP_AXIS,
        help="Motive's Streaming > Up Axis: y_up (default) streams the Y-up poses as they are, "
        'z_up rotates them as Motive does (the bridge must have the same up_axis)',
    )
    p.add_argument('--duration', type=float, default=0.0, help='exit after this many s (0 = run)')
    p.add_argument('--seed', type=int, default=0)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    bodies = [b for b in args.bodies.split(',') if b]
    source = None
    if args.trajectory:
        try:
            source = TrajectoryFile(args.trajectory)
        except (OSError, ValueError) as e:
            print(f'natnet_emulator: cannot load trajectory: {e}', file=sys.stderr)
            return 2
        missing = [b for b in bodies if b not in source.names]
        if missing:
            print(
                f'natnet_emulator: trajectory has no samples for {missing}; '
                f'it has {source.names}. Use --bodies to choose.',
                file=sys.stderr,
            )
            return 2
    emu = NatNetEmulator(
        version=args.version,
        address=args.address,
        command_port=args.command_port,
        data_port=args.data_port,
        multicast=args.multicast,
        multicast_group=args.multicast_group,
        rate_hz=args.rate,
        bodies=bodies,
        source=source,
        faults=Faults(
            args.drop_probability,
            args.drop_every,
            tuple(args.untrack),
            tuple(args.stall),
            args.malformed_every,
        ),
        exposure_latency_s=args.exposure_latency_ms / 1000.0,
        mid_exposure=not args.no_mid_exposure,
        seed=args.seed,
        bitstream_changeable=not args.refuse_bitstream,
        announce_version=args.announce_version,
        up_axis=args.up_axis,
    )
    try:
        emu.open()
    except OSError as e:
        print(
            f'natnet_emulator: cannot bind {args.address} ports {args.command_port}/'
            f'{args.data_port}: {e}. Is another server (Motive, an emulator) running? '
            'Choose other ports with --command-port/--data-port.',
            file=sys.stderr,
        )
        return 2
    stop = threading.Event()
    # Both signals set the event explicitly: a process started from a background job inherits
    # SIGINT ignored, and Ctrl-C or a supervisor's SIGINT must still stop the emulator.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    emu.start()
    dest = (
        f'multicast {args.multicast_group}:{args.data_port}'
        if args.multicast
        else 'unicast to connected clients'
    )
    print(
        f'natnet_emulator: NatNet {args.version} on {args.address}:{args.command_port}, '
        f'{args.rate:g} Hz {dest}, bodies {bodies}',
        flush=True,
    )
    try:
        stop.wait(args.duration if args.duration > 0 else None)
    except KeyboardInterrupt:
        pass
    finally:
        emu.stop()
    print(
        f'natnet_emulator: sent {emu.frames_sent} frames, dropped {emu.frames_dropped}, '
        f'skipped {emu.frames_skipped} (the stream far behind), malformed {emu.malformed_sent}',
        flush=True,
    )
    return 0


if __name__ == '__main__':
    sys.exit(main())
