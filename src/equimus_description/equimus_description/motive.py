"""Motive's streamed frame -> the ROS frame `mocap` (REP-103: x forward, y left, z up; metres).

Motive streams in the up axis of its streaming setting ("Up Axis": Y by default, or Z). The
bridge (and the simulation's virtual mocap, which models Motive's default stream) publish every
pose in the Z-up frame `mocap`: from a Y-up stream they rotate +90° about X, a position
(x, y, z) -> (x, −z, y) and a quaternion's vector part the same (w unchanged), which is what
Motive itself streams with Up Axis = Z; a Z-up stream passes unchanged. No ROS imports.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ['DEFAULT_UP_AXIS', 'UP_AXES', 'check_up_axis', 'motive_to_ros']

#: Values of Motive's streaming "Up Axis" setting, as the bridge's `up_axis` parameter names them.
UP_AXES = ('y', 'z')
#: Motive's default.
DEFAULT_UP_AXIS = 'y'

Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]


def check_up_axis(value: str) -> str:
    """The value if it names an up axis, else ValueError saying what to set."""
    if value not in UP_AXES:
        raise ValueError(
            f"up_axis={value!r}: use 'y' or 'z', as Motive's Streaming > Up Axis is set"
        )
    return value


def motive_to_ros(position: Sequence[float], quat_xyzw: Sequence[float], up_axis: str) -> tuple:
    """A Motive pose (position m, quaternion x, y, z, w) in the Z-up ROS frame `mocap`."""
    x, y, z = (float(v) for v in position)
    qx, qy, qz, qw = (float(v) for v in quat_xyzw)
    if up_axis == 'z':
        return (x, y, z), (qx, qy, qz, qw)
    return (x, -z, y), (qx, -qz, qy, qw)
