"""The URDF and the MJCF are built from one LegDescription: their forward kinematics agree; the
URDF's shapes follow the kinematics, and its rest pose lies inside the joint limits."""

import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import pytest

from equimus_description import kinematics as K
from equimus_description.interface import FRAME_WORLD, JOINTS
from equimus_description.leg import load_leg, to_planar
from equimus_description.urdf import (
    build_urdf,
    forward_kinematics,
    matrix_to_quat,
    rest_positions,
    rpy_matrix,
)
from equimus_sim.mjcf_builder import build_model


@pytest.mark.parametrize('variant', ['equimus', 'pure'])
def test_urdf_and_mjcf_forward_kinematics_agree(variant):
    leg = load_leg()
    urdf = build_urdf(leg)
    model = build_model(leg, variant)
    data = mujoco.MjData(model)
    rng = np.random.default_rng(15)
    for _ in range(50):
        q = {j.name: rng.uniform(j.range[0], j.range[1]) for j in leg.joints.values()}
        for name, value in q.items():
            data.qpos[model.jnt_qposadr[model.joint(name).id]] = value
        mujoco.mj_kinematics(model, data)
        fk = forward_kinematics(urdf, q)
        for body in leg.bodies:
            bid = model.body(body).id
            pos, rot = fk[body]
            assert np.linalg.norm(pos - data.xpos[bid]) < 1e-9, (body, q)
            assert np.abs(rot - data.xmat[bid].reshape(3, 3)).max() < 1e-9, (body, q)


def test_urdf_names_match_joint_states_and_world():
    leg = load_leg()
    root = ET.fromstring(build_urdf(leg))
    links = {el.get('name') for el in root.iter('link')}
    assert links == {FRAME_WORLD, *leg.bodies}
    movable = [el.get('name') for el in root.iter('joint') if el.get('type') != 'fixed']
    assert tuple(movable) == JOINTS
    for el in root.iter('joint'):
        if el.get('type') == 'revolute':
            lim = el.find('limit')
            j = leg.joints[el.get('name')]
            assert (float(lim.get('lower')), float(lim.get('upper'))) == j.range


def test_fk_moves_with_the_joint_and_rejects_a_missing_one():
    urdf = build_urdf()
    a = forward_kinematics(urdf, {'hip': 1.0, 'knee': 1.0})['calf'][0]
    b = forward_kinematics(urdf, {'hip': 1.2, 'knee': 1.0})['calf'][0]
    assert np.linalg.norm(a - b) > 1e-3
    with pytest.raises(KeyError, match='knee'):
        forward_kinematics(urdf, {'hip': 1.0})


