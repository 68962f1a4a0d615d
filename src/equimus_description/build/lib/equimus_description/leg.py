"""YAML description of a musculoskeletal leg: bodies, hinges and elastic actuators (no ROS).

One file (config/leg.yaml) drives the MuJoCo builder, the analytic Lagrangian model and the
kinematics used by the controller. Fitted parameters (e.g. an identification result) are applied
as overrides with dotted keys such as ``actuators.maa.k``, so a fitted YAML can be passed to the
simulation as it is.
"""

from __future__ import annotations

import copy
import importlib.resources
import math
import os
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import yaml

from .kinematics import PlanarGeometry
from .valve import VALVE_TAU_S


class LegDescriptionError(ValueError):
    """The leg YAML or an override is malformed; the message says which key and why."""


@dataclass(frozen=True)
class Body:
    name: str
    pos: np.ndarray  # origin in the parent frame at the build pose (root: world)
    mass: float
    com: np.ndarray
    inertia: np.ndarray  # [ixx, iyy, izz, ixy, ixz, iyz] about the COM, body frame
    mesh: str | None = None


@dataclass(frozen=True)
class Joint:
    name: str
    parent: str
    child: str
    axis: np.ndarray
    ref: float  # joint angle at the build pose (qpos == paper angle)
    damping: float
    range: tuple


@dataclass(frozen=True)
class Anchor:
    body: str
    pos: np.ndarray  # in the body frame at the build pose


@dataclass(frozen=True)
class Actuator:
    """Linear elastic actuator: mass m, stiffness k, damping c, rest length l0, area S."""

    name: str
    base: Anchor
    tip: Anchor
    m: float
    k: float
    c: float
    l0: float
    area: float
    pressure_max_kpa: float = 50.0

    def force(self, p_kpa: float) -> float:
        """F = S·P in newtons (P in kPa); positive extends the actuator."""
        return self.area * 1e3 * float(p_kpa)


@dataclass(frozen=True)
class LegDescription:
    name: str
    bodies: dict  # name -> Body, parents before children
    joints: dict  # name -> Joint, in tree order
    actuators: dict  # name -> Actuator
    geometry: PlanarGeometry | None
    valve_time_constant: float
    timestep: float
    integrator: str
    gravity: float
    equality_solref: tuple
    equality_solimp: tuple
    source: str | None = None
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def root(self) -> str:
        return next(iter(self.bodies))

    @property
    def joint_names(self) -> list:
        return list(self.joints)

    @property
    def actuator_names(self) -> list:
        return list(self.actuators)

    def parent_joint(self, body: str) -> Joint | None:
        for j in self.joints.values():
            if j.child == body:
                return j
        return None

    def with_overrides(self, overrides: Mapping[str, Any]) -> LegDescription:
        """A new description with dotted-key overrides applied to the raw YAML."""
        raw = apply_overrides(self.raw, overrides)
        return from_dict(raw, source=self.source)

    def with_timestep(self, dt: float) -> LegDescription:
        return self.with_overrides({'sim.timestep': float(dt)})


def default_leg_path() -> pathlib.Path:
    """The EquiMus leg (data/leg.yaml of this package; config/leg.yaml in the repository links
    to it)."""
    return pathlib.Path(str(importlib.resources.files('equimus_description') / 'data' / 'leg.yaml'))


def _flatten(d: Mapping, prefix: str = '') -> dict:
    out = {}
    for k, v in d.items():
        key = f'{prefix}.{k}' if prefix else str(k)
        if isinstance(v, Mapping) and v and '.' not in str(k):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def normalise_overrides(overrides: Mapping[str, Any] | None) -> dict:
    """Accept flat dotted keys ({'actuators.maa.k': 270}) or nested mappings, or a mix."""
    if not overrides:
        return {}
    flat = {}
    for k, v in overrides.items():
        if isinstance(v, Mapping) and v:
            flat.update(_flatten(v, str(k)))
        else:
            flat[str(k)] = v
    return flat


def apply_overrides(raw: Mapping, overrides: Mapping[str, Any] | None) -> dict:
    """Copy of raw with each dotted key replaced; unknown keys are an error (typos must not
    pass)."""
    out = copy.deepcopy(dict(raw))
    for key, value in normalise_overrides(overrides).items():
        parts = key.split('.')
        node = out
        for i, p in enumerate(parts[:-1]):
            if not isinstance(node, dict) or p not in node:
                raise LegDescriptionError(
                    f"override '{key}': no '{'.'.join(parts[: i + 1])}' in the leg description "
                    f'(known: {sorted(node) if isinstance(node, dict) else "-"})'
                )
            node = node[p]
        leaf = parts[-1]
        if not isinstance(node, dict) or leaf not in node:
            raise LegDescriptionError(
                f"override '{key}': unknown parameter '{leaf}' "
                f'(known: {sorted(node) if isinstance(node, dict) else "-"})'
            )
        if isinstance(node[leaf], (int, float)) and not isinstance(node[leaf], bool):
            try:
                value = float(value)
            except (TypeError, ValueError) as exc:
                raise LegDescriptionError(
                    f"override '{key}': expected a number, got {value!r}"
                ) from exc
            if not math.isfinite(value):
                raise LegDescriptionError(f"override '{key}': value must be finite, got {value}")
        node[leaf] = value
    return out


