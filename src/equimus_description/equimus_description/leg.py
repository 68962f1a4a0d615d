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
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import yamlfile
from .kinematics import PlanarGeometry
from .valve import ACTUATORS, VALVE_TAU_S, ValveParams

#: the hinges' stops (joints.*.range) as MuJoCo constraints when the description's sim section
#: does not set them: the force ramps in from contact (data/leg.yaml says why)
LIMIT_SOLREF = (0.02, 1.0)
LIMIT_SOLIMP = (0.0001, 0.95, 0.005, 0.5, 2.0)


class LegDescriptionError(ValueError):
    """The leg YAML or an override is malformed; the message says which key and why.

    `key` is the dotted key at fault (None: the message starts with it, or the whole file)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key

    def located(self, path, lines: yamlfile.Lines) -> LegDescriptionError:
        """The same error as one line `file:line: key: why`."""
        text = str(self)
        key = self.key
        if key is None:
            m = re.match(r"^(?:override ')?([A-Za-z_][\w.]*)'?[: ]", text)
            key = m.group(1) if m and '.' in m.group(1) else None
        text = text.replace('\n', '\\n')  # one line, whatever the keys hold
        if key is None:
            return LegDescriptionError(f'{path}:1: {text}', key)
        for head in (f"override '{key}'", key):
            if text.startswith(head):
                text = text[len(head) :].lstrip(': ')
                break
        shown = key.replace('\n', '\\n')
        return LegDescriptionError(f'{path}:{lines.line(key)}: {shown}: {text}', key)


def _why(exc: BaseException) -> tuple[str, str]:
    """(message, sub-key) for an exception met while reading one entry of the description."""
    if isinstance(exc, KeyError):
        return f'missing key {exc.args[0]!r}', str(exc.args[0])
    if isinstance(exc, AttributeError):
        return 'expected a mapping', ''
    return str(exc), ''


def _entries(raw: Any, section: str) -> list[tuple[Any, Any]]:
    """A section's (name, entry) pairs; a name is what key paths and MJCF names are made of."""
    if not isinstance(raw, Mapping):
        raise LegDescriptionError(f'{section}: expected a mapping, got {raw!r}', section)
    for name in raw:
        if not (isinstance(name, str) and re.fullmatch(r'[A-Za-z_]\w*', name)):
            raise LegDescriptionError(
                f'{section}: entry {name!r} is not a name (letters, digits and _, not starting '
                'with a digit)',
                section,
            )
    return list(raw.items())


def _entry(section: str, name: str, build):
    """build() for one entry; any error becomes a LegDescriptionError naming its key."""
    try:
        return build()
    except LegDescriptionError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        why, sub = _why(exc)
        key = f'{section}.{name}' + (f'.{sub}' if sub else '')
        raise LegDescriptionError(f'{key}: {why}', key) from None


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
    frictionloss: float = 0.0  # N·m, dry (Coulomb) friction torque (MuJoCo frictionloss)
    armature: float = 0.0  # kg·m², rotor-like inertia added to the joint (MuJoCo armature)


@dataclass(frozen=True)
class Anchor:
    body: str
    pos: np.ndarray  # in the body frame at the build pose


@dataclass(frozen=True)
class Actuator:
    """Linear elastic actuator: mass m, stiffness k, damping c, rest length l0, area S.

    area_slope (1/m): the effective area's relative change per metre of length beyond l0,
    S(l) = S·(1 + area_slope·(l − l0)). A pressurised cast muscle stiffens with pressure: its
    force P·S(l) falls off with extension faster at high pressure than a constant area allows
    (0, the default, is the paper's constant area).

    c_per_kpa (N·s/m per kPa): damping that grows with pressure, c(P) = c + c_per_kpa·P. A
    braided muscle's damping is mostly the friction of its braid and bladder, which the
    pressure presses together, so a soft muscle is damped less (0, the default, is the paper's
    constant damping)."""

    name: str
    base: Anchor
    tip: Anchor
    m: float
    k: float
    c: float
    l0: float
    area: float
    pressure_max_kpa: float = 50.0
    area_slope: float = 0.0
    c_per_kpa: float = 0.0

    def area_at(self, length: float) -> float:
        """S(l) in m² (the constant area when area_slope is 0)."""
        return self.area * (1.0 + self.area_slope * (float(length) - self.l0))

    def force(self, p_kpa: float, length: float | None = None) -> float:
        """F = S(l)·P in newtons (P in kPa); positive extends the actuator. Without a length,
        the area at l0."""
        area = self.area if length is None else self.area_at(length)
        return area * 1e3 * float(p_kpa)


