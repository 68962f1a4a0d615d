"""Joint state from motion-capture rigid-body poses (no ROS).

Angles: the relative rotation R_rel = R_parentᵀ R_child of two rigid bodies is reduced to the
signed angle about the hinge axis, measured in the plane perpendicular to it (robust to small
out-of-plane marker errors), plus a calibrated zero offset. The axis is given in the parent and
in the child body frame, so the same code serves the simulation's virtual mocap (body frames =
MuJoCo body frames) and the rig's Motive rigid bodies (arbitrary frames, calibrated).
Frames: positions and the world frame never enter, so the Z-up `mocap` frame (REP-103) changes
nothing; the Y-up -> Z-up conversion also turns the body frames +90° about x, which leaves the
leg's hinge axes (body x) and so the angles unchanged.

Velocities: a two-state constant-velocity Kalman filter per joint (white-acceleration model).
At 120 Hz a raw finite difference multiplies angle noise by ~170 (√2·120); the filter is the
optimal linear causal estimator for this model, has one physical tuning pair (measurement
noise σ_m in rad, acceleration noise σ_a in rad/s²), and handles irregular or missing frames
exactly by predicting over the true time step. Its steady state is an α-β filter.

Lost tracking (NaN pose) or dropped frames: the last estimate is held (velocity reported as 0,
never extrapolated) and flagged HELD; after `max_hold` seconds the state is INVALID and the
filter re-initialises on the next good frame.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from . import kernels


class Status(enum.IntEnum):
    VALID = 0
    HELD = 1
    INVALID = 2


# The per-frame maths below is plain-float Python, not numpy: on 3-vectors numpy's per-call
# overhead dominates (the numpy version took 180 us per frame, most of the fused control loop's
# budget; see docs/benchmarks.md).
Vec3 = tuple[float, float, float]


def _unit_quat(q) -> tuple[float, float, float, float]:
    x, y, z, w = map(float, q)
    n = math.sqrt(x * x + y * y + z * z + w * w)
    if not n > 1e-9:
        raise ValueError('zero or non-finite quaternion')
    return x / n, y / n, z / n, w / n


def quat_to_matrix(q) -> np.ndarray:
    """Rotation matrix of a quaternion given as (x, y, z, w) — the ROS/Motive order."""
    x, y, z, w = _unit_quat(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def _cross(a: Vec3, b: Vec3) -> Vec3:
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def _dot(a: Vec3, b: Vec3) -> float:
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def _rotate(q, v: Vec3, inverse: bool = False) -> Vec3:
    """v rotated by the unit quaternion q = (x, y, z, w) (or by its inverse): v + 2w(u×v) +
    u×(2u×v), the cross products written out (four rotations every frame)."""
    if inverse:
        ux, uy, uz = -q[0], -q[1], -q[2]
    else:
        ux, uy, uz = q[0], q[1], q[2]
    vx, vy, vz = v
    tx, ty, tz = 2 * (uy * vz - uz * vy), 2 * (uz * vx - ux * vz), 2 * (ux * vy - uy * vx)
    w = q[3]
    return (
        vx + w * tx + (uy * tz - uz * ty),
        vy + w * ty + (uz * tx - ux * tz),
        vz + w * tz + (ux * ty - uy * tx),
    )


def _normalized(a) -> Vec3:
    x, y, z = map(float, a)
    n = math.sqrt(x * x + y * y + z * z)
    return x / n, y / n, z / n


def _perpendicular(a: Vec3) -> Vec3:
    """A fixed unit vector perpendicular to a (same rule everywhere, so offsets stay constant)."""
    i = min(range(3), key=lambda k: abs(a[k]))
    e: Vec3 = (float(i == 0), float(i == 1), float(i == 2))  # the unit vector along axis i
    return _normalized(_cross(a, e))


@dataclass(frozen=True)
class HingeSpec:
    """One joint: hinge axis in the parent and child body frames, zero offset (rad)."""

    axis_parent: tuple = (-1.0, 0.0, 0.0)
    axis_child: tuple = (-1.0, 0.0, 0.0)
    offset: float = math.pi / 2

    @functools.cached_property
    def _frames(self) -> tuple[Vec3, Vec3, Vec3]:
        """(unit parent axis, reference vectors ⟂ the axis in the parent and child frames)."""
        ap, ac = _normalized(self.axis_parent), _normalized(self.axis_child)
        return ap, _perpendicular(ap), _perpendicular(ac)

    def angle(self, q_parent, q_child) -> float:
        """Wrapped angle (−π, π] + offset of the child about the hinge, relative to the parent.

        q_parent, q_child: unit quaternions (x, y, z, w) of the two bodies in the world."""
        ap, rp, rc = self._frames
        return _hinge_angle(q_parent, q_child, ap, rp, rc, self.offset)

    def packed(self, parent: int, child: int) -> tuple:
        """This hinge between poses `parent` and `child` as `hinge_angles` takes it: (parent,
        child, axis in the parent, reference vectors in the parent and the child, offset)."""
        ap, rp, rc = self._frames
        return (parent, child, *ap, *rp, *rc, float(self.offset))


def _hinge_angle(q_parent, q_child, ap: Vec3, rp: Vec3, rc: Vec3, offset: float) -> float:
    v = _rotate(q_parent, _rotate(q_child, rc), inverse=True)
    return math.atan2(_dot(ap, _cross(rp, v)), _dot(rp, v)) + offset


@dataclass
class EstimatorConfig:
    hip: HingeSpec = field(default_factory=HingeSpec)
    knee: HingeSpec = field(default_factory=HingeSpec)
    period: float = 1.0 / 120.0  # nominal mocap period (s)
    max_hold: float = 0.1  # s a held estimate stays usable, then INVALID
    sigma_meas: float = 0.002  # rad, angle noise
    sigma_acc: float = 10.0  # rad/s², white acceleration of the motion
    #: Any tree of hinges: (parent pose index, child pose index, hinge) per joint, indices into
    #: the poses given to `measure`. Empty: the 2-joint leg, poses (base, thigh, calf) with
    #: `hip` and `knee` above.
    joints: tuple = ()

    @property
    def chain(self) -> tuple:
        return self.joints or ((0, 1, self.hip), (1, 2, self.knee))


def hinges_from_description(leg) -> tuple[list[str], tuple]:
    """(body names in pose order, EstimatorConfig.joints) for a leg description whose body
    frames are the motion-capture frames (the simulation's virtual mocap: world-aligned at the
    build pose, so each hinge axis is the joint axis in both bodies and the zero is `ref`)."""
    bodies = list(leg.bodies)
    joints = tuple(
        (
            bodies.index(j.parent),
            bodies.index(j.child),
            HingeSpec(tuple(j.axis.tolist()), tuple(j.axis.tolist()), float(j.ref)),
        )
        for j in leg.joints.values()
    )
    return bodies, joints


@dataclass
class JointEstimate:
    stamp: float
    position: np.ndarray
    velocity: np.ndarray
    status: Status
    gap_frames: int = 0  # frames missed just before this one
    held_for: float = 0.0  # s since the last good frame


def pose_is_valid(position, quat) -> bool:
    x, y, z, w = map(float, quat)
    return (
        all(map(math.isfinite, map(float, position)))
        and all(map(math.isfinite, (x, y, z, w)))
        and x * x + y * y + z * z + w * w > 1e-9
    )


# The per-frame arithmetic as kernels (plain values in, new values out): these Python forms are
# the reference; `_kernels.c` has the same functions compiled (kernels.py).
def hinge_angles(poses: Sequence, n_bodies: int, hinges: Sequence[tuple]) -> list[float] | None:
    """The hinges' wrapped angles from [(position, quaternion xyzw)] × n_bodies (each hinge
    `HingeSpec.packed`); None when there are not n_bodies poses or one is untracked."""
    if len(poses) != n_bodies or not all(pose_is_valid(p, q) for p, q in poses):
        return None
    quats = [_unit_quat(q) for _, q in poses]
    return [_hinge_angle(quats[h[0]], quats[h[1]], h[2:5], h[5:8], h[8:11], h[11]) for h in hinges]


def filter_update(
    x: Sequence, P: Sequence, z: Sequence[float], dt: float, sigma_acc: float, sigma_meas: float
) -> tuple[list[list[float]], list[tuple[float, float, float]]]:
    """The filter's new (x, P) after the wrapped angles z, dt s after its last update: each
    angle moved by whole turns to within π of the filter's (Python's float % is numpy's
    remainder), then per joint a predict over dt with F = [[1, dt], [0, 1]] and an update with
    the angle. x: per joint [angle, rate]; P: per joint (p00, p01, p11)."""
    z = [a + (w - a + math.pi) % (2 * math.pi) - math.pi for w, (a, _) in zip(z, x, strict=True)]
    qa = sigma_acc**2
    q00, q01, q11 = qa * dt**4 / 4, qa * dt**3 / 2, qa * dt**2
    R = sigma_meas**2
    x_new, P_new = [], []
    for (a, v), (p00, p01, p11), zj in zip(x, P, z, strict=True):
        a += dt * v  # x = F x
        p00, p01, p11 = (
            p00 + 2 * dt * p01 + dt * dt * p11 + q00,  # P = F P Fᵀ + Q
            p01 + dt * p11 + q01,
            p11 + q11,
        )
        s = p00 + R
        k0, k1 = p00 / s, p01 / s
        r = zj - a
        x_new.append([a + k0 * r, v + k1 * r])
        P_new.append((p00 - k0 * p00, p01 - k0 * p01, p11 - k1 * p01))
    return x_new, P_new


class JointStateEstimator:
    """Feeds on synchronised (base, thigh, calf) poses; one estimate per frame.

    `compiled`: its arithmetic compiled or in Python (None: kernels.use_compiled's choice)."""

    def __init__(self, cfg: EstimatorConfig | None = None, compiled: bool | None = None):
        k = kernels.use_compiled(compiled)
        self._hinge_angles = hinge_angles if k is None else k.hinge_angles
        self._filter_update = filter_update if k is None else k.filter_update
        self.kernels = 'python' if k is None else 'compiled'
        self.cfg = cfg if cfg is not None else EstimatorConfig()
        self.reset()

    @property
    def cfg(self) -> EstimatorConfig:
        return self._cfg

    @cfg.setter
    def cfg(self, cfg: EstimatorConfig) -> None:
        """A new configuration (the estimator node's parameters), its hinges packed once."""
        chain = cfg.chain
        self._cfg = cfg
        self.n = len(chain)
        self.n_bodies = 1 + max(max(a, b) for a, b, _ in chain)
        self._hinges = tuple(h.packed(a, b) for a, b, h in chain)

    def reset(self) -> None:
        #: per joint [angle, rate] and the covariance's (p00, p01, p11), plain floats
        self.x: list[list[float]] | None = None
        self.P: list[tuple[float, float, float]] | None = None
        self.last_good_stamp: float | None = None
        self.last_stamp: float | None = None
        self.last_wrapped = None
        self.dropped_frames = 0
        self.lost_frames = 0

    def measure(self, poses: Sequence) -> np.ndarray | None:
        """Wrapped joint angles from [(pos, quat xyzw)] × (base, thigh, calf) (or the bodies of
        `cfg.joints`); None if untracked."""
        z = self._angles(poses)
        return None if z is None else np.array(z)

    def _angles(self, poses: Sequence) -> list[float] | None:
        """`measure` as plain floats (the filter runs on floats: every frame, and numpy's
        per-call cost on a few numbers was most of its time)."""
        return self._hinge_angles(poses, self.n_bodies, self._hinges)

    def update(self, stamp: float, poses: Sequence) -> JointEstimate:
        cfg = self.cfg
        gap = 0
        if self.last_stamp is not None:
            dt_frame = stamp - self.last_stamp
            if dt_frame <= 0:
                raise ValueError(f'mocap stamp went backwards or repeated ({dt_frame:+.4f} s)')
            gap = max(0, int(round(dt_frame / cfg.period)) - 1)
            self.dropped_frames += gap
        self.last_stamp = stamp
        z = self._angles(poses)
        if z is None:
            self.lost_frames += 1
            return self._held(stamp, gap)
        if (
            self.x is not None
            and self.last_good_stamp is not None
            and stamp - self.last_good_stamp > cfg.max_hold
        ):
            self.x = None  # too long without data: start afresh, do not bridge the gap
        if self.x is None:
            self.x = [[a, 0.0] for a in z]
            self.P = [(cfg.sigma_meas**2, 0.0, 10.0**2) for _ in z]
        else:
            # x, P and last_good_stamp are set together (here), so x implies the others
            assert self.last_good_stamp is not None and self.P is not None
            self.x, self.P = self._filter_update(
                self.x, self.P, z, stamp - self.last_good_stamp, cfg.sigma_acc, cfg.sigma_meas
            )
        self.last_good_stamp = stamp
        return JointEstimate(
            stamp,
            np.array([a for a, _ in self.x]),
            np.array([v for _, v in self.x]),
            Status.VALID,
            gap,
        )

    def _held(self, stamp: float, gap: int) -> JointEstimate:
        if self.x is None or self.last_good_stamp is None:
            return JointEstimate(
                stamp,
                np.full(self.n, np.nan),
                np.full(self.n, np.nan),
                Status.INVALID,
                gap,
                math.inf,
            )
        held = stamp - self.last_good_stamp
        if held > self.cfg.max_hold:
            return JointEstimate(
                stamp, np.full(self.n, np.nan), np.full(self.n, np.nan), Status.INVALID, gap, held
            )
        return JointEstimate(
            stamp, np.array([a for a, _ in self.x]), np.zeros(self.n), Status.HELD, gap, held
        )

    def update_gap(self, stamp: float) -> JointEstimate:
        """No frame at all by `stamp` (e.g. a timer noticed silence): hold or invalidate."""
        return self._held(stamp, 0)
