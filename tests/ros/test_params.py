"""equimus_ros.params over real rclpy: a config dataclass bound to a node's parameters.

The bound node gets its values from a YAML parameter file and a -p override (as a launch gives
them); another node changes them through the SetParameters service, over DDS, as `ros2 param set`
does. Runtime fields take effect (apply is called with the new config); out-of-range, NaN and
`__post_init__` errors are refused with their reason; read-only fields are refused.
"""

from __future__ import annotations

import dataclasses
import math
import time

import pytest

from equimus_description.config import ConfigError, param, validate_fields

rclpy = pytest.importorskip('rclpy')


@dataclasses.dataclass(frozen=True)
class Gains:
    kp: float = param(1.0, 'proportional gain (N·m/rad)', range=(0.0, 100.0), runtime=True)
    limits: tuple[float, ...] = param(
        (0.0, 50.0), 'low, high pressure (kPa)', range=(0.0, 50.0), runtime=True
    )
    horizon: int = param(10, 'prediction steps', range=(1, 200))
    mode: str = param('pid', 'controller kind')
    enabled: bool = param(True, 'publish commands', runtime=True)
    offset: float = param(0.0, 'zero offset (rad), no range', runtime=True)
    not_a_parameter: float = 7.0

    def __post_init__(self) -> None:
        validate_fields(self)
        if self.limits[0] > self.limits[1]:
            raise ConfigError(f'limits={self.limits!r}: low must not exceed high')


@pytest.fixture
def graph(tmp_path):
    """(bound node's binding, list of applied configs, client node, executor spin helper)."""
    from rclpy.executors import SingleThreadedExecutor

    from equimus_ros.params import bind

    yaml = tmp_path / 'gains.yaml'
    yaml.write_text(
        'gains_under_test:\n  ros__parameters:\n    kp: 2.5\n    horizon: 20\n'
        '    limits: [5.0, 40.0]\n'
    )
    context = rclpy.Context()
    rclpy.init(
        context=context,
        args=['--ros-args', '--params-file', str(yaml), '-p', 'gains_under_test:mode:=mpc'],
    )
    node = rclpy.create_node('gains_under_test', context=context)
    client = rclpy.create_node('param_client', context=context)
    applied = []
    binding = bind(node, Gains(), apply=applied.append)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    executor.add_node(client)
    yield binding, applied, client, executor
    executor.shutdown()
    client.destroy_node()
    node.destroy_node()
    rclpy.shutdown(context=context)


def _set(client, executor, **values):
    """SetParameters over DDS (what `ros2 param set` sends); returns the per-parameter results."""
    from rcl_interfaces.srv import SetParameters
    from rclpy.parameter import Parameter

    cli = client.create_client(SetParameters, '/gains_under_test/set_parameters')
    deadline = time.monotonic() + 10
    while not cli.service_is_ready():
        assert time.monotonic() < deadline, 'set_parameters service not found'
        executor.spin_once(timeout_sec=0.05)
    req = SetParameters.Request(
        parameters=[Parameter(k, value=v).to_parameter_msg() for k, v in values.items()]
    )
    future = cli.call_async(req)
    executor.spin_until_future_complete(future, timeout_sec=10)
    assert future.done(), 'no answer from set_parameters'
    client.destroy_client(cli)
    return future.result().results


def test_yaml_file_and_override_reach_the_config(graph):
    binding, applied, _, _ = graph
    cfg = binding.config
    assert cfg == Gains(kp=2.5, horizon=20, limits=(5.0, 40.0), mode='mpc')
    assert isinstance(cfg.limits, tuple) and isinstance(cfg.kp, float)
    assert 'not_a_parameter' not in binding.names
    assert sorted(binding.runtime_names()) == ['enabled', 'kp', 'limits', 'offset']
    assert applied == []


