"""The URDF and the MJCF are built from one LegDescription: their forward kinematics agree."""

import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import pytest

from equimus_description.interface import FRAME_WORLD, JOINTS
from equimus_description.leg import load_leg
from equimus_description.urdf import build_urdf, forward_kinematics, matrix_to_quat, rpy_matrix
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
