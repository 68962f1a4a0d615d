"""`ros2 param set` on the valve driver (its own process, real rclpy/DDS): runtime safety limits
take effect, invalid values and read-only parameters are refused with a reason.

The driver runs on its simulated board (no serial port needed); its output is what it
publishes on /valve/applied, the pressures its DAC codes regulate to."""

import math
import time

import pytest
import rclpy
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import GetParameters, SetParameters
from rclpy.executors import SingleThreadedExecutor
from rosproc import start_node, stop
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from equimus_description.interface import VALVE_APPLIED, VALVE_COMMAND
from equimus_hw.valve.calibration import ValveCalibration
from equimus_ros.qos import publisher, subscription


@pytest.fixture
def driver():
    proc = start_node(
        'equimus_hw',
        'valve_driver',
        '-p',
        'autostart:=true',
        '-p',
        'board:=sim',
        '-p',
        'auto_arm:=true',
        '-p',
        'command_timeout_s:=1.0',
    )
    rclpy.init()
    node = rclpy.create_node('driver_params_probe')
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    yield proc, node, ex
    ex.shutdown()
    node.destroy_node()
    rclpy.try_shutdown()
    out = stop(proc)
    assert proc.returncode == 0 and 'Traceback' not in out, out


def _double(name, value):
    return ParameterMsg(
        name=name, value=ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value)
    )


def _call(ex, client, request, timeout=10.0):
    assert client.wait_for_service(timeout_sec=30.0), f'{client.srv_name} not found'
    fut = client.call_async(request)
    end = time.monotonic() + timeout
    while not fut.done() and time.monotonic() < end:
        ex.spin_once(timeout_sec=0.05)
    assert fut.done(), f'{client.srv_name} did not answer'
    return fut.result()


def test_runtime_limits_apply_and_invalid_or_read_only_values_are_refused(driver):
    proc, node, ex = driver
    applied = []  # (stamp ns: the driver's publish time, kPa)
    subscription(
        node,
        JointState,
        VALVE_APPLIED,
        lambda m: applied.append(
            (m.header.stamp.sec * 10**9 + m.header.stamp.nanosec, list(m.effort))
        ),
    )
    cmd = publisher(node, Float64MultiArray, VALVE_COMMAND)
    setp = node.create_client(SetParameters, '/valve_driver/set_parameters')
    getp = node.create_client(GetParameters, '/valve_driver/get_parameters')

    def settle_on(values, what):
        """Command `values` at 50 Hz until /valve/applied holds steady; return that output.
        Only messages the driver published from now on count (same host, same clock): under
        load, the tail of the previous setting was once still arriving after a change."""
        since = node.get_clock().now().nanoseconds
        end = time.monotonic() + 15.0
        while time.monotonic() < end:
            assert proc.poll() is None, stop(proc)
            cmd.publish(Float64MultiArray(data=values))
            t = time.monotonic() + 0.02
            while time.monotonic() < t:
                ex.spin_once(timeout_sec=0.005)
            new = [kpa for stamp, kpa in applied if stamp > since]
            if len(new) > 5 and new[-1] == new[-5] and new[-1] != [0.0, 0.0]:
                return new[-1]
        pytest.fail(f'no steady /valve/applied for {what}: {applied[-5:]}')

    cal = ValveCalibration()
    before = settle_on([45.0, 45.0], 'the default ceiling')
    assert before == [cal.code_to_kpa(cal.kpa_to_code(45.0))] * 2  # 45 kPa passes

    # A runtime limit: max_kpa lowered to 30 takes effect on the output.
    res = _call(ex, setp, SetParameters.Request(parameters=[_double('max_kpa', 30.0)]))
    assert res.results[0].successful, res.results[0].reason
    after = settle_on([45.0, 45.0], 'max_kpa 30')
    assert 29.0 < after[0] <= 30.0 and after[0] == after[1], after
    got = _call(ex, getp, GetParameters.Request(names=['max_kpa']))
    assert got.values[0].double_value == 30.0

    # Invalid values are refused with a reason and change nothing.
    for name, value, words in (
        ('max_kpa', 60.0, 'max_kpa'),
        ('max_kpa', math.nan, 'finite'),
        ('slew_rate_kpa_s', math.nan, 'finite'),
        ('command_timeout_s', 0.0, 'command_timeout_s'),
    ):
        res = _call(ex, setp, SetParameters.Request(parameters=[_double(name, value)]))
        assert not res.results[0].successful, (name, value)
        assert words in res.results[0].reason or 'range' in res.results[0].reason, (
            name,
            value,
            res.results[0].reason,
        )
    assert _call(ex, getp, GetParameters.Request(names=['max_kpa'])).values[0].double_value == 30.0
    assert settle_on([45.0, 45.0], 'after refusals') == after

    # A read-only parameter is refused, saying so.
    res = _call(
        ex,
        setp,
        SetParameters.Request(
            parameters=[
                ParameterMsg(
                    name='port',
                    value=ParameterValue(
                        type=ParameterType.PARAMETER_STRING, string_value='/dev/ttyUSB9'
                    ),
                )
            ]
        ),
    )
    assert not res.results[0].successful
    assert 'read-only' in res.results[0].reason or 'read only' in res.results[0].reason, (
        res.results[0].reason
    )
