"""Joint reference trajectories (no ROS): steps, the paper's triangle, sinusoids.

The triangle's vertices are the poses the leg reaches at rest under the paper's pressure steps
(6.15, 2.73) → (3.76, 7.26) → (19.80, 8.52) kPa, computed with the analytic static model
(`statics.equilibrium`), which agrees with the MuJoCo model's settled poses to ~3e-5 rad
(tests/control/test_statics.py). Each segment is a smooth (minimum-jerk) move followed by a hold.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType

import numpy as np

TRIANGLE_KPA = ((6.15, 2.73), (3.76, 7.26), (19.80, 8.52))
#: s, the shortest waypoint segment (move + hold): shorter ones would be crossed within a
#: frame, and a zero one divides by zero
MIN_SEGMENT_S = 1e-3


def min_jerk(s):
    """Position and its derivative in s (within [0, 1]) of the minimum-jerk move, for a float or
    an array (the vector environments' references too): powers by products in both, so that a
    preview's samples (Waypoints.samples, arrays) are bit for bit the trajectory's values
    (floats); numpy's power rounds differently from libm's."""
    s2 = s * s
    s3 = s2 * s
    s4 = s3 * s
    return 10 * s3 - 15 * s4 + 6 * (s4 * s), (30 * s2 - 60 * s3 + 30 * s4)


@dataclass
class Waypoints:
    """Piecewise: hold each pose `hold` s after a `move` s minimum-jerk transition; loops."""

    poses: Sequence[Sequence[float]]
    move: float = 0.5
    hold: float = 1.5
    loop: bool = True

    def __post_init__(self) -> None:
        if not self.move + self.hold >= MIN_SEGMENT_S:
            raise ValueError(
                f'waypoints: move + hold = {self.move + self.hold:g} s; a segment needs at '
                f'least {MIN_SEGMENT_S:g} s'
            )
        self._P = np.asarray(self.poses, float)  # once, not at every sample
        self._rows: list[list[float]] = self._P.tolist()

    def __call__(self, t: float):
        q, qd = self.at(t)
        return np.array(q), np.array(qd)

    def at(self, t: float) -> tuple[list[float], list[float]]:
        """The trajectory at `t` as plain floats (the reference node's tick, every frame: numpy
        on a pose of two numbers cost most of it). Element by element the operations of the
        array form (`samples`), so the same values."""
        rows = self._rows
        seg = self.move + self.hold
        n = len(rows)
        k = int(t // seg)
        if n == 1 or (not self.loop and k >= n):
            return list(rows[-1]), [0.0] * len(rows[-1])
        if k == 0:
            return list(rows[0]), [0.0] * len(rows[0])
        tau = t - k * seg
        a, b = rows[(k - 1) % n], rows[k % n]
        if self.move > 0:
            s, ds = min_jerk(min(max(tau / self.move, 0.0), 1.0))
            rate = ds / self.move if tau < self.move else 0.0
        else:
            s, rate = 1.0, 0.0
        return (
            [x + s * (y - x) for x, y in zip(a, b, strict=True)],
            [rate * (y - x) for x, y in zip(a, b, strict=True)],
        )

    def samples(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(angles, velocities) at each of `times`, one row a time: what calling the trajectory
        at each time gives, bit for bit (tests/control/test_reference.py), in one pass of array
        arithmetic instead of a call a sample (the reference node's preview: 28 a message)."""
        P = self._P
        times = np.asarray(times, float)
        n = len(P)
        seg = self.move + self.hold
        k_float = np.floor_divide(times, seg)
        tau = times - k_float * seg
        k = k_float.astype(np.int64)
        if self.move > 0:
            pos, ds = min_jerk(np.minimum(np.maximum(tau / self.move, 0.0), 1.0))
            vel = np.where(tau < self.move, ds / self.move, 0.0)
        else:
            pos, vel = np.ones_like(times), np.zeros_like(times)
        a, b = P[(k - 1) % n], P[k % n]
        q = a + pos[:, None] * (b - a)
        qd = vel[:, None] * (b - a)
        last = (k >= n) & (not self.loop) if n > 1 else np.ones_like(k, bool)
        first = (k == 0) & ~last
        q[last], q[first] = P[-1], P[0]
        qd[last | first] = 0.0
        return q, qd


@dataclass
class Sinusoid:
    center: Sequence[float] = (1.5, 0.6)
    amplitude: Sequence[float] = (0.1, 0.15)
    frequency: float = 0.25  # Hz
    phase: Sequence[float] = (0.0, math.pi / 2)

    def __call__(self, t: float):
        w = 2 * math.pi * self.frequency
        ph = w * t + np.asarray(self.phase)
        A = np.asarray(self.amplitude)
        return np.asarray(self.center) + A * np.sin(ph), A * w * np.cos(ph)


def triangle_poses(params, pressures=TRIANGLE_KPA) -> np.ndarray:
    from equimus_description.statics import equilibrium

    return np.array([equilibrium(p, params) for p in pressures])


def make_reference(kind: str, params=None, **kw):
    """'triangle' | 'steps' | 'sine' from parameters (poses in rad, times in s)."""
    if kind == 'triangle':
        poses = kw.pop('poses', None)
        if poses is None:
            poses = triangle_poses(params)
        return Waypoints(poses, **kw)
    if kind == 'steps':
        return Waypoints(kw.pop('poses'), **kw)
    if kind == 'sine':
        return Sinusoid(**kw)
    raise ValueError(f"unknown reference kind {kind!r}: use 'triangle', 'steps' or 'sine'")


def float_sampler(trajectory: Callable[[float], tuple]) -> Callable[[float], tuple]:
    """The trajectory at one time as two lists of floats: its own `at` where it has one, else
    its arrays converted."""
    at = getattr(trajectory, 'at', None)
    if at is not None:
        return at

    def sample(t: float) -> tuple[list[float], list[float]]:
        q, qd = trajectory(t)
        return [float(v) for v in q], [float(v) for v in qd]

    return sample


#: s of its own future the reference sends ahead (the reference node's `preview` default, and
#: what the plain-code loop of the benchmarks sends) and s between its points
PREVIEW_S = 0.45
PREVIEW_SPACING_S = 1.0 / 60.0
#: segments from time 0 a preview's time may be (its segment number an integer in C too)
MAX_SEGMENTS = 1e15


def preview_count(horizon: float, spacing: float) -> int:
    """How many samples a preview of `horizon` s holds, `spacing` s apart (at least two)."""
    return max(2, int(math.ceil(horizon / spacing - 1e-9)) + 1)


def preview_samples(
    trajectory: Callable[[float], tuple], t: float, horizon: float, spacing: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The trajectory's next `horizon` s from `t` as its publisher sends it (times, angles,
    velocities; `spacing` s apart, the first at `t`, at least two samples)."""
    times = t + spacing * np.arange(preview_count(horizon, spacing))
    sampled = getattr(trajectory, 'samples', None)  # all at once, as calling it at each time
    if sampled is not None:
        q, qd = sampled(times)
        return times, q, qd
    samples = [trajectory(float(x)) for x in times]
    q = np.array([np.asarray(a, float) for a, _ in samples])
    qd = np.array([np.asarray(b, float) for _, b in samples])
    return times, q, qd


def reference_at(
    q_ref, qd_ref, ref_stamp: float, stamp: float, max_preview: float = 0.1
) -> np.ndarray:
    """The reference at a state's time `stamp` from the latest sample (q_ref, qd_ref at ref_stamp).

    A reference that arrives late (its node delayed by load) is carried forward along its own
    velocity, at most `max_preview` s; one stamped after the state is used as it is.
    """
    ahead = min(max(stamp - ref_stamp, 0.0), max_preview)
    return np.asarray(q_ref, float) + np.asarray(qd_ref, float) * ahead


def preview_rows(
    trajectory: Callable[[float], tuple],
    t: float,
    stamp: float,
    horizon: float,
    spacing: float,
    compiled: ModuleType | None = None,
) -> list[float]:
    """`preview_samples` as the preview message carries it: rows of (time on the node clock
    from `stamp`, angles, velocities), flattened row by row. A `Waypoints` trajectory goes
    through the `compiled` kernels' `waypoint_preview` where given (the reference node's, 10 Hz
    in every frame of the composed graph: numpy's calls from cold caches cost most of its
    preview there, docs/benchmarks.md, issue 30)."""
    if compiled is not None and isinstance(trajectory, Waypoints):
        w = trajectory
        count = preview_count(horizon, spacing)
        rows: list[float] = compiled.waypoint_preview(
            w._rows, w.move, w.hold, w.loop, t, stamp, spacing, count
        )
        return rows
    times, q, qd = preview_samples(trajectory, t, horizon, spacing)
    return _flat_rows(times, t, stamp, q, qd)


def _flat_rows(times: np.ndarray, t: float, stamp: float, q, qd) -> list[float]:
    """Rows of (time on the node clock from `stamp`, angles, velocities), flattened row by
    row: the preview message's data."""
    return np.column_stack([stamp + (times - t), q, qd]).ravel().tolist()


def waypoint_preview(
    poses: Sequence[Sequence[float]],
    move: float,
    hold: float,
    loop: bool,
    t: float,
    stamp: float,
    spacing: float,
    count: int,
) -> list[float]:
    """The Python form of the compiled `waypoint_preview` (kernels.py), which returns the same
    bits: `Waypoints(poses, move, hold, loop)` previewed as `preview_rows` does, at `count`
    times `spacing` s apart from `t`."""
    if not all(math.isfinite(x) for x in (move + hold, t, stamp, spacing)) or count < 0:
        raise ValueError('waypoint_preview: finite times, move + hold > 0 and count >= 0')
    w = Waypoints(poses, move, hold, loop)
    if len(w._P) == 0:
        raise ValueError('waypoint_preview: no poses')
    times = t + spacing * np.arange(count)
    if not (np.abs(np.floor_divide(times, move + hold)) < MAX_SEGMENTS).all():
        raise ValueError(f'waypoint_preview: a time more than {MAX_SEGMENTS:g} segments from 0')
    q, qd = w.samples(times)
    return _flat_rows(times, t, stamp, q, qd)
