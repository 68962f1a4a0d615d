"""URDF of the leg from the same LegDescription as the MJCF (no ROS, no MuJoCo).

One source, two outputs: equimus_sim.mjcf_builder writes the MJCF, this module the URDF that
robot_state_publisher, RViz and Foxglove read as ``robot_description``. Link names are the body
names, joint names the hinge names (the names of /joint_states), and a fixed joint places the root
body in the ``world`` frame.

The MJCF hinge has ``ref`` (the joint angle at the build pose, θ = π/2 here); URDF has none, so
the joint origin carries a rotation of −ref about the hinge axis. At joint value θ the child frame
is then rotated by θ − ref from the build pose, exactly as MuJoCo's hinge with ``ref`` does, and
/joint_states values (the paper's θ) drive both models alike.

The actuators (elastic muscles between two bodies) are not links of a kinematic tree; they stay in
the MJCF only. forward_kinematics() is the URDF's own chain evaluated in plain numpy, used by the
/tf publisher and by the test that compares it with MuJoCo's.

Each link is drawn (and collides) as simple shapes from the description's own points, no mesh
file: a rod from the link's joint to each child joint and to the foot, a thinner strut to each
actuator anchor on it, a hub along each hinge axis and a sphere for the foot; the root body gets
a mount from its origin to the first joint and a beam from there to its anchors. Every shape is
named after its end points (`hip-knee`, `knee-baa_tip`, `foot`), so a test can hold the drawing
to the kinematics.

Zero joint positions are not a pose of this leg: /joint_states carry the paper's θ, and θ1 = 0
lies outside the hip's range. The URDF keeps θ as its joint variable (any robot_state_publisher
fed /joint_states draws the leg right); `rest_positions` is the pose to show before a first
joint state: the build pose (θ = ref, MuJoCo's qpos0), inside every joint's range.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .interface import FRAME_WORLD
from .leg import LegDescription, load_leg


def axis_angle_matrix(axis, angle: float) -> np.ndarray:
    """Rotation matrix of `angle` radians about the unit vector `axis` (Rodrigues)."""
    a = np.asarray(axis, dtype=float)
    a = a / np.linalg.norm(a)
    k = np.array([[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]])
    return np.eye(3) + math.sin(angle) * k + (1.0 - math.cos(angle)) * (k @ k)


def matrix_to_rpy(r: np.ndarray) -> np.ndarray:
    """URDF roll-pitch-yaw (R = Rz(yaw)·Ry(pitch)·Rx(roll)) of a rotation matrix."""
    pitch = math.atan2(-r[2, 0], math.hypot(r[0, 0], r[1, 0]))
    if math.cos(pitch) > 1e-12:
        roll = math.atan2(r[2, 1], r[2, 2])
        yaw = math.atan2(r[1, 0], r[0, 0])
    else:  # gimbal lock: put the whole turn in roll
        roll = math.atan2(-r[1, 2], r[1, 1])
        yaw = 0.0
    return np.array([roll, pitch, yaw])


def rpy_matrix(rpy) -> np.ndarray:
    """Rotation matrix of URDF roll-pitch-yaw."""
    r, p, y = (float(v) for v in rpy)
    rx = axis_angle_matrix((1, 0, 0), r)
    ry = axis_angle_matrix((0, 1, 0), p)
    rz = axis_angle_matrix((0, 0, 1), y)
    return rz @ ry @ rx


def matrix_to_quat(r: np.ndarray) -> np.ndarray:
    """xyzw quaternion (geometry_msgs order) of a rotation matrix."""
    tr = float(np.trace(r))
    if tr > 0.0:
        s = 2.0 * math.sqrt(tr + 1.0)
        q = [(r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s, s / 4]
    else:
        i = int(np.argmax(np.diag(r)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * math.sqrt(1.0 + r[i, i] - r[j, j] - r[k, k])
        q = [0.0, 0.0, 0.0, (r[k, j] - r[j, k]) / s]
        q[i] = s / 4
        q[j] = (r[j, i] + r[i, j]) / s
        q[k] = (r[k, i] + r[i, k]) / s
    return np.array(q)


def _f(x) -> str:
    return ' '.join(repr(float(v)) for v in np.atleast_1d(x))


def joint_origin(leg: LegDescription, body: str) -> tuple[np.ndarray, np.ndarray]:
    """(xyz, rotation matrix) of the joint that attaches `body` to its parent (or to the world)."""
    b = leg.bodies[body]
    j = leg.parent_joint(body)
    rot = np.eye(3) if j is None else axis_angle_matrix(j.axis, -j.ref)
    return b.pos.copy(), rot


#: m, radii of the drawn shapes: the links' rods, the struts to the actuator anchors, the hinge
#: hubs (and their length along the axis); rendering only (the MJCF's dynamics do not see them).
ROD_RADIUS = 0.012
STRUT_RADIUS = 0.006
HUB_RADIUS = 0.018
HUB_LENGTH = 0.03
#: rgba of the root body (the rig's frame) and of the moving links.
FRAME_RGBA = (0.45, 0.45, 0.5, 1.0)
LINK_RGBA = (0.85, 0.55, 0.2, 1.0)


@dataclass(frozen=True)
class Shape:
    """One URDF geometry of a link, in the link's frame: a `cylinder` (size = radius, length),
    along its local z at `rot`, or a `sphere` (size = radius,)."""

    name: str
    kind: str
    size: tuple[float, ...]
    xyz: np.ndarray
    rot: np.ndarray


def _rod(name: str, a: np.ndarray, b: np.ndarray, radius: float) -> Shape | None:
    """A cylinder from a to b (None if they coincide)."""
    d = np.asarray(b, float) - np.asarray(a, float)
    length = float(np.linalg.norm(d))
    if length < 1e-9:
        return None
    return Shape(name, 'cylinder', (radius, length), (a + b) / 2.0, _z_to(d / length))


def _z_to(u: np.ndarray) -> np.ndarray:
    """A rotation taking +z to the unit vector u."""
    z = np.array([0.0, 0.0, 1.0])
    axis = np.cross(z, u)
    s, c = float(np.linalg.norm(axis)), float(np.dot(z, u))
    if s < 1e-12:
        return np.eye(3) if c > 0 else axis_angle_matrix((1.0, 0.0, 0.0), math.pi)
    return axis_angle_matrix(axis, math.atan2(s, c))


def link_shapes(leg: LegDescription) -> dict[str, list[Shape]]:
    """The shapes of every body (see the module docstring), from its joints, anchors and foot."""
    out: dict[str, list[Shape]] = {}
    for name, b in leg.bodies.items():
        parent = leg.parent_joint(name)
        origin = np.zeros(3)
        shapes: list[Shape | None] = []
        # Points on this body (its frame at the build pose) the drawing joins.
        children = [
            (j.name, leg.bodies[j.child].pos) for j in leg.joints.values() if j.parent == name
        ]
        anchors = [
            (f'{a.name}_{end}', anchor.pos)
            for a in leg.actuators.values()
            for end, anchor in (('base', a.base), ('tip', a.tip))
            if anchor.body == name
        ]
        if parent is None:
            # The root: a mount from its origin to the first joint, a beam on to the anchors.
            hub, hub_pos = children[0] if children else (name, origin)
            shapes += [_rod(f'{name}-{j}', origin, p, ROD_RADIUS) for j, p in children]
            shapes += [_rod(f'{hub}-{a}', hub_pos, p, ROD_RADIUS) for a, p in anchors]
        else:
            hub, hub_pos = parent.name, origin
            shapes.append(
                Shape(
                    hub,
                    'cylinder',
                    (HUB_RADIUS, HUB_LENGTH),
                    origin,
                    _z_to(np.asarray(parent.axis, float)),
                )
            )
            shapes += [_rod(f'{hub}-{j}', origin, p, ROD_RADIUS) for j, p in children]
            shapes += [_rod(f'{hub}-{a}', origin, p, STRUT_RADIUS) for a, p in anchors]
        foot = leg.foot
        if foot is not None and foot.body == name:
            shapes.append(_rod(f'{hub}-foot', hub_pos, foot.pos, ROD_RADIUS))
            shapes.append(
                Shape('foot', 'sphere', (max(foot.radius, ROD_RADIUS),), foot.pos, np.eye(3))
            )
        drawn = [s for s in shapes if s is not None]
        if not drawn:  # a body with nothing to join: a ball at its centre of mass
            drawn.append(Shape(name, 'sphere', (ROD_RADIUS,), np.asarray(b.com, float), np.eye(3)))
        out[name] = drawn
    return out


def rest_positions(leg: LegDescription) -> dict[str, float]:
    """Joint positions to show before a first joint state: the build pose (θ = ref), or the
    middle of a joint's range if a description puts ref outside it."""
    out = {}
    for j in leg.joints.values():
        lo, hi = j.range
        out[j.name] = float(j.ref) if lo <= j.ref <= hi else 0.5 * (lo + hi)
    return out


