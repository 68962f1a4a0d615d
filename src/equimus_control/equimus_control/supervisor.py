"""Safety around any controller (no ROS): vent (0 kPa) on joint-limit breach, invalid state, or a
stale state; otherwise pass the controller's command through, clipped to [0, p_max].

Venting latches until the state is valid and back inside the safe range (with a margin), so a
leg resting on a guard boundary does not chatter the valves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from equimus_description.config import ConfigError, param, validate_fields
from equimus_description.valve import HARD_MAX_KPA, P_MIN_KPA

VENT = np.full(2, P_MIN_KPA)


@dataclass(frozen=True)
class SafetyConfig:
    """The control step's guard and command bound; every field may change while running."""

    safe_min: tuple[float, float] = param(
        (0.6, -0.1),
        'rad, joint-limit guard lower bound [hip, knee] (the knee may rest on its stop at 0)',
        range=(-3.2, 3.2),
        runtime=True,
    )
    safe_max: tuple[float, float] = param(
        (2.5, 2.0),
        'rad, joint-limit guard upper bound [hip, knee]',
        range=(-3.2, 3.2),
        runtime=True,
    )
    rearm_margin: float = param(
        0.05, 'rad inside the safe range before venting ends', range=(0.0, 1.0), runtime=True
    )
    stale_timeout: float = param(
        0.25,
        's without a valid joint state (steady clock; sim time in the composed sim graph) -> vent',
        range=(0.01, 10.0),
        runtime=True,
    )
    p_max: float = param(
        HARD_MAX_KPA,
        f'kPa, upper command bound (lower bound 0), at most {HARD_MAX_KPA:g}',
        range=(0.0, HARD_MAX_KPA),
        runtime=True,
    )

    def __post_init__(self) -> None:
        validate_fields(self)
        if not self.safe_min or len(self.safe_min) != len(self.safe_max):
            raise ConfigError(
                f'safe_min={self.safe_min!r}, safe_max={self.safe_max!r}: one value per joint '
                'in each, the same number'
            )
        if not self.p_max > 0:
            raise ConfigError(f'p_max={self.p_max!r}: must be > 0 kPa and <= {HARD_MAX_KPA:g}')
        if any(lo >= hi for lo, hi in zip(self.safe_min, self.safe_max, strict=True)):
            raise ConfigError(
                f'safe_min={self.safe_min!r} must be below safe_max='
                f'{self.safe_max!r} for every joint'
            )


def check_joints(cfg: SafetyConfig, n_joints: int) -> None:
    """The guard range must have one value per joint of the limb being controlled."""
    if len(cfg.safe_min) != n_joints:
        raise ConfigError(
            f'safe_min={list(cfg.safe_min)!r}, safe_max={list(cfg.safe_max)!r}: the limb has '
            f'{n_joints} joints; give one value per joint'
        )


class Supervisor:
    """Guards for a limb of `n_joints` joints and `n_valves` valves (the rig's leg: 2 and 2;
    the 2-joint case runs in plain floats, others on arrays)."""

    def __init__(
        self, cfg: SafetyConfig | None = None, n_joints: int = 2, n_valves: int = 2
    ) -> None:
        self.cfg = cfg if cfg is not None else SafetyConfig()
        check_joints(self.cfg, n_joints)
        self.n_joints, self.n_valves = n_joints, n_valves
        self.vent = np.full(n_valves, P_MIN_KPA)
        self.last_valid_time: float | None = None
        self.reason = 'no joint state yet'
        self.venting = True
        self.trips: dict[str, int] = {'joint_limit': 0, 'invalid': 0, 'stale': 0}

    def _trip(self, kind: str, reason: str) -> None:
        if not self.venting or not self.reason.startswith(kind):
            self.trips[kind] += 1
        self.venting = True
        self.reason = f'{kind}: {reason}'

    def check_state(self, q: np.ndarray, now: float, qd: np.ndarray | None = None) -> bool:
        """True if the controller may act on this state (angles q, rates qd); False → VENT."""
        # Plain floats: every control cycle, and numpy's per-call overhead on 2-vectors was
        # most of this check's cost. The same tests as on arrays.
        if self.n_joints != 2:
            return self._check_state_n(np.asarray(q, float), now, qd)
        q = np.asarray(q, float)
        c = self.cfg
        q0, q1 = q.tolist() if q.shape == (2,) else (math.nan, math.nan)
        if not (math.isfinite(q0) and math.isfinite(q1)):
            self._trip(
                'invalid',
                'estimator reports no valid joint state (NaN); '
                'check mocap tracking of base/thigh/calf',
            )
            return False
        if qd is not None and not all(map(math.isfinite, np.asarray(qd, float).ravel().tolist())):
            self._trip('invalid', 'estimator reports a non-finite joint velocity')
            return False
        self.last_valid_time = now
        (lo0, lo1), (hi0, hi1) = c.safe_min, c.safe_max
        if q0 < lo0 or q1 < lo1 or q0 > hi0 or q1 > hi1:
            self._trip(
                'joint_limit',
                f'θ = ({q0:.3f}, {q1:.3f}) rad outside the safe range '
                f'[{lo0:.2f}, {hi0:.2f}] × [{lo1:.2f}, {hi1:.2f}]',
            )
            return False
        if self.venting and self.reason.startswith('joint_limit'):
            m = c.rearm_margin
            if q0 < lo0 + m or q1 < lo1 + m or q0 > hi0 - m or q1 > hi1 - m:
                return False
        self.venting = False
        self.reason = 'ok'
        return True

    def _check_state_n(self, q: np.ndarray, now: float, qd: np.ndarray | None) -> bool:
        """check_state for any number of joints (arrays)."""
        c = self.cfg
        if q.shape != (self.n_joints,) or not np.all(np.isfinite(q)):
            self._trip('invalid', 'estimator reports no valid joint state (NaN)')
            return False
        if qd is not None and not np.all(np.isfinite(np.asarray(qd, float))):
            self._trip('invalid', 'estimator reports a non-finite joint velocity')
            return False
        self.last_valid_time = now
        lo, hi = np.asarray(c.safe_min, float), np.asarray(c.safe_max, float)
        if np.any(q < lo) or np.any(q > hi):
            self._trip(
                'joint_limit',
                f'θ = {np.round(q, 3).tolist()} rad outside the safe range '
                f'{np.round(lo, 2).tolist()} .. {np.round(hi, 2).tolist()}',
            )
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
            self._trip(
                'stale',
                f'no valid joint state for {age:.3f} s '
                f'(> stale_timeout {self.cfg.stale_timeout} s)',
            )
            return True
        return False

    def clip(self, u: np.ndarray) -> np.ndarray:
        u = np.asarray(u, float)
        if self.n_valves != 2:
            if u.shape != (self.n_valves,) or not np.all(np.isfinite(u)):
                self._trip('invalid', f'controller produced a non-finite command {u}')
                return self.vent.copy()
            return np.clip(u, 0.0, self.cfg.p_max)
        u0, u1 = u.tolist() if u.shape == (2,) else (math.nan, math.nan)
        if not (math.isfinite(u0) and math.isfinite(u1)):
            self._trip('invalid', f'controller produced a non-finite command {u}')
            return VENT.copy()
        p_max = self.cfg.p_max
        return np.array([min(max(u0, 0.0), p_max), min(max(u1, 0.0), p_max)])
