"""Wall-clock pacing of the simulation loop (plain Python, no ROS).

The loop runs on absolute deadlines t0 + k·period taken from a monotonic clock, so sleep errors
never accumulate (no drift): a late tick makes the next sleep shorter instead of pushing every
later tick back. Lateness of each tick against its deadline is the loop jitter reported on
/diagnostics. If the loop falls more than `max_lag` behind (machine suspended, debugger, a
far-too-slow model) it re-anchors the deadlines instead of running a burst of catch-up ticks,
and counts the event as an overrun.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

import numpy as np


class JitterStats:
    """Rolling window of tick lateness (seconds) with percentiles."""

    def __init__(self, window: int = 1200):
        self._buf: deque[float] = deque(maxlen=int(window))

    def add(self, lateness_s: float) -> None:
        self._buf.append(float(lateness_s))

    def __len__(self) -> int:
        return len(self._buf)

    def clear(self) -> None:
        self._buf.clear()

    def summary(self) -> dict:
        """p50/p99/max lateness in seconds over the window (NaN when empty)."""
        if not self._buf:
            return {'p50': math.nan, 'p99': math.nan, 'max': math.nan, 'n': 0}
        a = np.fromiter(self._buf, float, len(self._buf))
        p50, p99 = np.percentile(a, [50.0, 99.0])
        return {'p50': float(p50), 'p99': float(p99), 'max': float(a.max()), 'n': int(a.size)}


#: s a tick may fall behind its deadline before the pacer re-anchors the schedule at now (an
#: overrun) instead of catching up: the most the loop ever runs ahead of 1x to catch up
MAX_LAG_S = 0.25


class Pacer:
    """Absolute-deadline pacing: `wait()` sleeps until the next deadline and returns its lateness.

    period: wall seconds between ticks (sim period / rate_factor). period 0 means free-running:
    `wait()` returns immediately and records no jitter.
    """

    def __init__(
        self,
        period: float,
        max_lag: float = MAX_LAG_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        window: int = 1200,
    ):
        if not (period >= 0.0 and math.isfinite(period)):
            raise ValueError(f'pacing period must be a finite number >= 0 s, got {period!r}')
        self.period = float(period)
        self.max_lag = float(max_lag)
        self._clock = clock
        self._sleep = sleep
        self.jitter = JitterStats(window)
        self.overruns = 0
        self.ticks = 0
        self._t0 = clock()
        self._k = 0

    def restart(self) -> None:
        """Re-anchor the deadlines at now (after a pause, a reset of the schedule, etc.)."""
        self._t0 = self._clock()
        self._k = 0

    def next_deadline(self) -> float:
        return self._t0 + (self._k + 1) * self.period

    def wait(self) -> float:
        """Block until the next deadline; return lateness (s) of the wake-up against it."""
        self.ticks += 1
        if self.period == 0.0:
            return 0.0
        self._k += 1
        deadline = self._t0 + self._k * self.period
        now = self._clock()
        if deadline > now:
            self._sleep(deadline - now)
            now = self._clock()
        lateness = now - deadline
        if lateness > self.max_lag:
            self.overruns += 1
            self._t0 = now
            self._k = 0
        self.jitter.add(lateness)
        return lateness
