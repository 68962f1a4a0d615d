"""A DDS domain of its own for each test session, so concurrent sessions never hear each other.

`colcon test` runs the packages' pytest sessions in parallel (and developers run several at once).
An exported ROS_DOMAIN_ID would put them all on one domain, where one session's nodes receive
another's topics, so a session never takes the domain from the environment: it claims one.

A domain is claimed when both hold:
- no other session holds it: an exclusive, non-blocking flock on
  <temp dir>/equimus-ros-domain-<id>.lock, kept until the process exits (a crashed or killed
  session frees its domain; no stale lock to clean up);
- no DDS participant on this host uses it: the domain's discovery ports of the standard port
  mapping (RTPS, as Fast DDS and Cyclone DDS use by default: multicast 7400 + 250 id, unicast
  7410 + 250 id + 2 p for the first participants p) can be bound, so a graph running outside the
  tests is left alone.

IDs 1..101: with the default port mapping, 0-101 are the domains whose ports stay below Linux's
ephemeral port range (32768 and up); 0 is the default domain, left to the user's own graphs.
The search starts at an offset given by the process id, so sessions started together rarely try
the same lock first.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import pathlib
import socket
import tempfile

DOMAINS = range(1, 102)
PARTICIPANTS_PROBED = 8
LOCK_NAME = 'equimus-ros-domain-{}.lock'


@dataclasses.dataclass(frozen=True)
class Claim:
    domain: int
    lock: pathlib.Path
    fd: int

    def release(self) -> None:
        os.close(self.fd)


def discovery_ports(domain: int) -> list[int]:
    base = 7400 + 250 * domain
    return [base] + [base + 10 + 2 * p for p in range(PARTICIPANTS_PROBED)]


def has_participant(domain: int) -> bool:
    """True when a DDS participant on this host holds one of the domain's discovery ports."""
    for port in discovery_ports(domain):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(('', port))
            except OSError:
                return True
    return False


def claim(
    domains=DOMAINS, lock_dir: str | os.PathLike | None = None, avoid: tuple[int, ...] = ()
) -> Claim:
    """Lock a free domain; raise RuntimeError (one line: what to do) when there is none."""
    lock_dir = pathlib.Path(lock_dir or tempfile.gettempdir())
    ids = list(domains)
    start = os.getpid() % len(ids)
    for domain in ids[start:] + ids[:start]:
        if domain in avoid:
            continue
        lock = lock_dir / LOCK_NAME.format(domain)
        try:
            # Not inherited by the node processes a test starts (os.open is close-on-exec), so
            # the lock ends with this process.
            fd = os.open(lock, os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError:
            continue  # e.g. another user's lock file
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        if has_participant(domain):
            os.close(fd)
            continue
        return Claim(domain, lock, fd)
    raise RuntimeError(
        f'no free ROS domain in {ids[0]}..{ids[-1]}: each is held by another test session '
        f'({lock_dir / LOCK_NAME.format("<id>")}) or used by a running DDS participant; '
        'stop some of them and run again'
    )


def claim_for_session() -> tuple[Claim, str | None]:
    """Claim a domain and set ROS_DOMAIN_ID for this process and every node it starts.

    Returns the claim and the ROS_DOMAIN_ID the environment had (never used, and never claimed:
    the user's own graph may be running there).
    """
    exported = os.environ.get('ROS_DOMAIN_ID')
    avoid = (int(exported),) if exported and exported.isdigit() else ()
    got = claim(avoid=avoid)
    os.environ['ROS_DOMAIN_ID'] = str(got.domain)
    return got, exported


#: Set by the first process of a test session once its DDS environment is in place.
SESSION_DDS_MARK = 'EQUIMUS_TEST_SESSION_DDS'


def session_dds_environment(environ) -> dict[str, str]:
    """What a test session sets for DDS: this host only, on Fast DDS by the graphs' UDP-only
    loopback profile (equimus_bringup.graph.localhost_environment), else the LOCALHOST range.
    A process that inherits the session's environment (a pytest-xdist worker) keeps it as it is:
    set to LOCALHOST again over the session's profile, rmw_fastrtps adds shared memory (every
    worker and every process it started mapped it, and a participant killed while making a port
    segment hung the next one inside Fast DDS)."""
    if environ.get(SESSION_DDS_MARK):
        return {}
    try:
        from equimus_bringup.graph import localhost_environment
    except ImportError:  # the lower-bounds check's venv: no ROS, no equimus_bringup
        return {'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST', SESSION_DDS_MARK: '1'}
    return {**localhost_environment('sim', environ), SESSION_DDS_MARK: '1'}
