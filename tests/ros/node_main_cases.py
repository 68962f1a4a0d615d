"""Small programs built on equimus_ros.main.run_node, run as processes by test_node_main.py.

`python node_main_cases.py CASE` prints what happened on stdout and exits with run_node's code.
"""

import sys
import time

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node

from equimus_ros.main import run_node


class Listener(Node):
    """Subscribes to /flood, where converting each message costs the executor real time."""

    def __init__(self):
        super().__init__('listener')
        self.received = 0
        self.create_subscription(DiagnosticArray, '/flood', self._on_flood, 100)
        print('ready', flush=True)

    def _on_flood(self, msg):
        self.received += 1


class BadParameters(Node):
    def __init__(self):
        super().__init__('bad_parameters')
        raise ValueError('parameter gain=-1: must be positive')


class Named(Node):
    """Reports its parameter `tag`, and its destruction, on stdout."""

    def __init__(self, name):
        super().__init__(name)
        self.tag = self.declare_parameter('tag', '').value
        self.timer = self.create_timer(
            0.05, lambda: print(f'tick {self.get_name()} {self.tag}', flush=True)
        )

    def destroy_node(self):
        print(f'destroyed {self.get_name()}', flush=True)
        return super().destroy_node()


def _two_nodes():
    nodes = [Named('upstream'), Named('downstream')]
    print('ready', flush=True)
    return nodes


def _closed_all(nodes):
    print('closed ' + ','.join(n.get_name() for n in nodes), flush=True)


def _closed(node):
    print(f'closed {type(node).__name__}', flush=True)


def _fail_in_spin(node):
    raise RuntimeError('a bug, not a shutdown')


def _report_gc(node):
    import gc

    print(f'frozen {gc.get_freeze_count()} tracked {len(gc.get_objects())}', flush=True)


def _without_rclpy_signal_handlers():
    """A node with nothing to wake its executor (no timer, no subscription) in a process where
    rclpy's signal handling does nothing: what a lost race of rclpy's signal thread leaves."""
    from rclpy.signals import uninstall_signal_handlers

    uninstall_signal_handlers()
    node = Node('idle')
    print('ready', flush=True)
    return node


class HungTeardown(Listener):
    """A node whose teardown never returns, as Fast DDS's participant deletion did under load
    (sleeping, as a C call that released the GIL would)."""

    def destroy_node(self):
        print('tearing down', flush=True)
        time.sleep(60.0)
        return super().destroy_node()


class GilHeldTeardown(Listener):
    """A teardown that never returns and holds the GIL meanwhile (a C call through
    ctypes.PyDLL keeps it), as the participant's deletion did in the suite."""

    def destroy_node(self):
        import ctypes

        print('tearing down', flush=True)
        ctypes.PyDLL(None).sleep(60)
        return super().destroy_node()


class LateSignalGilHeldTeardown(Listener):
    """A teardown that the stop signal reaches late: the stop watch wakes while the node is
    already tearing down (its GIL-free first second), then the teardown holds the GIL for good."""

    def destroy_node(self):
        import ctypes

        print('tearing down', flush=True)
        time.sleep(1.0)
        ctypes.PyDLL(None).sleep(60)
        return super().destroy_node()


def _return_at_once(node):
    """A spin that ends by itself, so the teardown starts before any signal."""


def _close_slowly(node):
    time.sleep(6.0)  # a stop that hangs for a while (a vent the board does not acknowledge)
    print('closed slowly', flush=True)


def _shutdown_then_fail(node):
    rclpy.shutdown()
    raise RuntimeError('rcl error after the context went down')


CASES = {
    'listen': lambda: run_node(Listener, close=_closed),
    'bad_parameters': lambda: run_node(BadParameters, config_hint='Fix config/x.yaml.'),
    'bug_in_spin': lambda: run_node(Listener, spin=_fail_in_spin, close=_closed),
    'gc': lambda: run_node(Listener, spin=_report_gc),
    'error_at_shutdown': lambda: run_node(Listener, spin=_shutdown_then_fail, close=_closed),
    'two_nodes': lambda: run_node(_two_nodes, sys.argv, close=_closed_all),
    'slow_close': lambda: run_node(Listener, close=_close_slowly),
    'no_rclpy_signal_handlers': lambda: run_node(_without_rclpy_signal_handlers, close=_closed),
    'hung_teardown': lambda: run_node(HungTeardown, close=_closed),
    'bug_then_hung_teardown': lambda: run_node(HungTeardown, spin=_fail_in_spin, close=_closed),
    'gil_held_teardown': lambda: run_node(GilHeldTeardown, close=_closed),
    'bug_then_gil_held_teardown': lambda: run_node(
        GilHeldTeardown, spin=_fail_in_spin, close=_closed
    ),
    'late_signal_gil_held_teardown': lambda: run_node(
        LateSignalGilHeldTeardown, spin=_return_at_once, close=_closed
    ),
}

if __name__ == '__main__':
    sys.exit(CASES[sys.argv[1]]())
