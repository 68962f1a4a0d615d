"""Safety around any controller (no ROS): vent (0 kPa) on joint-limit breach, invalid state, or a
stale state; otherwise pass the controller's command through, clipped to [0, p_max].

Venting latches until the state is valid and back inside the safe range (with a margin), so a
leg resting on a guard boundary does not chatter the valves.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

VENT = np.zeros(2)


@dataclass
class SafetyConfig:
    safe_min: tuple = (0.6, -0.1)      # rad, [hip, knee]
    safe_max: tuple = (2.5, 2.0)
    rearm_margin: float = 0.05         # rad inside the range before venting ends
    stale_timeout: float = 0.25        # s without a valid joint state → vent
    p_max: float = 50.0

    @classmethod
    def from_mapping(cls, d: dict) -> 'SafetyConfig':
        kw = {}
        for k, v in d.items():
            if k in cls.__dataclass_fields__:
                kw[k] = tuple(float(x) for x in v) if isinstance(v, (list, tuple)) else float(v)
        return cls(**kw)


class Supervisor:
    def __init__(self, cfg: SafetyConfig = SafetyConfig()):
        self.cfg = cfg
        self.last_valid_time: Optional[float] = None
        self.reason = 'no joint state yet'
        self.venting = True
        self.trips = {'joint_limit': 0, 'invalid': 0, 'stale': 0}

    def _trip(self, kind: str, reason: str):
        if not self.venting or not self.reason.startswith(kind):
            self.trips[kind] += 1
        self.venting = True
        self.reason = f'{kind}: {reason}'

    def check_state(self, q, now: float) -> bool:
        """True if the controller may act on this state; False → publish VENT."""
        q = np.asarray(q, float)
        c = self.cfg
        if q.shape != (2,) or not np.all(np.isfinite(q)):
            self._trip('invalid', 'estimator reports no valid joint state (NaN); '
                       'check mocap tracking of base/thigh/calf')
            return False
        self.last_valid_time = now
        lo, hi = np.asarray(c.safe_min), np.asarray(c.safe_max)
        if np.any(q < lo) or np.any(q > hi):
            self._trip('joint_limit', f'θ = ({q[0]:.3f}, {q[1]:.3f}) rad outside the safe range '
                       f'[{lo[0]:.2f}, {hi[0]:.2f}] × [{lo[1]:.2f}, {hi[1]:.2f}]')
            return False
        if self.venting and self.reason.startswith('joint_limit'):
            m = c.rearm_margin
            if np.any(q < lo + m) or np.any(q > hi - m):
                return False
        self.venting = False
        self.reason = 'ok'
        return True

    def check_stale(self, now: float) -> bool:
        """Timer check: True if the state has gone stale (→ vent)."""
        if self.last_valid_time is None or now - self.last_valid_time > self.cfg.stale_timeout:
            age = math.inf if self.last_valid_time is None else now - self.last_valid_time
            self._trip('stale', f'no valid joint state for {age:.3f} s '
                       f'(> stale_timeout {self.cfg.stale_timeout} s)')
            return True
        return False

    def clip(self, u) -> np.ndarray:
        u = np.asarray(u, float)
        if u.shape != (2,) or not np.all(np.isfinite(u)):
            self._trip('invalid', f'controller produced a non-finite command {u}')
            return VENT.copy()
        return np.clip(u, 0.0, self.cfg.p_max)
