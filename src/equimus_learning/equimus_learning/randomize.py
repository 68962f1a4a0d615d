"""Domain randomisation of the leg: each training episode runs on a leg drawn from intervals.

The intervals come from the two identifications of the rig this project has: the authors'
Table V (dynamic) values with the authors' valve lag, which config/leg.yaml holds and the sim
graph simulates by default, and our fit of the real recordings, config/leg_fit.yaml (dead time,
fill and vent constants per valve, stiffness, areas, rest lengths, dampings, knee stop), with
the standard errors of that fit (its `identification.std_error` block). Each parameter is
drawn uniformly from the smallest interval holding both values, widened by `k_se` standard
errors on either side: a policy trained across it meets both identified legs and everything
between (docs/learning.md, "The shipped policy").

The stiffness, area, rest length and area slope of one actuator are drawn together (one
uniform position along their intervals, from the Table V end to the fit's end): the
identification determines their combination far better than each (correlations 0.90–0.97 at
the fit), and independent draws would make static maps neither identification supports. So are
a muscle's damping and its growth with pressure (Table V: 24.79 N·s/m and none; the fit: 0.66 and
1.70 per kPa): drawn apart, a leg could have neither.
Everything else is drawn on its own. `identified()` builds that `Randomization`;
`Randomization.sample` draws a leg's overrides (the dotted keys of
`equimus_description.leg.load_leg(overrides=…)`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml

from equimus_description.leg import load_leg, load_overrides

#: The identified leg (issue 25), from the checkout root; its `identification.std_error` block
#: holds the standard errors of its parameters.
FIT_FILE = 'config/leg_fit.yaml'
#: Parameters the randomisation draws (the fit's free parameters and the MAA damping, which
#: the fit fixed at the bench value while Table V has its own)
KEYS = (
    'actuators.maa.k',
    'actuators.baa.k',
    'actuators.maa.area',
    'actuators.baa.area',
    'actuators.maa.l0',
    'actuators.baa.l0',
    'actuators.maa.c',
    'actuators.baa.c',
    'joints.hip.damping',
    'joints.knee.damping',
    'valve.dead_time',
    'valve.fill_time_constant.maa',
    'valve.fill_time_constant.baa',
    'valve.vent_time_constant.maa',
    'valve.vent_time_constant.baa',
    'joints.knee.range.0',
    'actuators.maa.area_slope',
    'actuators.baa.area_slope',
    'actuators.maa.c_per_kpa',
    'actuators.baa.c_per_kpa',
)
#: lower limits that keep a drawn value physical (time constants > 0, dead time >= 0)
FLOORS: dict[str, float] = {
    'valve.dead_time': 0.0,
    'valve.fill_time_constant.maa': 0.005,
    'valve.fill_time_constant.baa': 0.005,
    'valve.vent_time_constant.maa': 0.005,
    'valve.vent_time_constant.baa': 0.005,
    'joints.hip.damping': 0.0,
    'joints.knee.damping': 0.0,
    'actuators.maa.c': 0.0,
    'actuators.baa.c': 0.0,
    'actuators.maa.c_per_kpa': 0.0,
    'actuators.baa.c_per_kpa': 0.0,
}


#: keys drawn together (one position u along their intervals)
GROUPS = (
    ('actuators.maa.k', 'actuators.maa.area', 'actuators.maa.l0', 'actuators.maa.area_slope'),
    ('actuators.baa.k', 'actuators.baa.area', 'actuators.baa.l0', 'actuators.baa.area_slope'),
    # a muscle's damping: constant in Table V, almost all its pressure's in the fit
    ('actuators.maa.c', 'actuators.maa.c_per_kpa'),
    ('actuators.baa.c', 'actuators.baa.c_per_kpa'),
)


@dataclass(frozen=True)
class Randomization:
    """Intervals (key, start, end) of leg override keys, a value drawn as start + u·(end −
    start) with u uniform in [0, 1] (shared by the keys of a `groups` entry); `pool` legs are
    built once per environment and each episode draws one of them (a MuJoCo model takes
    ~0.2 s to build; `seed` fixes the pool)."""

    intervals: tuple[tuple[str, float, float], ...]
    pool: int = 32
    groups: tuple[tuple[str, ...], ...] = GROUPS
    seed: int = 0  # of the pool's draws

    def __post_init__(self) -> None:
        for key, a, b in self.intervals:
            if not (np.isfinite(a) and np.isfinite(b)):
                raise ValueError(f'randomisation interval of {key}: [{a}, {b}] is not one')
        if self.pool < 1:
            raise ValueError('randomisation pool must hold at least one leg')

    def sample(self, rng: np.random.Generator) -> dict[str, float]:
        """One leg's overrides."""
        shared = {key: u for group in self.groups for u in [rng.uniform()] for key in group}
        out = {}
        for key, a, b in self.intervals:
            u = shared[key] if key in shared else rng.uniform()
            out[key] = float(a + u * (b - a))
        return out


def _nominal_value(leg: Any, key: str) -> float:
    """The value of an override key in a loaded leg description."""
    parts = key.split('.')
    if parts[0] == 'valve':
        v = leg.valve
        field = {
            'dead_time': 'dead_time',
            'fill_time_constant': 'tau_fill',
            'vent_time_constant': 'tau_vent',
        }[parts[1]]
        value = getattr(v, field)
        if len(parts) == 3:
            index = ('maa', 'baa').index(parts[2])
            return float(value[index] if isinstance(value, tuple) else value)
        return float(value)
    if parts[0] == 'actuators':
        return float(getattr(leg.actuators[parts[1]], parts[2]))
    joint = leg.joints[parts[1]]
    if parts[2] == 'range':
        return float(joint.range[int(parts[3])])
    return float(getattr(joint, parts[2]))


def identified(
    fit: str | os.PathLike = FIT_FILE, k_se: float = 2.0, pool: int = 32, span: float = 1.0
) -> Randomization:
    """The intervals spanning config/leg.yaml and the identified fit, ± k_se standard errors
    (a parameter without a standard error in the fit file: the span alone); `span` < 1 takes
    only that fraction of the way from config/leg.yaml towards the fit."""
    if not os.path.isfile(fit):
        raise FileNotFoundError(
            f'{fit}: no identified leg there; run from the checkout root or pass the fit file'
        )
    fitted = {k: float(v) for k, v in load_overrides(fit).items()}
    with open(fit, encoding='utf-8') as f:
        doc = yaml.safe_load(f) or {}
    se = {
        k: float(v) for k, v in ((doc.get('identification') or {}).get('std_error') or {}).items()
    }
    nominal = load_leg()
    intervals = []
    for key in KEYS:
        a = _nominal_value(nominal, key)
        b = a + span * (fitted.get(key, a) - a)
        out = k_se * se.get(key, 0.0) * (1.0 if b >= a else -1.0)  # outwards at both ends
        floor = FLOORS.get(key, -np.inf)
        intervals.append((key, max(a - out, floor), max(b + out, floor)))
    return Randomization(tuple(intervals), pool)
