"""Motive's streamed frame -> the ROS frame `mocap` (REP-103: x forward, y left, z up; metres).

Motive streams in the up axis of its streaming setting ("Up Axis": Y by default, or Z). The
bridge (and the simulation's virtual mocap, which models Motive's default stream) publish every
pose in the Z-up frame `mocap`: from a Y-up stream they rotate +90° about X, a position
(x, y, z) -> (x, −z, y) and a quaternion's vector part the same (w unchanged), taken to be the
rotation Motive's own Up Axis = Z setting applies (not checked on a Motive install here;
natnet_emulator --up-axis z_up models it so); a Z-up stream passes unchanged. No ROS imports.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    'DEFAULT_UP_AXIS',
    'NAN_POSE',
    'UP_AXES',
    'Pose',
    'Quat',
    'Vec3',
    'check_up_axis',
    'motive_to_ros',
]

#: Values of Motive's streaming "Up Axis" setting, as the bridge's `up_axis` parameter names them.
UP_AXES = ('y_up', 'z_up')  # not 'y'/'z': a ROS parameter 'y' would be read as YAML true
#: Motive's default.
DEFAULT_UP_AXIS = 'y_up'

Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]
#: One rigid body's pose in `mocap`: position (m), quaternion x, y, z, w.
Pose = tuple[Vec3, Quat]
#: A body that is not tracked (or missing from its frame): every value NaN.
NAN_POSE: Pose = ((float('nan'),) * 3, (float('nan'),) * 4)


def check_up_axis(value: str) -> str:
    """The value if it names an up axis, else ValueError saying what to set."""
    if value not in UP_AXES:
        raise ValueError(
            f"up_axis={value!r}: use 'y_up' or 'z_up', as Motive's Streaming > Up Axis is set"
        )
    return value


def motive_to_ros(position: Sequence[float], quat_xyzw: Sequence[float], up_axis: str) -> tuple:
    """A Motive pose (position m, quaternion x, y, z, w) in the Z-up ROS frame `mocap`."""
    # Unpacked without generators: this runs for every body of every frame (bridge and sim).
    x, y, z = position
    qx, qy, qz, qw = quat_xyzw
    if up_axis == 'z_up':
        return (float(x), float(y), float(z)), (float(qx), float(qy), float(qz), float(qw))
    return (float(x), -float(z), float(y)), (float(qx), -float(qz), float(qy), float(qw))
