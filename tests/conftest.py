"""Shared test set-up: paths to ../shared and an isolated DDS domain per test session."""

import os
import pathlib
import shutil
import signal
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
FIRMWARE_SKIP = 'host firmware NOT tested: cmake not found (install cmake and a C++ compiler)'
# ../shared beside the checkout, or wherever EQUIMUS_SHARED points (a clone made elsewhere)
SHARED = pathlib.Path(os.environ.get('EQUIMUS_SHARED') or REPO.parent / 'shared')
if SHARED.is_dir():
    os.environ['EQUIMUS_SHARED'] = str(SHARED)  # the library's mesh lookup reads it too

# The tests stop the processes they start as a terminal's Ctrl-C does (SIGINT). A shell that runs
# the suite in the background (`cmd &` in a script) starts it with SIGINT ignored, and every
# process started from here would inherit that: `ros2 launch` then never sees its Ctrl-C (only
# its nodes, whose rclpy handler is installed whatever the disposition) and ends on its own,
# after its required processes' stop grace, which is not the path being tested.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Shared test helpers (rosproc: start and stop real node processes) for every test folder.
sys.path.insert(0, str(pathlib.Path(__file__).parent))

import dds_domain  # noqa: E402  (found through the path above)

# Concurrent test sessions on one machine (`colcon test` runs the packages in parallel) must not
# hear each other's topics: each claims a domain of its own, whatever ROS_DOMAIN_ID was exported.
try:
    DOMAIN, EXPORTED_DOMAIN = dds_domain.claim_for_session()
except RuntimeError as e:
    raise pytest.UsageError(str(e)) from None
# ... and on Fast DDS over UDP only, as the graphs run (dds_domain.session_dds_environment):
# the tests SIGKILL and SIGSTOP participants, and one killed while it created a shared-memory
# port left a zero-size /dev/shm/fastdds_port<N>; the next participant given port N waited for
# it forever inside Fast DDS (a loaded run hung 8 min in rclpy.init, where pytest's timeout
# cannot reach). Every process of the session, and each one it starts, inherits this. The same
# for the graphs' one BLAS thread a process: the test workers and every process they start run
# like a graph's.
os.environ.update(dds_domain.session_dds_environment(os.environ))
try:
    from equimus_bringup.graph import thread_environment
except ImportError:
    pass
else:
    os.environ.update(thread_environment())


def _drop_dead_shm_ports(older_than_s: float = 60.0) -> None:
    """Remove zero-size Fast DDS port segments (/dev/shm/fastdds_port<N>): a port whose creator
    died before sizing it, which stalls any later shared-memory participant given port N for
    good (the supervisor's in-process lifecycle client still joins a graph on the LOCALHOST
    range, with shared memory). A live creator sizes its port within microseconds."""
    import time

    shm = pathlib.Path('/dev/shm')
    now = time.time()
    for f in shm.glob('fastdds_port*') if shm.is_dir() else ():
        try:
            st = f.stat()
            if st.st_size == 0 and now - st.st_mtime > older_than_s and f.name[-3:] != '_el':
                f.unlink()
        except OSError:
            pass


_drop_dead_shm_ports()


def pytest_report_header(config) -> str:
    exported = '' if EXPORTED_DOMAIN is None else f', the exported {EXPORTED_DOMAIN} not used'
    return f'ROS_DOMAIN_ID={DOMAIN.domain} for this session (lock {DOMAIN.lock}{exported})'


@pytest.fixture(scope='session')
def shared_dir() -> pathlib.Path:
    if not SHARED.is_dir():
        pytest.fail(
            f'{SHARED} not found: the tests read the reference data from ../shared '
            'beside the repository checkout; clone there, or set EQUIMUS_SHARED to the '
            'shared folder'
        )
    return SHARED


@pytest.fixture(scope='session')
def repo_dir() -> pathlib.Path:
    return REPO


@pytest.fixture(scope='session')
def host_firmware(firmware_build) -> pathlib.Path:
    """firmware/dac_board built for this computer with cmake, once per test session.

    Without cmake the firmware's tests are skipped with FIRMWARE_SKIP (and the session's summary
    says so), except under CI or EQUIMUS_REQUIRE_FIRMWARE=1, where that is a failure. With cmake
    but no compiler, or firmware that does not compile, they fail with the compiler's output."""
    return firmware_build(None)