def _geometry(parent: ET.Element, s: Shape) -> None:
    ET.SubElement(parent, 'origin', xyz=_f(s.xyz), rpy=_f(matrix_to_rpy(s.rot)))
    geometry = ET.SubElement(parent, 'geometry')
    if s.kind == 'cylinder':
        ET.SubElement(geometry, 'cylinder', radius=_f(s.size[0]), length=_f(s.size[1]))
    else:
        ET.SubElement(geometry, 'sphere', radius=_f(s.size[0]))


def build_urdf(leg: LegDescription | None = None) -> str:
    """URDF XML text of the leg: links with inertials and simple shapes (visual and collision),
    revolute joints, and the world link."""
    leg = leg if leg is not None else load_leg()
    robot = ET.Element('robot', name=leg.name)
    for material, rgba in (('frame', FRAME_RGBA), ('link', LINK_RGBA)):
        ET.SubElement(ET.SubElement(robot, 'material', name=material), 'color', rgba=_f(rgba))
    ET.SubElement(robot, 'link', name=FRAME_WORLD)
    shapes = link_shapes(leg)
    for name, b in leg.bodies.items():
        link = ET.SubElement(robot, 'link', name=name)
        inertial = ET.SubElement(link, 'inertial')
        ET.SubElement(inertial, 'origin', xyz=_f(b.com), rpy='0 0 0')
        ET.SubElement(inertial, 'mass', value=_f(b.mass))
        ixx, iyy, izz, ixy, ixz, iyz = (repr(float(v)) for v in b.inertia)
        ET.SubElement(inertial, 'inertia', ixx=ixx, iyy=iyy, izz=izz, ixy=ixy, ixz=ixz, iyz=iyz)
        material = 'frame' if leg.parent_joint(name) is None else 'link'
        for s in shapes[name]:
            visual = ET.SubElement(link, 'visual', name=s.name)
            _geometry(visual, s)
            ET.SubElement(visual, 'material', name=material)
        for s in shapes[name]:
            _geometry(ET.SubElement(link, 'collision', name=s.name), s)
    for name in leg.bodies:
        j = leg.parent_joint(name)
        xyz, rot = joint_origin(leg, name)
        if j is None:
            el = ET.SubElement(robot, 'joint', name=f'{FRAME_WORLD}_to_{name}', type='fixed')
            ET.SubElement(el, 'parent', link=FRAME_WORLD)
        else:
            el = ET.SubElement(robot, 'joint', name=j.name, type='revolute')
            ET.SubElement(el, 'parent', link=j.parent)
        ET.SubElement(el, 'child', link=name)
        ET.SubElement(el, 'origin', xyz=_f(xyz), rpy=_f(matrix_to_rpy(rot)))
        if j is not None:
            ET.SubElement(el, 'axis', xyz=_f(j.axis))
            ET.SubElement(
                el,
                'limit',
                lower=_f(j.range[0]),
                upper=_f(j.range[1]),
                effort='100.0',
                velocity='100.0',
            )
            ET.SubElement(el, 'dynamics', damping=_f(j.damping))
    ET.indent(robot)
    return '<?xml version="1.0"?>\n' + ET.tostring(robot, encoding='unicode') + '\n'


