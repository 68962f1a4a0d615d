"""Shared set-up for the bringup tests: rosproc on the path and an rclpy node per test."""
import sys
from pathlib import Path

import pytest
import rclpy

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def ros_node(request):
    """A fresh rclpy context and node for the test process, named after the test."""
    rclpy.init()
    n = rclpy.create_node('test_' + request.node.name.split('[')[0][:40])
    yield n
    n.destroy_node()
    rclpy.try_shutdown()
