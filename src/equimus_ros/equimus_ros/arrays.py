"""One way to build the graph's array messages: 1-D Float64MultiArray (commands) and tables of
rows (the reference's preview). The stamped pressure state (measured and applied pressures:
sensor_msgs/JointState) is written pre-serialised by `equimus_ros.cdr.PressureStateWriter`.

The layout follows std_msgs/MultiArrayLayout: one dimension whose label names the elements
(equimus_description.interface.PRESSURE_LAYOUT for pressures) and whose stride is the number of
elements (dim[0].stride = size of the whole array). This module imports no equimus package.
"""

from __future__ import annotations

from collections.abc import Collection

from std_msgs.msg import Float64MultiArray, MultiArrayDimension

__all__ = ['float_array', 'table_array']


def float_array(values: Collection[float], label: str) -> Float64MultiArray:
    """A 1-D array message of `values` with the layout label `label`."""
    n = len(values)
    msg = Float64MultiArray()
    msg.layout.dim = [MultiArrayDimension(label=label, size=n, stride=n)]
    msg.data = [float(v) for v in values]
    return msg


def table_array(
    rows: Collection[Collection[float]], row_label: str, columns: Collection[str]
) -> Float64MultiArray:
    """A 2-D array message, row-major: dim[0] the rows (`row_label`), dim[1] the columns, its
    label the column names joined by commas."""
    n_rows, n_cols = len(rows), len(columns)
    msg = Float64MultiArray()
    msg.layout.dim = [
        MultiArrayDimension(label=row_label, size=n_rows, stride=n_rows * n_cols),
        MultiArrayDimension(label=','.join(columns), size=n_cols, stride=n_cols),
    ]
    msg.data = [float(v) for row in rows for v in row]
    return msg