def _vector(el: ET.Element | None, attr: str, default: str) -> np.ndarray:
    text = el.get(attr, default) if el is not None else default
    return np.array([float(v) for v in text.split()])


def parse_urdf_chain(urdf: str) -> dict:
    """child link -> (parent link, joint name, type, xyz, rpy, axis) read back from URDF text."""
    out = {}
    for el in ET.fromstring(urdf).iter('joint'):
        parent, child = el.find('parent'), el.find('child')
        if parent is None or child is None:
            raise ValueError(f'URDF joint {el.get("name")!r}: needs a parent and a child link')
        origin = el.find('origin')
        out[child.get('link')] = (
            parent.get('link'),
            el.get('name'),
            el.get('type'),
            _vector(origin, 'xyz', '0 0 0'),
            _vector(origin, 'rpy', '0 0 0'),
            _vector(el.find('axis'), 'xyz', '1 0 0'),
        )
    return out


def link_transforms(urdf: str, positions: Mapping[str, float]) -> dict:
    """Each link's parent-relative transform at the given joint positions: child -> (parent,
    xyz, rotation matrix). Fixed joints have no position; a missing movable joint is an error."""
    out = {}
    for child, (parent, jname, jtype, xyz, rpy, axis) in parse_urdf_chain(urdf).items():
        rot = rpy_matrix(rpy)
        if jtype != 'fixed':
            if jname not in positions:
                raise KeyError(f'no position for joint {jname!r} (have {sorted(positions)})')
            rot = rot @ axis_angle_matrix(axis, float(positions[jname]))
        out[child] = (parent, xyz, rot)
    return out


def forward_kinematics(urdf: str, positions: Mapping[str, float]) -> dict:
    """World pose of every link: name -> (position, rotation matrix), from the URDF text."""
    rel = link_transforms(urdf, positions)
    world: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def pose(link: str) -> tuple[np.ndarray, np.ndarray]:
        if link not in world:
            if link not in rel:
                world[link] = (np.zeros(3), np.eye(3))
            else:
                parent, xyz, rot = rel[link]
                pp, pr = pose(parent)
                world[link] = (pp + pr @ xyz, pr @ rot)
        return world[link]

    for link in rel:
        pose(link)
    return world
