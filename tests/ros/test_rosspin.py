"""The test harnesses' background spin (tests/rosspin.py): an error in one turn is recorded and
spinning goes on, so later answers still arrive; a shut-down context ends it."""

import time

import pytest
from rosspin import BackgroundSpin

rclpy = pytest.importorskip('rclpy')


def test_an_error_in_a_callback_does_not_end_the_spinning():
    from rclpy.executors import SingleThreadedExecutor

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node('spin_probe', context=ctx)
    ticks: list[float] = []

    def tick() -> None:
        ticks.append(time.monotonic())
        if len(ticks) == 2:
            raise RuntimeError('one bad turn')

    node.create_timer(0.02, tick)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    spin = BackgroundSpin(ex, ctx)
    try:
        deadline = time.monotonic() + 10.0
        while len(ticks) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(ticks) >= 6, (ticks, spin.report())
        assert spin.errors == ['RuntimeError: one bad turn'], spin.errors
        assert 'one bad turn' in spin.report()
    finally:
        spin.stop()
        ex.shutdown(timeout_sec=1.0)
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
    assert not spin.thread.is_alive()