def test_quaternion_of_rotation_matrix():
    rng = np.random.default_rng(3)
    for _ in range(100):
        r = rpy_matrix(rng.uniform(-np.pi, np.pi, 3))
        x, y, z, w = matrix_to_quat(r)
        back = np.array(
            [
                [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
            ]
        )
        assert np.abs(back - r).max() < 1e-12


LIMBS = [None, 'config/limb_3dof.yaml']


def _shapes(urdf, tag):
    """link -> [(name, kind, size, xyz, rotation)] of its <visual> or <collision> elements."""
    out = {}
    for link in ET.fromstring(urdf).iter('link'):
        items = []
        for el in link.iter(tag):
            origin = el.find('origin')
            xyz = np.array([float(v) for v in origin.get('xyz').split()])
            rot = rpy_matrix([float(v) for v in origin.get('rpy').split()])
            geom = el.find('geometry')[0]
            size = tuple(float(geom.get(k)) for k in ('radius', 'length') if geom.get(k))
            items.append((el.get('name'), geom.tag, size, xyz, rot))
        out[link.get('name')] = items
    return out


@pytest.mark.parametrize('limb', LIMBS)
def test_every_link_has_visual_and_collision_shapes(repo_dir, limb):
    leg = load_leg(repo_dir / limb if limb else None)
    urdf = build_urdf(leg)
    visual, collision = _shapes(urdf, 'visual'), _shapes(urdf, 'collision')
    for body in leg.bodies:
        assert visual[body], f'{body}: no visual geometry (RViz would draw inertia boxes)'
        assert [s[:3] for s in collision[body]] == [s[:3] for s in visual[body]], body
        for _, kind, size, _, _ in visual[body]:
            assert kind in ('cylinder', 'sphere') and all(v > 0 for v in size), (body, size)
    assert not visual['world']


@pytest.mark.parametrize('limb', LIMBS)
def test_rest_positions_lie_inside_the_urdf_limits(repo_dir, limb):
    leg = load_leg(repo_dir / limb if limb else None)
    rest = rest_positions(leg)
    limits = {
        el.get('name'): (float(el.find('limit').get('lower')), float(el.find('limit').get('upper')))
        for el in ET.fromstring(build_urdf(leg)).iter('joint')
        if el.get('type') == 'revolute'
    }
    assert set(rest) == set(limits)
    for name, value in rest.items():
        lo, hi = limits[name]
        assert lo <= value <= hi, (name, value, limits[name])
    # zero is no pose of this leg: the hip's range excludes it (why rest_positions exists)
    assert not limits['hip'][0] <= 0.0 <= limits['hip'][1]


def test_rest_position_of_a_ref_outside_the_range_is_the_middle():
    leg = load_leg().with_overrides({'joints.knee.range': [0.0, 1.0]})  # ref π/2 above it
    rest = rest_positions(leg)
    assert rest['knee'] == pytest.approx(0.5)
    assert rest['hip'] == leg.joints['hip'].ref


def test_shapes_follow_the_kinematics():
    """At a few poses, every rod's ends (world, from the URDF's forward kinematics) are the
    kinematics' points in the paper's planar frame: hip, knee, foot, the anchors C and D on the
    links and the base anchors; the foot sphere sits on the foot, each hub on its hinge axis."""
    leg = load_leg()
    g = leg.geometry
    urdf = build_urdf(leg)
    shapes = _shapes(urdf, 'visual')
    base_pos = leg.bodies['base'].pos
    hip_world = base_pos + leg.bodies['thigh'].pos
    anchors = K.base_anchors(g)
    seen = set()
    for q in ([1.2, 0.7], [0.6, 1.9], [2.5, 0.1], [1.5707963267948966, 1.5707963267948966]):
        pts = K.link_points(np.array(q), g)
        named = {
            'hip': pts['hip'],
            'knee': pts['knee'],
            'foot': pts['foot'],
            'maa_tip': pts['C'],
            'baa_tip': pts['D'],
            'maa_base': anchors[0],
            'baa_base': anchors[1],
            'base': to_planar(base_pos, hip_world),
        }
        fk = forward_kinematics(urdf, dict(zip(JOINTS, q, strict=True)))
        for link, items in shapes.items():
            if link == FRAME_WORLD:
                continue
            lpos, lrot = fk[link]
            for name, kind, size, xyz, rot in items:
                centre = lpos + lrot @ xyz
                axis = lrot @ rot @ np.array([0.0, 0.0, 1.0])
                if not name.startswith('base-'):  # all but the mount lie in the swing plane
                    assert abs(centre[0] - hip_world[0]) < 1e-9, (link, name)
                if kind == 'sphere':
                    assert name == 'foot'
                    assert np.linalg.norm(to_planar(centre, hip_world) - named['foot']) < 1e-6
                elif name in JOINTS:  # a hub: centred on the hinge, along its axis
                    hinge = named[name]
                    assert np.linalg.norm(to_planar(centre, hip_world) - hinge) < 1e-6
                    j_axis = fk[leg.joints[name].child][1] @ leg.joints[name].axis
                    assert abs(abs(axis @ j_axis) - 1.0) < 1e-9
                else:
                    a, b = name.split('-')
                    ends = [to_planar(centre + s * size[1] / 2 * axis, hip_world) for s in (-1, 1)]
                    want = [named[a], named[b]]
                    ok = any(
                        np.linalg.norm(ends[0] - w0) < 1e-5 and np.linalg.norm(ends[1] - w1) < 1e-5
                        for w0, w1 in (want, want[::-1])
                    )
                    assert ok, (link, name, q, ends, want)
                seen.add(name)
    assert {'hip-knee', 'knee-foot', 'hip-maa_tip', 'knee-baa_tip', 'foot'} <= seen, seen
    assert {'hip-maa_base', 'hip-baa_base', 'hip', 'knee'} <= seen, seen
