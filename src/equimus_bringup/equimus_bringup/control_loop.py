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
reference subscription and the driver's services. One lock serialises the two, so the control
state is only ever touched by one of them at a time.

The valve driver does not read /valve/command in this mode: the in-process controller is its
only command source.
"""
from __future__ import annotations

import collections
import functools
import sys
import threading
import time
from typing import Callable, List

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.clock import Clock, ClockType
from rclpy.node import Node

from equimus_control.controller_node import ControllerNode
from equimus_control.estimator_node import EstimatorNode
from equimus_hw.natnet.bridge_node import NatNetBridge
from equimus_hw.valve.driver_node import ValveDriver, vent_on_exit
from equimus_ros.main import run_node
from equimus_ros.qos import DIAG_QOS


def _locked(lock: threading.RLock, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def call(*args, **kwargs):
        with lock:
            return fn(*args, **kwargs)
    return call


def serialise_callbacks(node: Node, lock: threading.RLock) -> None:
    """Make every timer, subscription and service callback of `node` hold `lock`."""
    for entity in (*node.timers, *node.subscriptions, *node.services):
        entity.callback = _locked(lock, entity.callback)


class LoopLatency(Node):
    """Node `control_loop`: per frame, NatNet datagram read -> its SET frame written to the serial
    port, measured in this process; p50/p99/max of the last 1200 frames (10 s) on /diagnostics."""

    def __init__(self):
        super().__init__('control_loop')
        self.bridge: NatNetBridge = None     # set once the bridge exists (it is built last)
        self.samples = collections.deque(maxlen=1200)
        self.frames = 0
        self.pub = self.create_publisher(DiagnosticArray, '/diagnostics', DIAG_QOS)
        self.create_timer(1.0, self._diag, clock=Clock(clock_type=ClockType.STEADY_TIME))

    def timed(self, driver: ValveDriver) -> Callable:
        """The driver's on_command, timing each frame from its datagram to the end of the serial
        write (not of the driver's publishing after it).

        Commands from the executor thread (the stale-state vent) are not frame answers."""
        def call(msg):
            driver.on_command(msg)
            bridge = self.bridge
            if bridge is not None and bridge.is_receive_thread() and bridge.frame_arrival_ns:
                if driver.last_write_ns > bridge.frame_arrival_ns:
                    self.samples.append((driver.last_write_ns - bridge.frame_arrival_ns) * 1e-6)
                    self.frames += 1
                bridge.frame_arrival_ns = 0
        return call

    def _diag(self) -> None:
        s = DiagnosticStatus(name='control_loop: frame -> serial write', hardware_id='fused')
        v = np.array(self.samples)
        s.level = DiagnosticStatus.OK
        s.message = (f'p99 {np.percentile(v, 99):.2f} ms over the last {v.size} frames' if v.size
                     else 'no frame yet')
        vals = {'frames': self.frames}
        for name, q in (('p50', 50), ('p99', 99), ('max', 100)):
            vals[f'latency_{name}_ms'] = f'{np.percentile(v, q):.3f}' if v.size else 'nan'
        s.values = [KeyValue(key=k, value=str(x)) for k, x in vals.items()]
        arr = DiagnosticArray(status=[s])
        arr.header.stamp = self.get_clock().now().to_msg()
        self.pub.publish(arr)


def control_loop() -> List[Node]:
    """The nodes, upstream first (the order they are stopped in), and the latency monitor."""
    lock = threading.RLock()
    nodes: List[Node] = []
    try:
        driver = ValveDriver(subscribe=False)
        nodes.append(driver)
        monitor = LoopLatency()
        nodes.append(monitor)
        controller = ControllerNode(subscribe_state=False,
                                    downstream=monitor.timed(driver))
        nodes.append(controller)
        estimator = EstimatorNode(subscribe=False, downstream=controller.on_state)
        nodes.append(estimator)
        for node in nodes:
            serialise_callbacks(node, lock)
        # Last: the bridge starts receiving (and driving the chain) in its constructor.
        bridge = NatNetBridge(downstream=_locked(lock, estimator.on_pose))
        monitor.bridge = bridge
        nodes.append(bridge)
    except BaseException:
        for node in nodes:
            if isinstance(node, ValveDriver):
                node.vent_and_close()
            node.destroy_node()
        raise
    return nodes[::-1]


def _close(nodes: List[Node]) -> None:
    """No frame may reach the valves once the driver has vented: stop the receiver first."""
    for node in nodes:
        if isinstance(node, NatNetBridge):
            node.stop_receiving()
    for node in nodes:
        if isinstance(node, ValveDriver):
            vent_on_exit(node)


def main(args=None) -> int:
    return run_node(control_loop, args, close=_close,
                    config_hint='Fix config/natnet.yaml, valve.yaml, control.yaml or the '
                                '--ros-args overrides.')


if __name__ == '__main__':
    sys.exit(main())