@dataclass(frozen=True)
class Foot:
    """The foot: a sphere of `radius` centred at `pos` in `body`'s frame (build pose)."""

    body: str
    pos: np.ndarray
    radius: float


@dataclass(frozen=True)
class Ground:
    """A ground plane at world z = `height` touching the foot (stance phase); MuJoCo contact
    parameters as named in MJCF (friction: sliding, torsional, rolling)."""

    height: float
    friction: tuple
    condim: int
    solref: tuple
    solimp: tuple


@dataclass(frozen=True)
class LegDescription:
    name: str
    bodies: dict  # name -> Body, parents before children
    joints: dict  # name -> Joint, in tree order
    actuators: dict  # name -> Actuator
    geometry: PlanarGeometry | None
    valve_time_constant: float  # the `valve.time_constant` key: fill and vent unless given apart
    timestep: float
    integrator: str
    gravity: float
    equality_solref: tuple
    equality_solimp: tuple
    friction_solref: tuple = (0.002, 1.0)  # the hinges' dry friction as a constraint (MuJoCo)
    friction_solimp: tuple = (0.9999, 0.99999, 0.001, 0.5, 2.0)
    limit_solref: tuple = LIMIT_SOLREF
    limit_solimp: tuple = LIMIT_SOLIMP
    source: str | None = None
    raw: dict = field(default_factory=dict, repr=False)
    foot: Foot | None = None
    ground: Ground | None = None  # None: no contact (swing phase, base fixed)
    valve: ValveParams = field(default_factory=ValveParams)  # the valve/chamber model

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


def require_constant_area(leg: LegDescription, model: str) -> None:
    """ValueError naming the actuators with an area_slope, for a model that has a constant
    area (`model` says which)."""
    sloped = [a.name for a in leg.actuators.values() if a.area_slope != 0.0]
    if sloped:
        raise ValueError(
            f'actuators {sloped}: {model} has a constant area; use a leg with area_slope 0 '
            "there (the MuJoCo leg, the statics and the MPC's dynamics model the slope)"
        )


def require_constant_damping(leg: LegDescription, model: str) -> None:
    """ValueError naming the actuators with a c_per_kpa, for a model whose muscles' damping
    does not depend on their pressure (`model` says which)."""
    damped = [a.name for a in leg.actuators.values() if a.c_per_kpa != 0.0]
    if damped:
        raise ValueError(
            f'actuators {damped}: {model} has a damping that does not depend on pressure; use '
            "a leg with c_per_kpa 0 there (the MuJoCo leg and the MPC's dynamics model it)"
        )


def default_leg_path() -> pathlib.Path:
    """The EquiMus leg (data/leg.yaml of this package; config/leg.yaml in the repository links
    to it)."""
    return pathlib.Path(str(importlib.resources.files('equimus_description') / 'data' / 'leg.yaml'))


def resolve_leg_path(path) -> pathlib.Path:
    """A leg YAML path; a bare file name that is not in the working directory names one of this
    package's descriptions (e.g. 'limb_3dof.yaml'), so parameter files need no absolute path."""
    p = pathlib.Path(path)
    if not p.exists() and p.name == str(path):
        packaged = default_leg_path().parent / p.name
        if packaged.exists():
            return packaged
    return p


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
        try:
            _override(out, key, value)
        except LegDescriptionError as exc:
            exc.key = exc.key or key
            raise
    return out


