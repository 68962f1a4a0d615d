"""`equimus natnet list|record|replay`: look at a running Motive, capture it, serve it again.

equimus natnet list                          rigid bodies Motive streams (name, streaming id, topic)
equimus natnet record session.natnet -d 30   raw datagrams + receive times of a Motive session
equimus natnet replay session.natnet         serve a capture as a NatNet server (the emulator)

Errors print one line and exit 2. `list` and `record` never change Motive's settings (no
bitstream request: it is server-wide and would switch every other client too).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from equimus_description.config import ConfigError
from equimus_description.interface import mocap_pose

from . import protocol as P
from .capture import CaptureError, read_capture, record, summary
from .checks import topic_token
from .client import NatNetClient, NatNetConfig, NatNetConnectError
from .emulator import NatNetEmulator

_D = NatNetConfig()


def _connection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument('--server', default=_D.server_address, help='Motive host IPv4 address')
    p.add_argument('--local', default=_D.local_address, help='local interface IPv4 address')
    p.add_argument('--command-port', type=int, default=_D.command_port)
    p.add_argument('--data-port', type=int, default=_D.data_port)
    p.add_argument('--multicast-group', default=_D.multicast_group)
    p.add_argument('--unicast', action='store_true', help='unicast stream (default multicast)')


def _config(ns: argparse.Namespace) -> NatNetConfig:
    return NatNetConfig(
        server_address=ns.server,
        local_address=ns.local,
        command_port=ns.command_port,
        data_port=ns.data_port,
        multicast_group=ns.multicast_group,
        multicast=not ns.unicast,
        bitstream_version='',
    )


def cmd_list(ns: argparse.Namespace) -> int:
    cfg = _config(ns)
    c = NatNetClient.from_config(cfg, bitstream_version='')
    try:
        c.open()
        info = c.connect(ns.timeout)
    finally:
        c.close()
    print(
        f'{info.app_name} {P.version_text(info.app_version)}, NatNet '
        f'{P.version_text(info.natnet_version)}, '
        f'{"multicast " + info.multicast_group if info.multicast else "unicast"}, '
        f'data port {info.data_port}'
    )
    if c.version_error:
        print(f'equimus: {c.version_error}', file=sys.stderr)
        return 2
    if c.model is None:
        print('equimus: the server sent no model definitions', file=sys.stderr)
        return 2
    rbs = c.model.rigid_bodies()
    print(f'{len(rbs)} rigid bodies (rigid_bodies in config/natnet.yaml takes the names):')
    for d in rbs:
        print(
            f'  {d.name!r:24} id {d.id:<5} {len(d.marker_positions)} markers  -> '
            f'{mocap_pose(topic_token(d.name)).name}'
        )
    return 0


def cmd_record(ns: argparse.Namespace) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    w = record(_config(ns), ns.out, ns.duration, stop)
    s = summary(read_capture(ns.out))
    print(
        f'recorded {w.count} datagrams ({s["frames"]} frames, {s["duration_s"]} s) from '
        f'{s["server"]} to {ns.out}'
    )
    return 0


def cmd_replay(ns: argparse.Namespace) -> int:
    emu = NatNetEmulator.from_capture(
        ns.capture,
        loop=ns.loop,
        address=ns.address,
        command_port=ns.command_port,
        data_port=ns.data_port,
        multicast=not ns.unicast,
        multicast_group=ns.multicast_group,
    )
    emu.open()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    emu.start()
    print(
        f'replaying {len(emu.replay_frames)} frames of {ns.capture} as NatNet '
        f'{P.version_text(emu.version)} on {ns.address}:{ns.command_port}'
        + (' (loop)' if ns.loop else ''),
        flush=True,
    )
    try:
        while not stop.is_set() and not emu.replay_done.is_set():
            stop.wait(0.1)
    finally:
        emu.stop()
    print(f'sent {emu.frames_sent} frames', flush=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='equimus natnet',
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest='action', required=True)
    p = sub.add_parser('list', help='rigid bodies a running Motive streams')
    _connection_args(p)
    p.add_argument('--timeout', type=float, default=3.0, help='s to wait for Motive')
    p.set_defaults(func=cmd_list)
    p = sub.add_parser('record', help='capture raw NatNet datagrams to a file')
    p.add_argument('out', help='capture file to write (e.g. session.natnet)')
    p.add_argument('-d', '--duration', type=float, default=10.0, help='s to record')
    _connection_args(p)
    p.set_defaults(func=cmd_record)
    p = sub.add_parser('replay', help='serve a capture as a NatNet server')
    p.add_argument('capture')
    p.add_argument('--loop', action='store_true', help='start over at the end')
    p.add_argument('--address', default='127.0.0.1', help='local address to serve on')
    p.add_argument('--command-port', type=int, default=_D.command_port)
    p.add_argument('--data-port', type=int, default=_D.data_port)
    p.add_argument('--multicast-group', default=_D.multicast_group)
    p.add_argument('--unicast', action='store_true', help='unicast to connected clients')
    p.set_defaults(func=cmd_replay)
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        return ns.func(ns)
    except (NatNetConnectError, CaptureError, ConfigError) as e:
        print(f'equimus: {e}', file=sys.stderr)
        return 2
    except OSError as e:
        print(
            f'equimus: socket error: {e}. Check the addresses and that no other program (Motive, '
            'an emulator) holds the ports.',
            file=sys.stderr,
        )
        return 2


if __name__ == '__main__':
    sys.exit(main())
