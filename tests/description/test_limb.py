"""Any tree of hinges with any number of muscles: the description's errors name the key, and the
general kinematics (equimus_description.limb) agrees with the 2-joint closed forms and with
finite differences on random trees."""

import copy

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from equimus_description import kinematics as K
from equimus_description.leg import (
    LegDescriptionError,
    default_leg_path,
    from_dict,
    load_leg,
)
from equimus_description.limb import PlanarLimb, PlanarLimbError
from equimus_description.statics import StaticParams, holding_forces

GOOD = yaml.safe_load(default_leg_path().read_text())


def _load(tmp_path, doc):
    path = tmp_path / 'limb.yaml'
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_leg(path)


def test_muscle_on_one_body_names_the_key(tmp_path):
    doc = copy.deepcopy(GOOD)
    doc['actuators']['baa']['tip']['body'] = doc['actuators']['baa']['base']['body']
    with pytest.raises(LegDescriptionError) as e:
        _load(tmp_path, doc)
    assert 'actuators.baa.tip.body' in str(e.value)
    assert 'both ends are on body' in str(e.value)
    assert str(e.value).startswith(f'{tmp_path / "limb.yaml"}:')


@pytest.mark.parametrize('parent_of_thigh', ['calf', 'thigh'])
def test_loop_in_the_tree_names_a_joint_of_the_loop(tmp_path, parent_of_thigh):
    doc = copy.deepcopy(GOOD)
    doc['joints']['hip']['parent'] = parent_of_thigh  # calf -> thigh -> calf, or thigh -> thigh
    with pytest.raises(LegDescriptionError) as e:
        _load(tmp_path, doc)
    text = str(e.value)
    assert 'form a loop' in text and ('joints.hip' in text or 'joints.knee' in text), text
    assert '\n' not in text


@pytest.mark.parametrize(
    'path, key',
    [
        (('actuators', 'maa', 'k'), 'actuators.maa.k'),
        (('actuators', 'baa', 'area'), 'actuators.baa.area'),
        (('bodies', 'calf', 'mass'), 'bodies.calf.mass'),
    ],
)
def test_missing_parameter_names_the_key(tmp_path, path, key):
    doc = copy.deepcopy(GOOD)
    node = doc
    for p in path[:-1]:
        node = node[p]
    del node[path[-1]]
    with pytest.raises(LegDescriptionError) as e:
        _load(tmp_path, doc)
    assert key in str(e.value) and 'missing' in str(e.value), str(e.value)


def test_two_joint_leg_matches_the_closed_forms():
    leg = load_leg()
    limb = PlanarLimb(leg)
    params = StaticParams.from_leg(leg)
    for q in ([1.3, 0.6], [0.8, 1.2], [2.2, 0.1]):
        q = np.array(q)
        np.testing.assert_allclose(limb.actuator_lengths(q), K.actuator_lengths(q, leg.geometry))
        np.testing.assert_allclose(
            limb.actuation_jacobian(q), K.actuation_jacobian(q, leg.geometry), atol=1e-12
        )
        F = holding_forces(q, params)
        # the closed form uses the same 3-2-1 masses: its holding forces balance the general model
        assert np.max(np.abs(limb.static_torque(q, F))) < 2e-3


def test_an_axis_off_world_x_is_refused():
    doc = copy.deepcopy(GOOD)
    doc['joints']['knee']['axis'] = [0, 1, 0]
    with pytest.raises(PlanarLimbError, match=r'joints\.knee\.axis'):
        PlanarLimb(from_dict(doc))


@st.composite
def trees(draw):
    """A random tree of 1-5 hinges and 1-6 muscles, each muscle on two different bodies."""
    n = draw(st.integers(1, 5))
    bodies = {'base': {'pos': [0, 0, 1.0], 'mass': 0.1}}
    joints = {}
    coord = st.floats(-0.3, 0.3)
    for i in range(n):
        parent = draw(st.sampled_from(sorted(bodies)))
        name = f'b{i}'
        bodies[name] = {
            'pos': [0, draw(coord), draw(coord)],
            'mass': draw(st.floats(0.01, 1.0)),
            'com': [0, draw(coord), draw(coord)],
        }
        joints[f'j{i}'] = {
            'parent': parent,
            'child': name,
            'axis': [draw(st.sampled_from([-1, 1])), 0, 0],
            'ref': draw(st.floats(-1.0, 1.0)),
        }
    acts = {}
    for a in range(draw(st.integers(1, 6))):
        ends = draw(st.permutations(sorted(bodies)))[:2]
        acts[f'm{a}'] = {
            'base': {'body': ends[0], 'pos': [0, draw(coord), draw(coord)]},
            'tip': {'body': ends[1], 'pos': [0, draw(coord), draw(coord)]},
            'm': draw(st.floats(0.01, 0.3)),
            'k': 200.0,
            'c': 5.0,
            'l0': 0.2,
            'area': 4e-4,
        }
    return {'name': 'random', 'bodies': bodies, 'joints': joints, 'actuators': acts}


@settings(max_examples=60, deadline=None)
@given(trees(), st.integers(0, 2**31 - 1))
def test_random_trees_build_and_their_jacobian_is_the_derivative_of_the_lengths(doc, seed):
    leg = from_dict(doc)
    limb = PlanarLimb(leg)
    assert set(limb.joint_names) == set(doc['joints']) and limb.m == len(doc['actuators'])
    q = limb.ref + np.random.default_rng(seed).uniform(-0.5, 0.5, limb.n)
    with np.errstate(divide='ignore', invalid='ignore'):  # the Jacobian of a 0 m length
        if np.min(limb.actuator_lengths(q)) < 1e-3:
            return  # anchors (nearly) coincide: the length is not differentiable there
    lengths, J = limb.lengths_jacobian(q)
    assert J.shape == (limb.m, limb.n)
    h = 1e-6
    fd = np.column_stack(
        [
            (limb.actuator_lengths(q + h * e) - limb.actuator_lengths(q - h * e)) / (2 * h)
            for e in np.eye(limb.n)
        ]
    )
    np.testing.assert_allclose(J, fd, atol=1e-6)
