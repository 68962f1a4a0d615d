"""The one controller interface (no ROS): what every controller gets and what it returns.

Open loop (`pid.StaticFeedforward`), PID (`pid.PIDController`), linear MPC (`mpc.LinearMPC`) and
predictive sampling (`sampling.PredictiveSampling`) implement `Controller`. They all take the
joint-state estimate, the reference with its preview and the time step, and return a
`ControlOutput`; `step.ControlStep` calls them and nothing branches on which one it is.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

#: s: a reference is carried along its own velocity at most this far ahead (late references
#: are held beyond it, not extrapolated; the planners' preview over their horizon is capped too).
MAX_PREVIEW_S = 0.1


@dataclass(frozen=True)
class Estimate:
    """Joint state estimate at `stamp` (s, the mocap frame's time): angles (rad), rates (rad/s)."""

    q: np.ndarray
    qd: np.ndarray
    stamp: float


@dataclass(frozen=True)
class Preview:
    """The reference's own future as its publisher sent it (the /reference/preview trajectory):
    samples of the angles (rad, (K, n)) and velocities (rad/s) at times `t` (s, ascending, on
    the estimates' clock). Between samples linear; before the first and after the last, held."""

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    #: the same samples as lists, for `sample` at one time (every control cycle)
    _rows: tuple[list[float], list[list[float]], list[list[float]]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        rows = tuple(np.asarray(v).tolist() for v in (self.t, self.q, self.qd))
        object.__setattr__(self, '_rows', rows)

    def sample(self, times: Any) -> tuple[np.ndarray, np.ndarray]:
        """(angles, velocities) at `times` (a scalar → (n,), an array → (len, n))."""
        if isinstance(times, float):
            return self._sample_one(times)
        tt = np.atleast_1d(np.asarray(times, float))
        t = self.t
        i = np.clip(np.searchsorted(t, tt, side='right') - 1, 0, len(t) - 2)
        w = np.clip((tt - t[i]) / (t[i + 1] - t[i]), 0.0, 1.0)[:, None]
        q = self.q[i] + w * (self.q[i + 1] - self.q[i])
        qd = self.qd[i] + w * (self.qd[i + 1] - self.qd[i])
        return (q[0], qd[0]) if np.ndim(times) == 0 else (q, qd)

    def _sample_one(self, time: float) -> tuple[np.ndarray, np.ndarray]:
        """`sample` at one time in plain floats: the same operations as on arrays, so the same
        values, at a fraction of numpy's per-call cost on a handful of numbers."""
        t, q, qd = self._rows
        i = min(max(bisect.bisect_right(t, time) - 1, 0), len(t) - 2)
        t0 = t[i]
        w = min(max((time - t0) / (t[i + 1] - t0), 0.0), 1.0)
        q0, q1, v0, v1 = q[i], q[i + 1], qd[i], qd[i + 1]
        return (
            np.array([a + w * (b - a) for a, b in zip(q0, q1, strict=True)]),
            np.array([a + w * (b - a) for a, b in zip(v0, v1, strict=True)]),
        )


@dataclass(frozen=True)
class Reference:
    """The reference at the estimate's time (`q`, rad) with its velocity (`qd`, rad/s). The
    preview `at(ahead)` is the reference's own future where its publisher sent one (`preview`,
    from the estimate's `stamp` on); otherwise it carries q forward along qd, at most
    `max_preview` s."""

    q: np.ndarray
    qd: np.ndarray
    max_preview: float = MAX_PREVIEW_S
    preview: Preview | None = None
    stamp: float = 0.0

    def at(self, ahead: Any) -> np.ndarray:
        """The angles `ahead` s on; `ahead` may be an array of times (→ (len, n))."""
        if self.preview is not None:
            return self.preview.sample(self.stamp + np.asarray(ahead, float))[0]
        a = np.minimum(ahead, self.max_preview)
        if np.ndim(a) == 0:
            return self.q + self.qd * a
        return self.q[None, :] + self.qd[None, :] * np.asarray(a)[:, None]

    def velocity_at(self, ahead: Any) -> np.ndarray:
        """The velocities `ahead` s on: the preview's, or qd up to max_preview and 0 beyond (the
        extrapolated reference stops there)."""
        if self.preview is not None:
            return self.preview.sample(self.stamp + np.asarray(ahead, float))[1]
        moving = np.asarray(ahead, float) < self.max_preview
        if np.ndim(moving) == 0:
            return self.qd if moving else np.zeros_like(self.qd)
        return np.where(moving[:, None], self.qd[None, :], 0.0)


@dataclass(frozen=True)
class ControlOutput:
    """A controller's answer: valve pressures (kPa, [maa, baa]) within [0, p_max], which of
    them sit on a bound, and controller-specific figures for diagnostics."""

    pressures: np.ndarray
    saturated: np.ndarray
    info: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Controller(Protocol):
    """A controller of the leg. `step` is called once per estimate, at most every few ms."""

    def reset(self) -> None:
        """Forget internal state (integrators, warm starts, predicted valve pressures)."""

    def step(self, state: Estimate, ref: Reference, dt: float, p_max: float) -> ControlOutput:
        """Pressures for the next period. `dt`: s since the previous estimate; `p_max`: kPa, the
        upper bound the output must respect (it may change between calls)."""
