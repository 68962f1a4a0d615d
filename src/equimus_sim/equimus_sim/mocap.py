"""Virtual motion capture: MuJoCo body poses as the OptiTrack/NatNet bridge would publish them.

Plain Python, no ROS. The node turns each released `MocapFrame` into one
geometry_msgs/PoseStamped per rigid body (frame_id `mocap`, stamp = capture time), converted to
the Z-up ROS frame (REP-103) exactly as the NatNet bridge converts Motive's default Y-up stream
(equimus_description.motive); the frames here stay Motive's stream, which the rig emulator
serves over NatNet.

Frame convention (Motive default stream, see ../shared/spec/natnet.md §7): Y up, metres,
right-handed, X and Z horizontal. MuJoCo's world is Z up. A world point p_w maps to

    p_m = R_MW · p_w + o,   R_MW = [[1, 0, 0], [0, 0, 1], [0, -1, 0]]   i.e. (x_w, z_w, −y_w) + o

R_MW is a proper rotation (det +1, a −90° turn about X), so orientations map by
q_m = q_MW ⊗ q_w with q_MW = (cos 45°, −sin 45°, 0, 0) (w, x, y, z). The offset o places the
rig in the capture volume: it is chosen so that the base body sits at `base_position`
(default 0.7 m above the floor, in the middle of the volume).

Imperfections, all drawn from one seeded numpy Generator:
- position noise: i.i.d. Gaussian per axis, σ = `position_noise` metres;
- orientation noise: the true orientation is rotated by a random rotation vector with i.i.d.
  Gaussian components, σ = `orientation_noise` rad, applied in the body frame;
- dropped frames: a whole frame is lost (as a lost NatNet datagram: nothing is published).
  A loss event starts at a frame with probability `drop_probability` and lasts a geometric
  number of frames with mean `drop_burst_mean` (1 = independent single drops);
- occlusion: each body is independently untracked in a frame with probability
  `occlusion_probability`; it is then published with every field NaN (docs/interfaces.md);
- latency: a frame is released `latency` seconds (sim time) after its capture; its timestamp stays
  the capture time, as a real bridge stamps mid-exposure.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from equimus_description.interface import BODIES

R_MW = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])
_H = math.sqrt(0.5)
Q_MW = np.array([_H, -_H, 0.0, 0.0])  # wxyz quaternion of R_MW


def quat_mul(a, b) -> np.ndarray:
    """Hamilton product of wxyz quaternions."""
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return np.array(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ]
    )


def quat_mul_rows(a, b) -> np.ndarray:
    """Row-wise Hamilton product; a and b are (4,) or (N, 4) wxyz, broadcast against each other."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    aw, ax, ay, az = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bw, bx, by, bz = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return np.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        axis=-1,
    )


def rotvec_to_quat_rows(v) -> np.ndarray:
    """wxyz quaternions of rotation vectors (N, 3)."""
    v = np.asarray(v, float)
    angle = np.linalg.norm(v, axis=-1, keepdims=True)
    half = 0.5 * angle
    scale = np.where(angle > 1e-12, np.sin(half) / np.where(angle > 1e-12, angle, 1.0), 0.5)
    return np.concatenate([np.cos(half), scale * v], axis=-1)


def quat_to_mat(q) -> np.ndarray:
    """Rotation matrix of a unit wxyz quaternion."""
    w, x, y, z = np.asarray(q, float) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def quat_from_rotvec(v) -> np.ndarray:
    v = np.asarray(v, float)
    angle = float(np.linalg.norm(v))
    if angle < 1e-12:
        return np.array([1.0, 0.5 * v[0], 0.5 * v[1], 0.5 * v[2]]) / math.sqrt(1 + 0.25 * angle**2)
    s = math.sin(0.5 * angle) / angle
    return np.array([math.cos(0.5 * angle), s * v[0], s * v[1], s * v[2]])


def world_to_motive(pos_w, quat_w, offset=(0.0, 0.0, 0.0)):
    """Convert a MuJoCo world pose (Z up, wxyz) to the Motive frame (Y up, wxyz)."""
    p = R_MW @ np.asarray(pos_w, float) + np.asarray(offset, float)
    q = quat_mul(Q_MW, np.asarray(quat_w, float))
    return p, q


def _rows(a) -> list:
    """An array's rows as lists of floats; nested lists as they are."""
    return a.tolist() if isinstance(a, np.ndarray) else a


@dataclass(slots=True)  # slots: made for every body of every frame
class BodyPose:
    """One rigid body in one frame, Motive frame; NaN everywhere when untracked."""

    position: list  # [x, y, z] metres
    orientation: list  # [w, x, y, z]

    @property
    def tracked(self) -> bool:
        return all(math.isfinite(v) for v in self.position + self.orientation)


@dataclass(slots=True)
class MocapFrame:
    frame_number: int
    capture_time: float  # sim seconds: the stamp of every pose in the frame
    release_time: float  # sim seconds at which the bridge would publish it
    bodies: dict = field(default_factory=dict)  # name -> BodyPose


