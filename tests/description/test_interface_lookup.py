"""interface.topic_named: a topic name to the interface's Topic (type, QoS class, arrays)."""

import pytest

from equimus_description.interface import (
    ACTUATORS,
    JOINTS,
    ROBOT_DESCRIPTION,
    TOPICS,
    VALVE_APPLIED,
    VALVE_COMMAND,
    mocap_pose,
    topic_named,
)


def test_every_topic_is_found_by_its_name():
    for topic in (*TOPICS, ROBOT_DESCRIPTION):
        assert topic_named(topic.name) == topic
    assert topic_named('/mocap/tool/pose') == mocap_pose('tool')  # any rigid body Motive streams


@pytest.mark.parametrize('name', ['/valve/applied/maa', '/mocap//pose', '/mocap/a/b/pose', ''])
def test_an_unknown_name_is_refused(name):
    with pytest.raises(KeyError, match='not a topic of the interface'):
        topic_named(name)


def test_arrays_name_their_elements():
    assert VALVE_APPLIED.elements('effort') == ACTUATORS
    assert VALVE_APPLIED.elements('position') is None  # left empty on the pressure topics
    assert VALVE_COMMAND.elements('data') == ACTUATORS
    assert topic_named('/joint_states').elements('position') == JOINTS
