"""UDP ports for a NatNet server started beside its client (an emulated rig, a soak, a test).

A port found free by binding it and letting it go can be taken again before the server binds
it, by any socket bound to port 0 (a NatNet client's command socket, another tool's), and the
kernel gives those from its ephemeral range. DDS participants that start after the check take
ports of their own: the RTPS port mapping's from 7400 up (250 a domain, domains 0-101 end below
the ephemeral range), and below those one port each from 7000 up, on every address or on
127.0.0.1 (Fast DDS, as rmw_fastrtps runs it here: the first participant on the machine holds
7000, the next 7001, ...; listed from /proc/net/udp while a graph started, and by
tests/natnet/test_ports.py). So the ports here come from below all of them, searched from a
random port (parallel runs do not try the same ones) and checked free by binding them. Seen in
test runs: an emulated rig found its data port taken, exited, and the graph idled,
vented, with no pose ever arriving; and, with the search reaching up to 7400, three rig
emulators that could not bind 7000/7001, 7010/7011 and 7003/7004, each taken by a node of the
graph it served (its DDS participant) in the second between the check and the bind.

Two processes searching at once (parallel test workers, a soak beside a test) could be given the
same free port, and a process that stops and restarts its server leaves the port free in
between. So every port given is also reserved for the life of the process that asked: a POSIX
record lock on byte `port` of one file in the temporary directory, which the kernel drops when
that process ends however it ends. A port reserved by any live process is never given again.

A port is reserved before it is checked, never after: the check binds it for a moment, and a
search that checked a port another process had already been given could hold it just when that
process's server binds it (in CI a rig emulator exited, "Address already in use", on ports no
other server had).
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
import threading
from pathlib import Path

__all__ = ['free_udp_port_pair', 'free_udp_ports']

#: Lowest port given: NatNet's own (1510, 1511) and the well-known services stay below it.
PORT_FLOOR = 2000
#: The first port a DDS participant takes (Fast DDS: one each from here up, see the module
#: docstring; the RTPS port mapping's start at 7400): the search stays below it.
DDS_PORT_BASE = 7000
#: Linux's ephemeral range, read from here; its default where the file is not.
EPHEMERAL_RANGE = Path('/proc/sys/net/ipv4/ip_local_port_range')
DEFAULT_EPHEMERAL_LOW = 32768
#: The file whose byte `port` a process locks to reserve that port (see the module docstring).
RESERVATIONS = Path(tempfile.gettempdir()) / 'equimus-udp-ports.lock'

_reserved: set[int] = set()
_reservations_fd: int | None = None
_reserving = threading.Lock()


def _ceiling() -> int:
    """The first port not given: DDS's first, or the ephemeral range's start if lower."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = DEFAULT_EPHEMERAL_LOW
    return min(DDS_PORT_BASE, low) if low > PORT_FLOOR + 100 else DDS_PORT_BASE


def _all_free(ports: list[int], address: str) -> bool:
    socks = []
    try:
        for port in ports:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            socks.append(s)
            s.bind((address, port))
        return True
    except OSError:
        return False
    finally:
        for s in socks:
            s.close()


def _reserve(port: int) -> bool:
    """Reserve `port` for this process's life; False if this or another live process holds it.
    Where the file cannot be opened (another user's), only this process's own are known."""
    global _reservations_fd
    with _reserving:
        if port in _reserved:
            return False
        if _reservations_fd is None:
            try:
                _reservations_fd = os.open(RESERVATIONS, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError:
                _reservations_fd = -1
        if _reservations_fd >= 0:
            try:
                # Never unlocked or closed: closing any descriptor of the file would drop every
                # lock this process holds on it.
                fcntl.lockf(_reservations_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
            except OSError:
                return False
        _reserved.add(port)
        return True


def _release(port: int) -> None:
    """Give back a reservation of this process (a port found in use after it was reserved)."""
    with _reserving:
        _reserved.discard(port)
        if _reservations_fd is not None and _reservations_fd >= 0:
            fcntl.lockf(_reservations_fd, fcntl.LOCK_UN, 1, port)


def _claim(ports: list[int], address: str) -> bool:
    """Reserve all of `ports`, then check them free; on False none stays reserved by this call."""
    taken: list[int] = []
    for port in ports:
        if not _reserve(port):
            break
        taken.append(port)
    else:
        if _all_free(ports, address):
            return True
    for port in taken:
        _release(port)
    return False


def _search_start(width: int) -> int:
    return random.SystemRandom().randrange(width)


def free_udp_ports(n: int, address: str = '127.0.0.1', consecutive: bool = False) -> list[int]:
    """`n` distinct UDP ports free on `address` now, below DDS's and the ephemeral range
    (`consecutive`: p, p + 1, ...). The search starts at a random port and wraps around, so it
    finds free ones whenever there are. They stay reserved for this process (module docstring)."""
    floor, ceiling = PORT_FLOOR, _ceiling()
    width = ceiling - floor
    start = _search_start(width)
    order = (floor + (start + i) % width for i in range(width))
    if consecutive:
        for first in order:
            span = list(range(first, first + n))
            if first + n <= ceiling and _claim(span, address):
                return span
    else:
        found = []
        for port in order:
            if _claim([port], address):
                found.append(port)
                if len(found) == n:
                    return found
    raise RuntimeError(f'no {n} free UDP ports on {address} between {floor} and {ceiling}')


def free_udp_port_pair(address: str = '127.0.0.1') -> int:
    """A port p with p and p + 1 both free for UDP on `address` (NatNet command and data)."""
    return free_udp_ports(2, address, consecutive=True)[0]
