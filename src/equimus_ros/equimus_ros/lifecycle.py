"""Managed (lifecycle) nodes: the one place that names the transitions the graph drives.

The launch files (launch_ros LifecycleNode + ChangeState events), the supervisor (over the
lifecycle_msgs services) and the processes that hold a driver in-process (control_loop,
sim_graph: `bring_up` below) all take a driver from unconfigured to active the same way:
configure, then activate.
"""

from __future__ import annotations

from lifecycle_msgs.msg import Transition
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn

__all__ = ['BRING_UP', 'LifecycleError', 'bring_up', 'state_of']

#: Transitions from unconfigured to active, in order (lifecycle_msgs/Transition ids and labels).
BRING_UP: tuple[tuple[int, str], ...] = (
    (Transition.TRANSITION_CONFIGURE, 'configure'),
    (Transition.TRANSITION_ACTIVATE, 'activate'),
)


class LifecycleError(ValueError):
    """A transition failed (run_node reports it as a configuration error: exit 2, no traceback)."""


def bring_up(node: LifecycleNode) -> None:
    """Configure and activate `node` in this process (no service round trip)."""
    triggers = {'configure': node.trigger_configure, 'activate': node.trigger_activate}
    for _, label in BRING_UP:
        result = triggers[label]()
        if result != TransitionCallbackReturn.SUCCESS:
            raise LifecycleError(
                f'{node.get_name()}: {label} failed ({result.to_label()}); see its log above'
            )


def state_of(node: LifecycleNode) -> str:
    """The node's lifecycle state label ('unconfigured', 'inactive', 'active', 'finalized')."""
    return node._state_machine.current_state[1]
