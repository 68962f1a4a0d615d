"""equimus_ros.clocks reads real rclpy clocks as Clock.now() does, without a Time object."""

import pytest

pytest.importorskip('rclpy')

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from rclpy.clock import Clock, ClockType, ROSClock  # noqa: E402
from rclpy.time import Time  # noqa: E402

from equimus_ros.clocks import now_ns, stamp_msg  # noqa: E402

NS = st.integers(min_value=0, max_value=(2**31 - 1) * 10**9 + 999_999_999)


@settings(max_examples=200, deadline=None)
@given(ns=NS)
def test_a_ros_clock_on_sim_time_reads_the_time_it_was_set_to(ns):
    clock = ROSClock()
    clock._set_ros_time_is_active(True)
    clock.set_ros_time_override(Time(nanoseconds=ns, clock_type=ClockType.ROS_TIME))
    assert now_ns(clock) == clock.now().nanoseconds == ns


@settings(max_examples=200, deadline=None)
@given(ns=NS)
def test_a_stamp_is_the_one_rclpy_builds(ns):
    assert stamp_msg(ns) == Time(nanoseconds=ns).to_msg()


def test_the_steady_clock_reads_between_two_rclpy_readings():
    clock = Clock(clock_type=ClockType.STEADY_TIME)
    before = clock.now().nanoseconds
    read = now_ns(clock)
    assert before <= read <= clock.now().nanoseconds
