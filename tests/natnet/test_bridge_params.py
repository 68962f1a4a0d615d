"""natnet_bridge parameters over real rclpy: natnet.yaml reaches the node, the stale timeout
follows `ros2 param set`, the connection and what is published are read-only, and a malformed
address stops the node with the reason."""

import subprocess
import sys
import threading

import pytest

rclpy = pytest.importorskip('rclpy')


def test_stale_timeout_applies_at_run_time_and_the_connection_is_read_only(repo_dir):
    from paramclient import get_parameters, set_parameters
    from rclpy.executors import SingleThreadedExecutor

    from equimus_hw.natnet.bridge_node import NatNetBridge
    from equimus_hw.natnet.ports import free_udp_ports

    rclpy.init(
        args=[
            '--ros-args',
            '--params-file',
            str(repo_dir / 'config' / 'natnet.yaml'),
            '-p',
            'natnet_bridge:multicast:=false',
            '-p',
            f'natnet_bridge:data_port:={free_udp_ports(1)[0]}',
            '-p',
            'natnet_bridge:command_port:=9',
        ]
    )
    bridge = NatNetBridge()
    client = rclpy.create_node('bridge_param_client')
    executor = SingleThreadedExecutor()
    executor.add_node(bridge)
    threading.Thread(target=executor.spin, daemon=True).start()
    try:
        assert bridge.wanted == ['base', 'thigh', 'calf'] and bridge.frame_id == 'mocap'
        assert get_parameters(client, 'natnet_bridge', 'stale_timeout', 'command_port') == [0.5, 9]
        (ok,) = set_parameters(client, 'natnet_bridge', stale_timeout=2.0)
        assert ok.successful, ok.reason
        assert bridge.client.stale_timeout == 2.0
        (bad,) = set_parameters(client, 'natnet_bridge', stale_timeout=-1.0)
        assert not bad.successful and 'stale_timeout' in bad.reason
        for name, value in (
            ('server_address', '10.0.0.2'),
            ('frame_id', 'world'),
            ('rigid_bodies', ['base']),
        ):
            (ro,) = set_parameters(client, 'natnet_bridge', **{name: value})
            assert not ro.successful and 'read-only' in ro.reason, name
        assert bridge.client.stale_timeout == 2.0 and bridge.server_address == '127.0.0.1'
    finally:
        executor.shutdown()
        client.destroy_node()
        bridge.destroy_node()
        rclpy.try_shutdown()


def test_a_malformed_address_stops_the_bridge_with_the_reason():
    proc = subprocess.run(
        [
            sys.executable,
            '-m',
            'equimus_hw.natnet.bridge_node',
            '--ros-args',
            '-p',
            'server_address:=motive.local',
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "server_address='motive.local': not an IPv4 address" in proc.stderr
    assert 'Traceback' not in proc.stderr
