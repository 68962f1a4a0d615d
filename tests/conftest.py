"""Shared test set-up: paths to ../shared and an isolated DDS domain per test session."""

import os
import pathlib
import shutil
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
FIRMWARE_SKIP = 'host firmware NOT tested: cmake not found (install cmake and a C++ compiler)'
# ../shared beside the checkout, or wherever EQUIMUS_SHARED points (a clone made elsewhere)
SHARED = pathlib.Path(os.environ.get('EQUIMUS_SHARED') or REPO.parent / 'shared')
if SHARED.is_dir():
    os.environ['EQUIMUS_SHARED'] = str(SHARED)  # the library's mesh lookup reads it too

# Shared test helpers (rosproc: start and stop real node processes) for every test folder.
sys.path.insert(0, str(pathlib.Path(__file__).parent))

# Concurrent test sessions on one machine must not hear each other's topics.
os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))
os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'


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
def host_firmware(tmp_path_factory) -> pathlib.Path:
    """firmware/dac_board built for this computer with cmake, once per test session.

    Without cmake the firmware's tests are skipped with FIRMWARE_SKIP (and the session's summary
    says so), except under CI or EQUIMUS_REQUIRE_FIRMWARE=1, where that is a failure. With cmake
    but no compiler, or firmware that does not compile, they fail with the compiler's output."""
    if shutil.which('cmake') is None:
        if os.environ.get('CI') or os.environ.get('EQUIMUS_REQUIRE_FIRMWARE'):
            pytest.fail(FIRMWARE_SKIP.replace('NOT tested', 'required here'))
        pytest.skip(FIRMWARE_SKIP)
    from equimus_hw.valve.host_firmware import FirmwareBuildError, build

    try:
        return build(tmp_path_factory.mktemp('firmware_build'), REPO / 'firmware' / 'host')
    except FirmwareBuildError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def ros_node(request):
    """A fresh rclpy context and node for the test process, named after the test."""
    import rclpy

    rclpy.init()
    n = rclpy.create_node('test_' + request.node.name.split('[')[0][:40])
    yield n
    n.destroy_node()
    rclpy.try_shutdown()


def pytest_terminal_summary(terminalreporter):
    """Skipped host-firmware tests are a gap in what was tested: say so at the end of the run."""
    skipped = terminalreporter.stats.get('skipped', [])
    n = sum('host firmware NOT tested' in str(r.longrepr) for r in skipped)
    if n:
        terminalreporter.write_sep(
            '!', f'{n} tests skipped: host firmware NOT tested (cmake not found)', red=True
        )