def load_overrides(path) -> dict:
    """Read an override YAML (e.g. an identification result). A top-level 'parameters' mapping,
    if present, holds the values; flat dotted keys and nested mappings are both accepted."""
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, Mapping):
        raise LegDescriptionError(f'{path}: expected a mapping of parameter overrides')
    if 'parameters' in data and isinstance(data['parameters'], Mapping):
        data = data['parameters']
    return normalise_overrides(data)


def _vec(x, n, what):
    a = np.asarray(x, dtype=float).reshape(-1)
    if a.size != n or not np.all(np.isfinite(a)):
        raise LegDescriptionError(f'{what}: expected {n} finite numbers, got {x!r}')
    return a


def _positive(x, what, allow_zero=False):
    v = float(x)
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise LegDescriptionError(f'{what} must be {"≥" if allow_zero else ">"} 0, got {x!r}')
    return v


def from_dict(raw: Mapping, source: str | None = None) -> LegDescription:
    """Validate a parsed YAML mapping and build the description."""
    try:
        bodies_raw = raw['bodies']
        joints_raw = raw.get('joints') or {}
        acts_raw = raw.get('actuators') or {}
    except (KeyError, TypeError) as exc:
        raise LegDescriptionError(
            f'{source or "leg description"}: needs a "bodies" mapping'
        ) from exc
    bodies = {}
    for name, b in bodies_raw.items():
        bodies[name] = Body(
            name=name,
            pos=_vec(b.get('pos', [0, 0, 0]), 3, f'bodies.{name}.pos'),
            mass=_positive(b['mass'], f'bodies.{name}.mass'),
            com=_vec(b.get('com', [0, 0, 0]), 3, f'bodies.{name}.com'),
            inertia=_vec(
                b.get('inertia', [1e-6, 1e-6, 1e-6, 0, 0, 0]), 6, f'bodies.{name}.inertia'
            ),
            mesh=b.get('mesh'),
        )
    children: dict[str, str] = {}  # child body → its parent joint
    joints = {}
    for name, j in joints_raw.items():
        for end in ('parent', 'child'):
            if j.get(end) not in bodies:
                raise LegDescriptionError(f'joints.{name}.{end}: unknown body {j.get(end)!r}')
        if j['child'] in children:
            raise LegDescriptionError(
                f'body {j["child"]} has two parent joints '
                f'({children[j["child"]]} and {name}); the skeleton must be a tree'
            )
        children[j['child']] = name
        axis = _vec(j.get('axis', [-1, 0, 0]), 3, f'joints.{name}.axis')
        rng = _vec(j.get('range', [-math.pi, math.pi]), 2, f'joints.{name}.range')
        if rng[0] >= rng[1]:
            raise LegDescriptionError(f'joints.{name}.range: lower must be below upper, got {rng}')
        joints[name] = Joint(
            name=name,
            parent=j['parent'],
            child=j['child'],
            axis=axis / np.linalg.norm(axis),
            ref=float(j.get('ref', 0.0)),
            damping=_positive(j.get('damping', 0.0), f'joints.{name}.damping', True),
            range=(float(rng[0]), float(rng[1])),
        )
    roots = [b for b in bodies if b not in children]
    if len(roots) != 1:
        raise LegDescriptionError(
            f'exactly one root body (fixed to the world) expected, got {roots}'
        )
    # Tree order: root first, then children breadth first (the builder nests bodies in this order).
    order, frontier = [], roots
    while frontier:
        order.extend(frontier)
        frontier = [j.child for j in joints.values() if j.parent in frontier]
    if len(order) != len(bodies):
        raise LegDescriptionError('the joints do not connect every body to the root')
    bodies = {n: bodies[n] for n in order}
    joints = {children[n]: joints[children[n]] for n in order if n in children}

    actuators = {}
    for name, a in acts_raw.items():
        anchors = []
        for end in ('base', 'tip'):
            e = a.get(end) or {}
            if e.get('body') not in bodies:
                raise LegDescriptionError(
                    f'actuators.{name}.{end}.body: unknown body {e.get("body")!r}'
                )
            anchors.append(
                Anchor(e['body'], _vec(e.get('pos', [0, 0, 0]), 3, f'actuators.{name}.{end}.pos'))
            )
        actuators[name] = Actuator(
            name=name,
            base=anchors[0],
            tip=anchors[1],
            m=_positive(a['m'], f'actuators.{name}.m'),
            k=_positive(a['k'], f'actuators.{name}.k', True),
            c=_positive(a['c'], f'actuators.{name}.c', True),
            l0=_positive(a['l0'], f'actuators.{name}.l0'),
            area=_positive(a['area'], f'actuators.{name}.area', True),
            pressure_max_kpa=_positive(
                a.get('pressure_max_kpa', 50.0), f'actuators.{name}.pressure_max_kpa'
            ),
        )
    sim = raw.get('sim') or {}
    integrator = str(sim.get('integrator', 'implicitfast'))
    if integrator not in ('Euler', 'RK4', 'implicit', 'implicitfast'):
        raise LegDescriptionError(
            f'sim.integrator: one of Euler, RK4, implicit, implicitfast; got {integrator!r}'
        )
    geometry = PlanarGeometry.from_mapping(raw['geometry']) if raw.get('geometry') else None
    leg = LegDescription(
        name=str(raw.get('name', 'leg')),
        bodies=bodies,
        joints=joints,
        actuators=actuators,
        geometry=geometry,
        valve_time_constant=_positive(
            (raw.get('valve') or {}).get('time_constant', VALVE_TAU_S), 'valve.time_constant', True
        ),
        timestep=_positive(sim.get('timestep', 0.001), 'sim.timestep'),
        integrator=integrator,
        gravity=float(sim.get('gravity', 9.81)),
        equality_solref=tuple(
            _vec(sim.get('equality_solref', [0.002, 1.0]), 2, 'sim.equality_solref')
        ),
        equality_solimp=tuple(
            _vec(
                sim.get('equality_solimp', [0.99, 0.999, 0.0001, 0.5, 2.0]),
                5,
                'sim.equality_solimp',
            )
        ),
        source=source,
        raw=copy.deepcopy(dict(raw)),
    )
    if geometry is not None:
        check_geometry(leg)
    return leg


