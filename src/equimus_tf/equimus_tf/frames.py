"""The transforms of /tf and /tf_static as plain data (no ROS): what robot_state_publisher would
compute from the URDF, plus the motion-capture frame.

A transform is (parent, child, xyz, quaternion xyzw). The node turns them into
geometry_msgs/TransformStamped; the tests compare them with the URDF's forward kinematics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from equimus_description.interface import FRAME_MOCAP, FRAME_WORLD
from equimus_description.urdf import (
    axis_angle_matrix,
    matrix_to_quat,
    parse_urdf_chain,
    rpy_matrix,
)


@dataclass(frozen=True)
class Transform:
    parent: str
    child: str
    xyz: tuple[float, float, float]
    quat: tuple[float, float, float, float]  # x, y, z, w


def _transform(parent: str, child: str, xyz, rot) -> Transform:
    q = matrix_to_quat(rot)
    return Transform(
        parent,
        child,
        (float(xyz[0]), float(xyz[1]), float(xyz[2])),
        (float(q[0]), float(q[1]), float(q[2]), float(q[3])),
    )


class LegFrames:
    """The URDF's kinematic tree (parsed once): fixed joints once, movable ones per joint state."""

    def __init__(self, urdf: str):
        self.chain = parse_urdf_chain(urdf)
        self.joints = tuple(j for (_, j, kind, *_r) in self.chain.values() if kind != 'fixed')
        self._origin = {child: rpy_matrix(c[4]) for child, c in self.chain.items()}
        # Per movable joint, what `moving` needs in plain floats (it runs at every joint state):
        # (parent, child, joint, xyz, origin quaternion, unit axis).
        self._movable = [
            (
                parent,
                child,
                joint,
                (float(xyz[0]), float(xyz[1]), float(xyz[2])),
                tuple(float(v) for v in matrix_to_quat(self._origin[child])),
                tuple(float(v) for v in np.asarray(axis, float) / np.linalg.norm(axis)),
            )
            for child, (parent, joint, kind, xyz, _rpy, axis) in self.chain.items()
            if kind != 'fixed'
        ]

    def static(self) -> list[Transform]:
        """Transforms of the fixed joints (world → root body)."""
        return [
            _transform(parent, child, xyz, self._origin[child])
            for child, (parent, _, kind, xyz, _rpy, _axis) in self.chain.items()
            if kind == 'fixed'
        ]

    def moving(self, names: Sequence[str], positions: Sequence[float]) -> list[Transform] | None:
        """Transforms of the movable joints at a joint state; None unless every joint of the
        tree has a finite position (an invalid estimate publishes no stale or NaN frame)."""
        q = {name: float(value) for name, value in zip(names, positions, strict=False)}
        if not all(j in q and math.isfinite(q[j]) for j in self.joints):
            return None
        out = []
        for parent, child, joint, xyz, (x1, y1, z1, w1), (ax, ay, az) in self._movable:
            # origin rotation, then the hinge's: q_origin * (cos(θ/2), sin(θ/2)·axis)
            half = 0.5 * q[joint]
            s, w2 = math.sin(half), math.cos(half)
            x2, y2, z2 = s * ax, s * ay, s * az
            out.append(
                Transform(
                    parent,
                    child,
                    xyz,
                    (
                        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
                        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
                        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
                    ),
                )
            )
        return out

    def moving_by_matrix(
        self, names: Sequence[str], positions: Sequence[float]
    ) -> list[Transform] | None:
        """`moving` through rotation matrices (the reference the tests compare it with)."""
        q = {name: float(value) for name, value in zip(names, positions, strict=False)}
        if not all(j in q and math.isfinite(q[j]) for j in self.joints):
            return None
        return [
            _transform(parent, child, xyz, self._origin[child] @ axis_angle_matrix(axis, q[joint]))
            for child, (parent, joint, kind, xyz, _rpy, axis) in self.chain.items()
            if kind != 'fixed'
        ]


def mocap_frame(xyz: Sequence[float], rpy: Sequence[float]) -> Transform:
    """world → mocap: where the motion-capture frame sits in the world frame."""
    return _transform(FRAME_WORLD, FRAME_MOCAP, np.asarray(xyz, float), rpy_matrix(rpy))


def pose_is_finite(position: Sequence[float], orientation: Sequence[float]) -> bool:
    """An occluded body is published with NaN fields: no frame for it."""
    # One check of a sum: NaN and ±inf propagate through it (a pose in metres cannot overflow).
    return math.isfinite(sum(position) + sum(orientation))


class RateGate:
    """At most `rate` publications per second of message time (stamps, so sim time works too):
    a stamp passes when a period has gone by since the last one that passed (10 % slack, so a
    120 Hz stream under a 60 Hz gate keeps every second frame). rate = 0: everything passes. A
    stamp that goes backwards (a restarted source) passes and restarts the gate."""

    def __init__(self, rate: float):
        self.period_ns = int(1e9 / rate * 0.9) if rate > 0 else 0
        self.last_ns: int | None = None

    def passes(self, stamp_ns: int) -> bool:
        """Whether `ready` would pass this stamp, without taking it (skip work it would drop)."""
        last = self.last_ns
        return last is None or not last <= stamp_ns < last + self.period_ns

    def ready(self, stamp_ns: int) -> bool:
        if not self.passes(stamp_ns):
            return False
        self.last_ns = stamp_ns
        return True


class StampBatch:
    """Groups the rigid bodies of one motion-capture frame (same stamp) into one /tf message:
    a group is released when every expected body has arrived, or, incomplete, when a newer
    stamp starts. An occluded body counts as arrived with no transform. Late stamps are dropped."""

    def __init__(self, keys: Sequence[str]):
        self.keys = frozenset(keys)
        self.stamp_ns: int | None = None
        self.items: dict[str, object] = {}

    def add(self, key: str, stamp_ns: int, item: object | None) -> list | None:
        released: list = []
        if self.stamp_ns is not None and stamp_ns != self.stamp_ns:
            if stamp_ns < self.stamp_ns:
                return None
            released = [v for v in self.items.values() if v is not None]
            self.items = {}
        self.stamp_ns = stamp_ns
        self.items[key] = item
        if set(self.items) >= self.keys:
            released += [v for v in self.items.values() if v is not None]
            self.items = {}
        return released or None
