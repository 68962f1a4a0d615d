"""The one controller interface (no ROS): what every controller gets and what it returns.

Open loop (`pid.StaticFeedforward`), PID (`pid.PIDController`), linear MPC (`mpc.LinearMPC`) and
predictive sampling (`sampling.PredictiveSampling`) implement `Controller`. They all take the
joint-state estimate, the reference with its preview and the time step, and return a
`ControlOutput`; `step.ControlStep` calls them and nothing branches on which one it is.
"""

from __future__ import annotations

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
class Reference:
    """The reference at the estimate's time (`q`, rad) with its velocity (`qd`, rad/s): the
    preview `at(ahead)` carries it forward along qd, at most `max_preview` s."""

    q: np.ndarray
    qd: np.ndarray
    max_preview: float = MAX_PREVIEW_S

    def at(self, ahead: Any) -> np.ndarray:
        """q + qd·min(ahead, max_preview); `ahead` may be an array of times (→ (n, 2))."""
        a = np.minimum(ahead, self.max_preview)
        if np.ndim(a) == 0:
            return self.q + self.qd * a
        return self.q[None, :] + self.qd[None, :] * np.asarray(a)[:, None]


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