def _override(out: dict, key: str, value: Any) -> None:
    """Set one dotted key; a numeric part indexes a list (`joints.knee.range.0`)."""
    parts = key.split('.')
    node: Any = out
    for i, p in enumerate(parts[:-1]):
        if _has(node, p):
            node = node[int(p)] if isinstance(node, list) else node[p]
            continue
        raise LegDescriptionError(
            f"override '{key}': no '{'.'.join(parts[: i + 1])}' in the leg description "
            f'(known: {_known(node)})'
        )
    leaf = parts[-1]
    if not isinstance(node, (dict, list)):
        parent = '.'.join(parts[:-1])
        raise LegDescriptionError(
            f"override '{key}': '{parent}' holds one value ({node!r}), not one per name: "
            f"override '{parent}' itself"
        )
    if not _has(node, leaf):
        raise LegDescriptionError(
            f"override '{key}': unknown parameter '{leaf}' (known: {_known(node)})"
        )
    index: Any = int(leaf) if isinstance(node, list) else leaf
    if isinstance(node[index], (int, float)) and not isinstance(node[index], bool):
        try:
            value = float(value)
        except (TypeError, ValueError) as exc:
            raise LegDescriptionError(
                f"override '{key}': expected a number, got {value!r}"
            ) from exc
        if not math.isfinite(value):
            raise LegDescriptionError(f"override '{key}': value must be finite, got {value}")
    node[index] = value


def _has(node: Any, part: str) -> bool:
    if isinstance(node, dict):
        return part in node
    return isinstance(node, list) and part.isdigit() and int(part) < len(node)


def _known(node: Any) -> str:
    if isinstance(node, dict):
        return str(sorted(node))
    return f'indices 0..{len(node) - 1}' if isinstance(node, list) else '-'


def load_overrides(path) -> dict:
    """Read an override YAML (e.g. an identification result). A top-level 'parameters' mapping,
    if present, holds the values; flat dotted keys and nested mappings are both accepted."""
    try:
        data = yamlfile.load(path)[0] or {}
    except yamlfile.YamlFileError as exc:
        raise LegDescriptionError(str(exc)) from None
    if not isinstance(data, Mapping):
        raise LegDescriptionError(f'{path}:1: expected a mapping of parameter overrides')
    if 'parameters' in data and isinstance(data['parameters'], Mapping):
        data = data['parameters']
    return normalise_overrides(data)


