"""`ros2 param set` / `ros2 param get` for tests: the SetParameters and GetParameters services of
a running node, called from a test node over DDS (the ros2 CLI is not installed here)."""

from __future__ import annotations

import time
from typing import Any

import rclpy
from rcl_interfaces.srv import GetParameters, SetParameters
from rclpy.node import Node
from rclpy.parameter import Parameter, parameter_value_to_python


def _call(node: Node, srv_type: type, service: str, request: Any, timeout: float) -> Any:
    client = node.create_client(srv_type, service)
    try:
        deadline = time.monotonic() + timeout
        while not client.service_is_ready():
            assert time.monotonic() < deadline, f'service {service} not found'
            rclpy.spin_once(node, timeout_sec=0.05)
        future = client.call_async(request)
        rclpy.spin_until_future_complete(
            node, future, timeout_sec=max(deadline - time.monotonic(), 1.0)
        )
        assert future.done(), f'no answer from {service}'
        return future.result()
    finally:
        node.destroy_client(client)


def set_parameters(node: Node, target: str, timeout: float = 20.0, **values: Any) -> list[Any]:
    """Set parameters of the node named `target`; one SetParametersResult per value, in order."""
    req = SetParameters.Request(
        parameters=[Parameter(k, value=v).to_parameter_msg() for k, v in values.items()]
    )
    return list(_call(node, SetParameters, f'/{target}/set_parameters', req, timeout).results)


def get_parameters(node: Node, target: str, *names: str, timeout: float = 20.0) -> list[Any]:
    """Current values of `names` on the node named `target`, as Python values."""
    res = _call(
        node,
        GetParameters,
        f'/{target}/get_parameters',
        GetParameters.Request(names=list(names)),
        timeout,
    )
    return [parameter_value_to_python(v) for v in res.values]