def load_leg(
    path=None,
    overrides: Mapping[str, Any] | str | os.PathLike | None = None,
    parameter_set: str | None = None,
) -> LegDescription:
    """Load the leg YAML (default: default_leg_path()), then a named parameter set, then overrides.

    overrides: dotted keys -> values, a nested mapping, or a path to an override YAML.
    """
    path = pathlib.Path(path) if path is not None else default_leg_path()
    with open(path) as f:
        raw = yaml.safe_load(f)
    if not isinstance(raw, Mapping):
        raise LegDescriptionError(f'{path}: not a leg description (expected a YAML mapping)')
    if parameter_set is not None:
        sets = raw.get('parameter_sets') or {}
        if parameter_set not in sets:
            raise LegDescriptionError(
                f'{path}: no parameter set {parameter_set!r} (have {sorted(sets)})'
            )
        raw = apply_overrides(raw, sets[parameter_set])
    if isinstance(overrides, (str, os.PathLike)):
        overrides = load_overrides(overrides)
    raw = apply_overrides(raw, overrides)
    return from_dict(raw, source=str(path))


def world_points_at_build(leg: LegDescription) -> dict:
    """World position of every body origin at the build pose."""
    out: dict[str, np.ndarray] = {}
    for name, b in leg.bodies.items():
        j = leg.parent_joint(name)
        out[name] = b.pos.copy() if j is None else out[j.parent] + b.pos
    return out


def anchor_world(leg: LegDescription, anchor: Anchor) -> np.ndarray:
    return world_points_at_build(leg)[anchor.body] + anchor.pos


def to_planar(p_world, hip_world) -> np.ndarray:
    """World → paper planar frame: planar x = world +y, planar y = world −z, origin at the hip."""
    d = np.asarray(p_world, dtype=float) - np.asarray(hip_world, dtype=float)
    return np.array([d[1], -d[2]])


def check_geometry(leg: LegDescription, tol: float = 1e-6) -> None:
    """For the 2-DOF leg (hip, knee, maa, baa) the 3-D anchors must agree with `geometry`
    (a description without `geometry` has nothing to check)."""
    g = leg.geometry
    if g is None:
        return
    if not ({'hip', 'knee'} <= set(leg.joints) and {'maa', 'baa'} <= set(leg.actuators)):
        return
    from . import kinematics as K

    pts = world_points_at_build(leg)
    hip = pts[leg.joints['hip'].child]
    q = np.array([leg.joints['hip'].ref, leg.joints['knee'].ref])
    lp = K.link_points(q, g)
    A = K.base_anchors(g)
    want = {
        ('maa', 'base'): A[0],
        ('maa', 'tip'): lp['C'],
        ('baa', 'base'): A[1],
        ('baa', 'tip'): lp['D'],
    }
    knee = to_planar(pts[leg.joints['knee'].child], hip)
    if np.linalg.norm(knee - lp['knee']) > tol:
        raise LegDescriptionError(
            f'knee at planar {knee}, geometry says {lp["knee"]} (a1 vs bodies.*.pos)'
        )
    for (act, end), w in want.items():
        got = to_planar(anchor_world(leg, getattr(leg.actuators[act], end)), hip)
        if np.linalg.norm(got - w) > tol:
            raise LegDescriptionError(
                f'actuators.{act}.{end}.pos is at planar {got} but geometry puts it at {w}: '
                'change both together (the controller uses geometry, the simulation the anchors)'
            )