@pytest.fixture(scope='session')
def firmware_build(tmp_path_factory):
    """build(watchdog_ms=None) -> the host firmware with that watchdog built in (None: the
    rig's), each variant built once per test session (rules of `host_firmware`)."""
    if shutil.which('cmake') is None:
        if os.environ.get('CI') or os.environ.get('EQUIMUS_REQUIRE_FIRMWARE'):
            pytest.fail(FIRMWARE_SKIP.replace('NOT tested', 'required here'))
        pytest.skip(FIRMWARE_SKIP)
    from equimus_hw.valve.host_firmware import FirmwareBuildError, build

    built: dict[int | None, pathlib.Path] = {}

    def _build(watchdog_ms: int | None = None) -> pathlib.Path:
        if watchdog_ms not in built:
            try:
                built[watchdog_ms] = build(
                    tmp_path_factory.mktemp('firmware_build'),
                    REPO / 'firmware' / 'host',
                    watchdog_ms,
                )
            except FirmwareBuildError as exc:
                pytest.fail(str(exc), pytrace=False)
        return built[watchdog_ms]

    return _build


@pytest.fixture
def ros_node(request):
    """A fresh rclpy context and node for the test process, named after the test."""
    import rclpy

    rclpy.init()
    n = rclpy.create_node('test_' + request.node.name.split('[')[0][:40])
    yield n
    n.destroy_node()
    rclpy.try_shutdown()


@pytest.fixture
def private_node(request):
    """A node on a DDS domain claimed for this test alone (the session's own is avoided, and a
    domain with a participant on it is never claimed): nothing an earlier test left running on
    the session's domain can reach it. Start the test's processes with its domain
    (`rosproc.start_node(..., domain=node.context.get_domain_id())`)."""
    import rclpy

    claim = dds_domain.claim(avoid=(int(os.environ.get('ROS_DOMAIN_ID', '0')),))
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=claim.domain)
    node = rclpy.create_node('test_' + request.node.name.split('[')[0][:40], context=context)
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)
        claim.release()


@pytest.fixture
def read_only_dir(tmp_path):
    """An empty folder nobody can write into: chmod 555 where that binds (not root), else a
    read-only tmpfs (root, with CAP_SYS_ADMIN); skipped where neither is possible."""
    import subprocess

    d = tmp_path / 'read_only'
    d.mkdir()
    if os.geteuid() != 0:
        d.chmod(0o555)
        yield d
        d.chmod(0o755)
        return
    r = subprocess.run(
        ['mount', '-t', 'tmpfs', '-o', 'ro,size=64k', 'tmpfs', str(d)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f'no read-only folder possible here: root, and mount failed: {r.stderr}')
    try:
        yield d
    finally:
        subprocess.run(['umount', str(d)], check=False)


@pytest.fixture
def read_only_copy(tmp_path):
    """read_only_copy(src) -> a copy of folder `src` on read-only storage (as `read_only_dir`;
    root: a tmpfs filled, then remounted read-only)."""
    import shutil
    import subprocess

    mounts = []

    def make(src: pathlib.Path) -> pathlib.Path:
        d = tmp_path / f'ro_{len(mounts)}'
        d.mkdir()
        if os.geteuid() != 0:
            dst = d / src.name
            shutil.copytree(src, dst)
            for p in [dst, *dst.rglob('*')]:
                p.chmod(0o555 if p.is_dir() else 0o444)
            d.chmod(0o555)
            mounts.append(('chmod', d))
            return dst
        r = subprocess.run(
            ['mount', '-t', 'tmpfs', '-o', 'size=16m', 'tmpfs', str(d)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            pytest.skip(f'no read-only folder possible here: root, and mount failed: {r.stderr}')
        mounts.append(('mount', d))
        dst = d / src.name
        shutil.copytree(src, dst)
        subprocess.run(['mount', '-o', 'remount,ro', str(d)], check=True)
        return dst

    yield make
    for kind, d in mounts:
        if kind == 'mount':
            subprocess.run(['umount', str(d)], check=False)
        else:
            for p in [d, *d.rglob('*')]:
                p.chmod(0o755)


@pytest.fixture
def small_disk(tmp_path):
    """small_disk(size) -> an empty folder on a tmpfs of `size` (e.g. '256k'): a disk that
    fills up. Needs root (mount); skipped otherwise."""
    import subprocess

    mounts = []

    def make(size: str) -> pathlib.Path:
        if os.geteuid() != 0:
            pytest.skip('a small disk needs a tmpfs mount (root)')
        d = tmp_path / f'disk_{len(mounts)}'
        d.mkdir()
        r = subprocess.run(
            ['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs', str(d)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            pytest.skip(f'no small disk possible here: mount failed: {r.stderr}')
        mounts.append(d)
        return d

    yield make
    for d in mounts:
        subprocess.run(['umount', str(d)], check=False)


def pytest_terminal_summary(terminalreporter):
    """Skipped host-firmware tests are a gap in what was tested: say so at the end of the run."""
    skipped = terminalreporter.stats.get('skipped', [])
    n = sum('host firmware NOT tested' in str(r.longrepr) for r in skipped)
    if n:
        terminalreporter.write_sep(
            '!', f'{n} tests skipped: host firmware NOT tested (cmake not found)', red=True
        )