@dataclass
class MocapConfig:
    rate: float = 120.0
    position_noise: float = 0.0  # m, σ per axis
    orientation_noise: float = 0.0  # rad, σ per rotation-vector component
    latency: float = 0.0  # s
    drop_probability: float = 0.0  # per frame, start of a loss event
    drop_burst_mean: float = 1.0  # frames per loss event (mean), >= 1
    occlusion_probability: float = 0.0  # per body and frame
    base_position: Sequence[float] = (0.0, 0.7, 0.0)  # Motive frame, m
    seed: int = 0

    def validate(self) -> None:
        checks = [
            (self.rate > 0 and math.isfinite(self.rate), 'mocap rate must be > 0 Hz'),
            (self.position_noise >= 0, 'position_noise must be >= 0 m'),
            (self.orientation_noise >= 0, 'orientation_noise must be >= 0 rad'),
            (self.latency >= 0 and math.isfinite(self.latency), 'latency must be >= 0 s'),
            (0 <= self.drop_probability < 1, 'drop_probability must be in [0, 1)'),
            (self.drop_burst_mean >= 1, 'drop_burst_mean must be >= 1 frame'),
            (0 <= self.occlusion_probability <= 1, 'occlusion_probability must be in [0, 1]'),
            (
                len(self.base_position) == 3
                and all(math.isfinite(float(v)) for v in self.base_position),
                'base_position must be three finite numbers (m, Motive frame)',
            ),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(f'invalid virtual mocap configuration: {msg}')


class VirtualMocap:
    """Turns true world poses into released Motive-frame frames with noise, drops and latency."""

    def __init__(self, config: MocapConfig | None = None, bodies: Sequence[str] = BODIES):
        self.config = config or MocapConfig()
        self.config.validate()
        self.bodies = tuple(bodies)
        self.rng = np.random.default_rng(self.config.seed)
        self.offset: np.ndarray | None = None
        self._pending: deque[MocapFrame] = deque()
        self._burst_left = 0
        self.frame_number = 0
        self.captured = 0
        self.dropped = 0
        self.occluded = 0

    @property
    def period(self) -> float:
        return 1.0 / self.config.rate

    def calibrate(self, base_pos_w) -> None:
        """Choose the world→Motive offset so the base lands at `base_position` in the volume."""
        self.offset = np.asarray(self.config.base_position, float) - R_MW @ np.asarray(
            base_pos_w, float
        )
        self._offset_t = tuple(self.offset.tolist())

    def _dropped_now(self) -> bool:
        if self._burst_left > 0:
            self._burst_left -= 1
            return True
        p = self.config.drop_probability
        if p > 0 and self.rng.random() < p:
            mean = self.config.drop_burst_mean
            self._burst_left = int(self.rng.geometric(1.0 / mean)) - 1 if mean > 1 else 0
            return True
        return False

    def capture(self, t: float, world_poses: Mapping[str, tuple]) -> MocapFrame | None:
        """Capture one frame at sim time t from {body: (pos_w, quat_w wxyz)} (MuJoCo world).

        Returns the frame (also queued for release) or None when it is dropped.
        """
        P = np.array([world_poses[b][0] for b in self.bodies], float)
        Q = np.array([world_poses[b][1] for b in self.bodies], float)
        return self.capture_arrays(t, P, Q)

    def capture_arrays(self, t: float, P_w, Q_w) -> MocapFrame | None:
        """As `capture`, with world positions (N, 3) and wxyz quaternions (N, 4) in body order
        (arrays or nested lists)."""
        if self.offset is None:
            self.calibrate(P_w[0])
        self.frame_number += 1
        self.captured += 1
        if self._dropped_now():
            self.dropped += 1
            return None
        cfg = self.config
        nb = len(self.bodies)
        poses: list[BodyPose]  # in body order, Motive frame
        if cfg.position_noise > 0 or cfg.orientation_noise > 0:
            P = np.asarray(P_w, float) @ R_MW.T + self.offset
            Q = quat_mul_rows(Q_MW, Q_w)
            if cfg.position_noise > 0:
                P = P + self.rng.normal(0.0, cfg.position_noise, (nb, 3))
            if cfg.orientation_noise > 0:
                Q = quat_mul_rows(
                    Q, rotvec_to_quat_rows(self.rng.normal(0.0, cfg.orientation_noise, (nb, 3)))
                )
            Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
            Q[Q[:, 0] < 0] *= -1.0
            poses = [BodyPose(p, q) for p, q in zip(P.tolist(), Q.tolist(), strict=True)]
        else:
            # Noise-free fast path in plain floats (numpy costs more than the arithmetic here):
            # (x, z, −y) + o, and q_MW ⊗ q with q_MW = (h, −h, 0, 0).
            ox, oy, oz = self._offset_t
            h = _H
            poses = []
            for (x, y, z), (w, qx, qy, qz) in zip(_rows(P_w), _rows(Q_w), strict=True):
                q = [h * (w + qx), h * (qx - w), h * (qy + qz), h * (qz - qy)]
                if q[0] < 0:
                    q = [-c for c in q]
                poses.append(BodyPose([x + ox, z + oy, oz - y], q))
        if cfg.occlusion_probability > 0:
            lost = self.rng.random(nb) < cfg.occlusion_probability
            for i in np.flatnonzero(lost):
                self.occluded += 1
                poses[i] = BodyPose([math.nan] * 3, [math.nan] * 4)
        t = float(t)
        frame = MocapFrame(
            self.frame_number, t, t + cfg.latency, dict(zip(self.bodies, poses, strict=True))
        )
        self._pending.append(frame)
        return frame

    def release(self, now: float) -> list[MocapFrame]:
        """Frames whose release time has come by sim time `now`, oldest first."""
        out = []
        eps = 1e-9
        while self._pending and self._pending[0].release_time <= now + eps:
            out.append(self._pending.popleft())
        return out

    def clear_pending(self) -> None:
        self._pending.clear()

    @property
    def pending(self) -> int:
        return len(self._pending)
