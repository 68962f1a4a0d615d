"""One way to build the graph's 1-D Float64MultiArray messages (pressures per valve channel).

The layout follows std_msgs/MultiArrayLayout: one dimension whose label names the elements
(equimus_description.interface.PRESSURE_LAYOUT for pressures) and whose stride is the number of
elements (dim[0].stride = size of the whole array). This module imports no equimus package.
"""

from __future__ import annotations

from collections.abc import Collection

from std_msgs.msg import Float64MultiArray, MultiArrayDimension

__all__ = ['float_array']


def float_array(values: Collection[float], label: str) -> Float64MultiArray:
    """A 1-D array message of `values` with the layout label `label`."""
    n = len(values)
    msg = Float64MultiArray()
    msg.layout.dim = [MultiArrayDimension(label=label, size=n, stride=n)]
    msg.data = [float(v) for v in values]
    return msg