def test_parameters_carry_their_description_range_and_read_only_flag(graph):
    binding, _, _, _ = graph
    node = binding.node
    kp = node.describe_parameter('kp')
    assert kp.description.startswith('proportional gain') and not kp.read_only
    assert (kp.floating_point_range[0].from_value, kp.floating_point_range[0].to_value) == (0, 100)
    horizon = node.describe_parameter('horizon')
    assert horizon.read_only and horizon.integer_range[0].to_value == 200


def test_a_runtime_parameter_set_from_another_node_takes_effect(graph):
    binding, applied, client, executor = graph
    (res,) = _set(client, executor, kp=7.0)
    assert res.successful, res.reason
    assert applied and applied[-1].kp == 7.0 and applied[-1].horizon == 20
    assert binding.config.kp == 7.0
    (res,) = _set(client, executor, limits=[1.0, 30.0])
    assert res.successful, res.reason
    assert applied[-1].limits == (1.0, 30.0) and applied[-1].kp == 7.0


@pytest.mark.parametrize(
    'name,value,reason',
    [
        ('kp', 150.0, 'range'),  # rclpy's own range check (descriptor)
        ('kp', math.nan, 'kp'),  # NaN is outside every range
        ('offset', math.nan, 'must be a finite number'),
        ('limits', [-1.0, 30.0], 'within [0, 50]'),  # element range, checked by validate_fields
        ('limits', [40.0, 30.0], 'low must not exceed high'),  # the dataclass's __post_init__
        ('limits', [1.0, math.inf], 'must be a finite number'),
    ],
)
def test_an_invalid_value_is_refused_with_its_reason(graph, name, value, reason):
    binding, applied, client, executor = graph
    before = binding.config
    (res,) = _set(client, executor, **{name: value})
    assert not res.successful
    assert reason in res.reason, res.reason
    assert applied == [] and binding.config == before
    assert binding.node.get_parameter(name).value == getattr(before, name) or list(
        binding.node.get_parameter(name).value
    ) == list(getattr(before, name))


def test_a_read_only_parameter_is_refused(graph):
    binding, applied, client, executor = graph
    (res,) = _set(client, executor, horizon=30)
    assert not res.successful and 'read-only' in res.reason, res.reason
    assert applied == [] and binding.config.horizon == 20


def test_a_wrong_type_is_refused(graph):
    binding, applied, client, executor = graph
    (res,) = _set(client, executor, kp='fast')
    assert not res.successful, res.reason
    assert applied == [] and binding.config.kp == 2.5


def test_an_invalid_launch_value_fails_construction_with_the_reason(tmp_path):
    """A value from the launch outside its range stops the node at start (run_node: exit 2)."""
    from rclpy.exceptions import ParameterException

    from equimus_ros.params import bind

    context = rclpy.Context()
    rclpy.init(context=context, args=['--ros-args', '-p', 'kp:=500.0'])
    node = rclpy.create_node('gains_bad', context=context)
    try:
        with pytest.raises((ParameterException, ValueError)) as info:
            bind(node, Gains())
        assert 'kp' in str(info.value)
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def test_a_post_init_error_at_launch_fails_construction():
    from equimus_ros.params import bind

    context = rclpy.Context()
    rclpy.init(context=context, args=['--ros-args', '-p', 'limits:=[45.0, 10.0]'])
    node = rclpy.create_node('gains_bad2', context=context)
    try:
        with pytest.raises(ConfigError, match='low must not exceed high'):
            bind(node, Gains())
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def test_without_apply_every_field_is_read_only():
    """A node that does not act on new values must not accept them silently."""
    from equimus_ros.params import bind

    context = rclpy.Context()
    rclpy.init(context=context, args=[])
    node = rclpy.create_node('gains_fixed', context=context)
    try:
        binding = bind(node, Gains())
        assert binding.runtime_names() == []
        assert node.describe_parameter('kp').read_only
        (res,) = node.set_parameters([rclpy.parameter.Parameter('kp', value=3.0)])
        assert not res.successful and 'read-only' in res.reason
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
