"""One way to build the graph's pressure messages: 1-D Float64MultiArray (commands) and the
stamped pressure state (measured and applied pressures: sensor_msgs/JointState, `pressure_state`).

The layout follows std_msgs/MultiArrayLayout: one dimension whose label names the elements
(equimus_description.interface.PRESSURE_LAYOUT for pressures) and whose stride is the number of
elements (dim[0].stride = size of the whole array). This module imports no equimus package.
"""

from __future__ import annotations

from collections.abc import Collection

from builtin_interfaces.msg import Time
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension

__all__ = ['float_array', 'pressure_state']


def float_array(values: Collection[float], label: str) -> Float64MultiArray:
    """A 1-D array message of `values` with the layout label `label`."""
    n = len(values)
    msg = Float64MultiArray()
    msg.layout.dim = [MultiArrayDimension(label=label, size=n, stride=n)]
    msg.data = [float(v) for v in values]
    return msg


def pressure_state(names: Collection[str], kpa: Collection[float], stamp: Time) -> JointState:
    """Stamped pressures: `name` = the channels, `effort` = their pressures (kPa), no positions
    or velocities (a JointState of the actuators, the drive each one applies)."""
    msg = JointState(name=list(names), effort=[float(v) for v in kpa])
    msg.header.stamp = stamp
    return msg