def _vec(x, n, what):
    try:
        a = np.asarray(x, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        a = np.array([])
    if a.size != n or not np.all(np.isfinite(a)):
        raise LegDescriptionError(f'{what}: expected {n} finite numbers, got {x!r}', what)
    return a


def _number(x, what) -> float:
    if isinstance(x, bool):
        raise LegDescriptionError(f'{what}: expected a number, got {x!r}', what)
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise LegDescriptionError(f'{what}: expected a number, got {x!r}', what) from None
    if not math.isfinite(v):
        raise LegDescriptionError(f'{what}: must be finite, got {x!r}', what)
    return v


def _positive(x, what, allow_zero=False):
    v = _number(x, what)
    if v < 0 or (v == 0 and not allow_zero):
        raise LegDescriptionError(
            f'{what}: must be {"≥" if allow_zero else ">"} 0, got {x!r}', what
        )
    return v


def from_dict(raw: Mapping, source: str | None = None) -> LegDescription:
    """Validate a parsed YAML mapping and build the description."""
    try:
        bodies_raw = raw['bodies']
        joints_raw = raw.get('joints') or {}
        acts_raw = raw.get('actuators') or {}
    except (KeyError, TypeError, AttributeError):
        raise LegDescriptionError('bodies: a "bodies" mapping is required', 'bodies') from None
    bodies = {}
    for name, b in _entries(bodies_raw, 'bodies'):
        bodies[name] = _entry(
            'bodies',
            name,
            lambda name=name, b=b: Body(
                name=name,
                pos=_vec(b.get('pos', [0, 0, 0]), 3, f'bodies.{name}.pos'),
                mass=_positive(b['mass'], f'bodies.{name}.mass'),
                com=_vec(b.get('com', [0, 0, 0]), 3, f'bodies.{name}.com'),
                inertia=_vec(
                    b.get('inertia', [1e-6, 1e-6, 1e-6, 0, 0, 0]), 6, f'bodies.{name}.inertia'
                ),
                mesh=b.get('mesh'),
            ),
        )
    children: dict[str, str] = {}  # child body → its parent joint
    joints = {}
    for name, j in _entries(joints_raw, 'joints'):
        if not isinstance(j, Mapping):
            raise LegDescriptionError(f'joints.{name}: expected a mapping', f'joints.{name}')
        for end in ('parent', 'child'):
            if not isinstance(j.get(end), str) or j.get(end) not in bodies:
                raise LegDescriptionError(f'joints.{name}.{end}: unknown body {j.get(end)!r}')
        if j['child'] in children:
            raise LegDescriptionError(
                f'body {j["child"]} has two parent joints '
                f'({children[j["child"]]} and {name}); the skeleton must be a tree',
                f'joints.{name}.child',
            )
        children[j['child']] = name
        joints[name] = _entry('joints', name, lambda name=name, j=j: _joint(name, j))
    loop = _find_loop(joints_raw, children)
    if loop:
        raise LegDescriptionError(
            f'joints.{loop[0]}: the joints form a loop ({" -> ".join(loop)} -> {loop[0]}); '
            'the skeleton must be a tree (a closed chain is not supported)',
            f'joints.{loop[0]}',
        )
    roots = [b for b in bodies if b not in children]
    if len(roots) != 1:
        raise LegDescriptionError(
            f'exactly one root body (fixed to the world) expected, got {roots}', 'joints'
        )
    # Tree order: root first, then children breadth first (the builder nests bodies in this order).
    order, frontier = [], roots
    while frontier:
        order.extend(frontier)
        frontier = [j.child for j in joints.values() if j.parent in frontier]
    if len(order) != len(bodies):
        raise LegDescriptionError('the joints do not connect every body to the root', 'joints')
    bodies = {n: bodies[n] for n in order}
    joints = {children[n]: joints[children[n]] for n in order if n in children}

    actuators = {}
    for name, a in _entries(acts_raw, 'actuators'):
        actuators[name] = _entry(
            'actuators', name, lambda name=name, a=a: _actuator(name, a, bodies)
        )
    return _finish(raw, source, bodies, joints, actuators)


def _find_loop(joints_raw: Mapping, children: Mapping[str, str]) -> list[str]:
    """Joint names around a cycle of the skeleton (each body has one parent joint here, so a
    cycle is found by walking up from every body), or [] for a tree."""
    for start in children:
        seen: list[str] = []
        body = start
        while body in children:
            joint = children[body]
            if joint in seen:
                return seen[seen.index(joint) :]
            seen.append(joint)
            body = joints_raw[joint]['parent']
    return []


def _joint(name: str, j: Mapping) -> Joint:
    axis = _vec(j.get('axis', [-1, 0, 0]), 3, f'joints.{name}.axis')
    if not np.linalg.norm(axis) > 0:
        raise LegDescriptionError(f'joints.{name}.axis: must not be zero', f'joints.{name}.axis')
    rng = _vec(j.get('range', [-math.pi, math.pi]), 2, f'joints.{name}.range')
    if rng[0] >= rng[1]:
        raise LegDescriptionError(f'joints.{name}.range: lower must be below upper, got {rng}')
    ref = _number(j.get('ref', 0.0), f'joints.{name}.ref')
    return Joint(
        name=name,
        parent=j['parent'],
        child=j['child'],
        axis=axis / np.linalg.norm(axis),
        ref=ref,
        damping=_positive(j.get('damping', 0.0), f'joints.{name}.damping', True),
        range=(float(rng[0]), float(rng[1])),
        frictionloss=_positive(j.get('frictionloss', 0.0), f'joints.{name}.frictionloss', True),
        armature=_positive(j.get('armature', 0.0), f'joints.{name}.armature', True),
    )


def _actuator(name: str, a: Mapping, bodies: Mapping) -> Actuator:
    anchors = []
    for end in ('base', 'tip'):
        e = a.get(end) or {}
        if (
            not isinstance(e, Mapping)
            or not isinstance(e.get('body'), str)
            or (e.get('body') not in bodies)
        ):
            raise LegDescriptionError(f'actuators.{name}.{end}.body: unknown body {e!r}')
        anchors.append(
            Anchor(e['body'], _vec(e.get('pos', [0, 0, 0]), 3, f'actuators.{name}.{end}.pos'))
        )
    if anchors[0].body == anchors[1].body:
        raise LegDescriptionError(
            f'actuators.{name}.tip.body: both ends are on body {anchors[0].body!r}; a muscle '
            'must span at least one joint (attach base and tip to two different bodies)',
            f'actuators.{name}.tip.body',
        )
    return Actuator(
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
        area_slope=_number(a.get('area_slope', 0.0), f'actuators.{name}.area_slope'),
        c_per_kpa=_positive(a.get('c_per_kpa', 0.0), f'actuators.{name}.c_per_kpa', True),
    )


def _finish(raw: Mapping, source, bodies, joints, actuators) -> LegDescription:
    sim = raw.get('sim') or {}
    if not isinstance(sim, Mapping):
        raise LegDescriptionError('sim: expected a mapping', 'sim')
    if not isinstance(raw.get('valve') or {}, Mapping):
        raise LegDescriptionError('valve: expected a mapping', 'valve')
    integrator = str(sim.get('integrator', 'implicitfast'))
    if integrator not in ('Euler', 'RK4', 'implicit', 'implicitfast'):
        raise LegDescriptionError(
            f'sim.integrator: one of Euler, RK4, implicit, implicitfast; got {integrator!r}'
        )
    try:
        geometry = PlanarGeometry.from_mapping(raw['geometry']) if raw.get('geometry') else None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        why, sub = _why(exc)
        key = 'geometry' + (f'.{sub}' if sub else '')
        raise LegDescriptionError(f'{key}: {why}', key) from None
    valve_raw = raw.get('valve') or {}
    tau = _positive(valve_raw.get('time_constant', VALVE_TAU_S), 'valve.time_constant')
    leg = LegDescription(
        name=str(raw.get('name', 'leg')),
        bodies=bodies,
        joints=joints,
        actuators=actuators,
        geometry=geometry,
        valve_time_constant=tau,
        timestep=_positive(sim.get('timestep', 0.001), 'sim.timestep'),
        integrator=integrator,
        gravity=_number(sim.get('gravity', 9.81), 'sim.gravity'),
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
        friction_solref=tuple(
            _vec(sim.get('friction_solref', [0.002, 1.0]), 2, 'sim.friction_solref')
        ),
        friction_solimp=tuple(
            _vec(
                sim.get('friction_solimp', [0.9999, 0.99999, 0.001, 0.5, 2.0]),
                5,
                'sim.friction_solimp',
            )
        ),
        limit_solref=tuple(_vec(sim.get('limit_solref', LIMIT_SOLREF), 2, 'sim.limit_solref')),
        limit_solimp=tuple(_vec(sim.get('limit_solimp', LIMIT_SOLIMP), 5, 'sim.limit_solimp')),
        source=source,
        raw=copy.deepcopy(dict(raw)),
        foot=_foot(raw.get('foot'), bodies),
        ground=_ground(raw.get('ground')),
        valve=_valve(valve_raw, tau, list(actuators)),
    )
    if leg.ground is not None and leg.foot is None:
        raise LegDescriptionError('ground.enabled: the ground needs a `foot` section', 'ground')
    if geometry is not None:
        check_geometry(leg)
        check_area_positive(leg)
    return leg


def _valve(raw: Mapping, tau: float, channels: list) -> ValveParams:
    """The valve section: `time_constant` is the fill and the vent constant unless
    `fill_time_constant` / `vent_time_constant` are given: a number, or one per actuator
    ({maa: .., baa: ..}); null = time_constant. The regulator's `slack` (kPa),
    `integral_gain` and `integral_leak` (1/s) and `slack_rate` (kPa/s), the same way, default 0
    (no regulator)."""

    def constant(key: str, default: float = tau, zero: bool = False) -> float | tuple[float, ...]:
        v = raw.get(key)
        if isinstance(v, Mapping):
            unknown = sorted(set(v) - set(channels))
            if unknown:
                raise LegDescriptionError(
                    f'valve.{key}: unknown actuators {unknown} (have {channels})', f'valve.{key}'
                )
            per = [v.get(a) for a in channels]
            if all(x is None for x in per):
                return default
            return tuple(
                default if x is None else _positive(x, f'valve.{key}.{a}', zero)
                for a, x in zip(channels, per, strict=True)
            )
        return default if v is None else _positive(v, f'valve.{key}', zero)

    rate = raw.get('fill_rate')
    try:
        return ValveParams(
            tau_fill=constant('fill_time_constant'),
            tau_vent=constant('vent_time_constant'),
            dead_time=_positive(raw.get('dead_time', 0.0), 'valve.dead_time', True),
            fill_rate=math.inf if rate is None else _positive(rate, 'valve.fill_rate'),
            slack=constant('slack', 0.0, True),
            integral_gain=constant('integral_gain', 0.0, True),
            integral_leak=constant('integral_leak', 0.0, True),
            slack_rate=constant('slack_rate', 0.0, True),
        )
    except ValueError as e:  # a combination the model cannot run (each value is valid)
        raise LegDescriptionError(str(e), 'valve') from None


def _foot(raw: Any, bodies: Mapping) -> Foot | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise LegDescriptionError('foot: expected a mapping', 'foot')
    body = raw.get('body')
    if not isinstance(body, str) or body not in bodies:
        raise LegDescriptionError(f'foot.body: unknown body {body!r}', 'foot.body')
    return Foot(
        body=str(raw['body']),
        pos=_vec(raw.get('pos', [0, 0, 0]), 3, 'foot.pos'),
        radius=_positive(raw.get('radius', 0.01), 'foot.radius'),
    )


def _ground(raw: Any) -> Ground | None:
    """The `ground` section; None when absent or `enabled: false` (the default)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise LegDescriptionError('ground: expected a mapping', 'ground')
    enabled = raw.get('enabled', False)
    if not isinstance(enabled, bool):
        raise LegDescriptionError(
            f'ground.enabled: true or false; got {enabled!r}', 'ground.enabled'
        )
    if not enabled:
        return None
    condim = _number(raw.get('condim', 3), 'ground.condim')
    if condim not in (1, 3, 4, 6):
        raise LegDescriptionError(f'ground.condim: one of 1, 3, 4, 6; got {condim!r}', 'ground')
    return Ground(
        height=_number(raw.get('height', 0.0), 'ground.height'),
        friction=tuple(
            _vec(raw.get('friction', [1.0, 0.005, 0.0001]), 3, 'ground.friction').tolist()
        ),
        condim=int(condim),
        solref=tuple(_vec(raw.get('solref', [0.02, 1.0]), 2, 'ground.solref').tolist()),
        solimp=tuple(
            _vec(raw.get('solimp', [0.9, 0.95, 0.001, 0.5, 2.0]), 5, 'ground.solimp').tolist()
        ),
    )


def load_leg(
    path=None,
    overrides: Mapping[str, Any] | str | os.PathLike | None = None,
    parameter_set: str | None = None,
) -> LegDescription:
    """Load the leg YAML (default: default_leg_path()), then a named parameter set, then overrides.

    overrides: dotted keys -> values, a nested mapping, or a path to an override YAML.
    """
    path = resolve_leg_path(path) if path is not None else default_leg_path()
    try:
        raw, lines = yamlfile.load(path)
    except yamlfile.YamlFileError as exc:
        raise LegDescriptionError(str(exc)) from None
    if not isinstance(raw, Mapping):
        raise LegDescriptionError(f'{path}:1: not a leg description (expected a YAML mapping)')
    try:
        if parameter_set is not None:
            sets = raw.get('parameter_sets') or {}
            if not isinstance(sets, Mapping) or parameter_set not in sets:
                raise LegDescriptionError(
                    f'parameter_sets: no parameter set {parameter_set!r} '
                    f'(have {sorted(sets) if isinstance(sets, Mapping) else "none"})',
                    'parameter_sets',
                )
            raw = apply_overrides(raw, sets[parameter_set])
    except LegDescriptionError as exc:
        raise exc.located(path, lines) from None
    opath = None
    if isinstance(overrides, (str, os.PathLike)):
        opath = overrides
        overrides = load_overrides(opath)
        try:
            raw = apply_overrides(raw, overrides)
        except LegDescriptionError as exc:
            raise exc.located(opath, yamlfile.load(opath)[1]) from None
    else:
        raw = apply_overrides(raw, overrides)
    try:
        return from_dict(raw, source=str(path))
    except LegDescriptionError as exc:
        if opath is not None and exc.key in normalise_overrides(overrides):
            # the value came from the override file: point there
            raise exc.located(opath, yamlfile.load(opath)[1]) from None
        raise exc.located(path, lines) from None


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


#: Grid points per joint over its range where `check_area_positive` evaluates the lengths.
AREA_CHECK_POINTS = 21


def check_area_positive(leg: LegDescription) -> None:
    """S(l) = S·(1 + area_slope·(l − l0)) > 0 at every length the 2-DOF leg reaches inside its
    joints' ranges: a slope that makes it negative turns a filled muscle, which pushes, into one
    that pulls (identification bounds a slope at ±20 /m, which allows that). Checked on a grid
    of the (hip, knee) range box."""
    g = leg.geometry
    sloped = [a for a in leg.actuators.values() if a.area_slope != 0.0]
    if g is None or not sloped or not {'hip', 'knee'} <= set(leg.joints):
        return
    from . import kinematics as K

    axes = [
        np.linspace(float(leg.joints[j].range[0]), float(leg.joints[j].range[1]), AREA_CHECK_POINTS)
        for j in ('hip', 'knee')
    ]
    lengths = np.array([K.actuator_lengths((a, b), g) for a in axes[0] for b in axes[1]])
    for a in sloped:
        if a.name not in ACTUATORS:
            continue
        ls = lengths[:, ACTUATORS.index(a.name)]  # actuator_lengths: [MAA, BAA]
        worst = ls.min() if a.area_slope > 0 else ls.max()
        factor = 1.0 + a.area_slope * (worst - a.l0)
        if factor <= 0.0:
            raise LegDescriptionError(
                f'actuators.{a.name}.area_slope: {a.area_slope:g} /m makes the area '
                f'S(l) = S·(1 + slope·(l − l0)) zero or negative at l = {worst:.4f} m (l0 = '
                f'{a.l0:.4f} m), a length the leg reaches inside its joint ranges; bound the '
                'slope so that 1 + slope·(l − l0) stays positive there',
                f'actuators.{a.name}.area_slope',
            )


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
            f'knee at planar {knee}, geometry says {lp["knee"]} (a1 vs bodies.*.pos)',
            'geometry',
        )
    for (act, end), w in want.items():
        got = to_planar(anchor_world(leg, getattr(leg.actuators[act], end)), hip)
        if np.linalg.norm(got - w) > tol:
            raise LegDescriptionError(
                f'actuators.{act}.{end}.pos is at planar {got} but geometry puts it at {w}: '
                'change both together (the controller uses geometry, the simulation the anchors)'
            )
