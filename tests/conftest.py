"""Shared test set-up: paths to ../shared and an isolated DDS domain per test session."""

import os
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
# ../shared beside the checkout, or wherever EQUIMUS_SHARED points (a clone made elsewhere)
SHARED = pathlib.Path(os.environ.get('EQUIMUS_SHARED') or REPO.parent / 'shared')
if SHARED.is_dir():
    os.environ['EQUIMUS_SHARED'] = str(SHARED)  # the library's mesh lookup reads it too

# Shared test helpers (rosproc: start and stop real node processes) for every test folder.
sys.path.insert(0, str(pathlib.Path(__file__).parent))

import dds_domain  # noqa: E402  (found through the path above)

# Concurrent test sessions on one machine (`colcon test` runs the packages in parallel) must not
# hear each other's topics: each claims a domain of its own, whatever ROS_DOMAIN_ID was exported.
try:
    DOMAIN, EXPORTED_DOMAIN = dds_domain.claim_for_session()
except RuntimeError as e:
    raise pytest.UsageError(str(e)) from None
os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'


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


@pytest.fixture
def ros_node(request):
    """A fresh rclpy context and node for the test process, named after the test."""
    import rclpy

    rclpy.init()
    n = rclpy.create_node('test_' + request.node.name.split('[')[0][:40])
    yield n
    n.destroy_node()
    rclpy.try_shutdown()
