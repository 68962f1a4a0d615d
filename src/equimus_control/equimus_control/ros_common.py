"""Small rclpy helpers shared by the equimus_control nodes (QoS, parameters, main loop)."""
from __future__ import annotations

import rclpy
from rcl_interfaces.msg import ParameterDescriptor, ParameterType
from rclpy.executors import ExternalShutdownException
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

COMMAND_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                         history=HistoryPolicy.KEEP_LAST, durability=DurabilityPolicy.VOLATILE)
DIAG_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)

_TYPES = {float: ParameterType.PARAMETER_DOUBLE, int: ParameterType.PARAMETER_INTEGER,
          str: ParameterType.PARAMETER_STRING, bool: ParameterType.PARAMETER_BOOL}


def declare(node, name, default, description):
    """Declare a parameter with a descriptor; list defaults become double arrays."""
    if isinstance(default, (list, tuple)):
        ptype = ParameterType.PARAMETER_DOUBLE_ARRAY
        default = [float(v) for v in default]
    else:
        ptype = _TYPES[type(default)]
    node.declare_parameter(name, default, ParameterDescriptor(description=description, type=ptype))
    return node.get_parameter(name).value


def spin_main(node_factory, args=None):
    """Init, spin, and shut down cleanly on Ctrl-C / external shutdown (no traceback)."""
    rclpy.init(args=args)
    node = None
    try:
        node = node_factory()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except RuntimeError:
        # Ctrl-C can shut the context down while the executor is taking a message; rclpy then
        # raises from take_message. That is a shutdown, not a failure; anything else is re-raised.
        if rclpy.ok():
            raise
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
