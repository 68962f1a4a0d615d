"""control_loop: the hardware control path in one process, driven by the mocap frame.

    ros2 launch equimus_bringup hardware.launch.py fused_loop:=true

The same four nodes as the multi-process graph (natnet_bridge, estimator, controller,
valve_driver, with the same names, parameters, topics, services and diagnostics), but a NatNet
frame travels from the socket to the serial line by direct calls in the bridge's receive thread:
decode -> estimator -> controller -> safety filter -> DAC frame. Every intermediate message is
still published (after it has been passed on), so recording and monitoring see the full graph.
This removes the four DDS hops and executor wake-ups between a frame and its valve command, which
dominate the latency of the multi-process graph (docs/benchmarks.md, soak section).

Threads: the receive thread runs the chain; one executor thread runs the nodes' timers
(valve keep-alive, slew and watchdog, the controller's stale-state guard, diagnostics), the
reference subscription, parameter changes and the driver's services. Each node guards its own
state: the controller's ControlStep and the valve driver's safety filter and link each sit behind
their node's lock, so nothing here wraps another node's callbacks or reads its private fields.
The controller in this process is the same `ControllerNode` (and so the same
`equimus_control.step.ControlStep`) as in the split graph.

The managed nodes (valve_driver, natnet_bridge) are configured and activated here, in-process;
their lifecycle services stay available (`ros2 lifecycle set /valve_driver deactivate` vents).
The valve driver does not read /valve/command in this mode: the in-process controller is its
only command source.
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from std_msgs.msg import Float64MultiArray

from equimus_control.controller_node import ControllerNode
from equimus_control.estimator_node import EstimatorNode
from equimus_description.interface import DIAGNOSTICS
from equimus_hw.natnet.bridge_node import NatNetBridge
from equimus_hw.valve.driver_node import ValveDriver, vent_on_exit
from equimus_ros.diagnostics import Diagnostics, Level
from equimus_ros.lifecycle import bring_up
from equimus_ros.main import run_node

LATENCY_WINDOW = 1200  # frames (10 s at 120 Hz) behind the latency percentiles


class LoopLatency(Node):
    """Node `control_loop`: per frame, NatNet datagram read -> its SET frame written to the serial
    port, measured in this process; p50/p99/max of the last 1200 frames (10 s) on /diagnostics."""

    def __init__(self) -> None:
        super().__init__('control_loop')
        self.bridge: NatNetBridge | None = None  # set once the bridge exists (built last)
        self.samples: collections.deque[float] = collections.deque(maxlen=LATENCY_WINDOW)
        self.frames = 0
        self.diagnostics = Diagnostics(
            self, DIAGNOSTICS, 'control_loop: frame -> serial write', hardware_id='fused'
        )
        self.create_timer(1.0, self._diag, clock=Clock(clock_type=ClockType.STEADY_TIME))

    def timed(self, driver: ValveDriver) -> Callable[[Float64MultiArray], None]:
        """The driver's on_command, timing each frame from its datagram to the end of the serial
        write (not of the driver's publishing after it).

        Commands from the executor thread (the stale-state vent) are not frame answers."""

        def call(msg: Float64MultiArray) -> None:
            driver.on_command(msg)
            bridge = self.bridge
            if bridge is not None and bridge.is_receive_thread() and bridge.frame_arrival_ns:
                if driver.last_write_ns > bridge.frame_arrival_ns:
                    self.samples.append((driver.last_write_ns - bridge.frame_arrival_ns) * 1e-6)
                    self.frames += 1
                bridge.frame_arrival_ns = 0

        return call

    def _diag(self) -> None:
        v = np.array(self.samples)
        values: dict = {'frames': self.frames}
        for name, q in (('p50', 50), ('p99', 99), ('max', 100)):
            values[f'latency_{name}_ms'] = f'{np.percentile(v, q):.3f}' if v.size else 'nan'
        self.diagnostics.publish(
            Level.OK,
            f'p99 {np.percentile(v, 99):.2f} ms over the last {v.size} frames'
            if v.size
            else 'no frame yet',
            values,
        )


def control_loop() -> list[Node]:
    """The nodes, upstream first (the order they are stopped in), and the latency monitor."""
    nodes: list[Node] = []
    try:
        driver = ValveDriver(subscribe=False)
        nodes.append(driver)
        bring_up(driver)  # managed: configured and active in-process, no service round trip
        monitor = LoopLatency()
        nodes.append(monitor)
        controller = ControllerNode(subscribe_state=False, downstream=monitor.timed(driver))
        nodes.append(controller)
        estimator = EstimatorNode(subscribe=False, downstream=controller.on_state)
        nodes.append(estimator)
        # Last: the bridge starts receiving (and driving the chain) when it is activated.
        bridge = NatNetBridge(downstream=estimator.on_pose)
        monitor.bridge = bridge
        nodes.append(bridge)
        bring_up(bridge)
    except BaseException:
        for node in nodes:
            if isinstance(node, ValveDriver):
                node.vent_and_close()
            node.destroy_node()
        raise
    return nodes[::-1]


def _close(nodes: Any) -> None:
    """No frame may reach the valves once the driver has vented: stop the receiver first."""
    for node in nodes:
        if isinstance(node, NatNetBridge):
            node.stop_receiving()
    for node in nodes:
        if isinstance(node, ValveDriver):
            vent_on_exit(node)


def main(args: Any = None) -> int:
    return run_node(
        control_loop,
        args,
        close=_close,
        config_hint='Fix config/natnet.yaml, valve.yaml, control.yaml or the --ros-args overrides.',
    )


if __name__ == '__main__':
    sys.exit(main())
