"""The RViz, Foxglove and PlotJuggler files plot fields that exist: each topic's message type comes
from the interface (equimus_description.interface.topic_named), each path is walked field by field
through the real message classes (rosidl's get_fields_and_field_types), an array index must fall
inside the array the graph fills on that topic (Topic.arrays) and lead to a number, and a display's
QoS must match the topic's. A slow test reads every plotted path from the sim graph's real
messages. The files are installed with equimus_bringup, and `rviz:=true` starts RViz."""

from __future__ import annotations

import importlib
import json
import math
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from rclpy.qos import DurabilityPolicy, ReliabilityPolicy
from rclpy.serialization import deserialize_message

from equimus_description.interface import (
    DIAGNOSTICS,
    FRAME_WORLD,
    ROBOT_DESCRIPTION,
    Topic,
    topic_named,
)
from equimus_ros.qos import qos_for

VIEWERS = ('equimus.rviz', 'foxglove_layout.json', 'plotjuggler_layout.xml')
NUMBERS = {
    'boolean',
    'octet',
    'char',
    'float',
    'double',
    'int8',
    'uint8',
    'int16',
    'uint16',
    'int32',
    'uint32',
    'int64',
    'uint64',
}
SEQUENCE = re.compile(r'sequence<([^,>]+)(?:, ?\d+)?>$')
FIXED_ARRAY = re.compile(r'(.+)\[(\d+)\]$')
STEP = re.compile(r'([A-Za-z_]\w*)((?:\[\d+\])*)$')
# What each RViz display class subscribes to: the key holding its topic, and the message type.
RVIZ_DISPLAY_TYPES = {
    'rviz_default_plugins/RobotModel': ('Description Topic', 'std_msgs/msg/String'),
    'rviz_default_plugins/Pose': ('Topic', 'geometry_msgs/msg/PoseStamped'),
    'rviz_default_plugins/PointCloud2': ('Topic', 'sensor_msgs/msg/PointCloud2'),
}
RVIZ_NO_TOPIC = {'rviz_default_plugins/Grid', 'rviz_default_plugins/TF'}  # TF reads /tf itself
RVIZ_RELIABILITY = {
    'Reliable': ReliabilityPolicy.RELIABLE,
    'Best Effort': ReliabilityPolicy.BEST_EFFORT,
}
RVIZ_DURABILITY = {
    'Volatile': DurabilityPolicy.VOLATILE,
    'Transient Local': DurabilityPolicy.TRANSIENT_LOCAL,
}


def message_class(type_name: str) -> type:
    """The generated class of 'pkg/msg/Name' or 'pkg/Name' (rosidl's nested-field spelling)."""
    pkg, *_, name = type_name.split('/')
    return getattr(importlib.import_module(f'{pkg}.msg'), name)


def parse_steps(text: str) -> list[str | int]:
    """'pose.position.z' -> ['pose', 'position', 'z']; 'effort[0]' -> ['effort', 0]."""
    steps: list[str | int] = []
    for part in text.split('.'):
        m = STEP.fullmatch(part)
        assert m, f'{text!r}: {part!r} is not a field name with optional [index]'
        steps.append(m.group(1))
        steps += [int(i) for i in re.findall(r'\[(\d+)\]', m.group(2))]
    return steps


def walk(topic: Topic, steps: list[str | int]) -> str:
    """The type that `steps` reach in the topic's message; fails at the first step that does not
    exist. An index into a sequence must fall inside what the graph fills there (Topic.arrays,
    keyed by the field path); a fixed-size array only bounds it."""
    typ, done = topic.type, topic.name
    fields_so_far: list[str] = []
    for step in steps:
        if isinstance(step, int):
            seq, fixed = SEQUENCE.fullmatch(typ), FIXED_ARRAY.fullmatch(typ)
            assert seq or fixed, f'{done} is a {typ}, not an array: no [{step}]'
            if fixed:
                assert step < int(fixed.group(2)), f'{done}[{step}]: the array has {fixed[2]}'
                typ = fixed.group(1)
            else:
                assert seq is not None
                elements = topic.elements('.'.join(fields_so_far))
                assert elements is not None, f'{done} stays empty on {topic.name}'
                assert step < len(elements), f'{done}[{step}]: it holds {list(elements)}'
                typ = seq.group(1)
            done += f'[{step}]'
        else:
            assert typ not in NUMBERS and '/' in typ, f'{done} is a {typ}: it has no .{step}'
            fields = message_class(typ).get_fields_and_field_types()
            assert step in fields, f'{done} ({typ}) has no field {step!r}: {sorted(fields)}'
            typ = fields[step]
            done += f'.{step}'
            fields_so_far.append(step)
    return typ


def plotted_number(topic: Topic, steps: list[str | int]) -> None:
    typ = walk(topic, steps)
    assert typ in NUMBERS, f'{topic.name} {steps} is a {typ}, not a number to plot'


def element_named(topic: Topic, steps: list[str | int]) -> str | None:
    """The element name an index of a message field stands for ('maa' for effort[0])."""
    if len(steps) == 2 and isinstance(steps[1], int):
        elements = topic.elements(str(steps[0]))
        return elements[steps[1]] if elements else None
    return None


# ------------------------------------------------------------------------------ Foxglove
def foxglove_paths(layout: dict) -> list[tuple[Topic, list[str | int], dict]]:
    """(topic, field steps, the path's entry) of every plotted message path."""
    out = []
    for cfg in layout['configById'].values():
        for entry in cfg.get('paths', []):
            topic, _, fields = entry['value'].partition('.')
            out.append((topic_named(topic), parse_steps(fields), entry))
    return out


def check_foxglove(layout: dict) -> None:
    panels = layout['configById']
    paths = foxglove_paths(layout)
    assert paths
    for topic, steps, entry in paths:
        plotted_number(topic, steps)
        element = element_named(topic, steps)
        if element is not None:  # "maa applied" plots the maa channel
            assert entry['label'].split()[0] == element, (entry['value'], entry['label'])
        fields = message_class(topic.type).get_fields_and_field_types()
        if entry.get('timestampMethod') == 'headerStamp':
            assert 'header' in fields, f'{entry["value"]}: {topic.type} has no header stamp'
    layers = panels['3D!leg']['layers']
    urdf_layers = [la for la in layers.values() if la.get('layerId') == 'foxglove.Urdf']
    assert urdf_layers and all(topic_named(la['topic']) is ROBOT_DESCRIPTION for la in urdf_layers)
    assert ROBOT_DESCRIPTION.type == 'std_msgs/msg/String'  # what the URDF layer reads
    for name in panels['3D!leg'].get('topics', {}):
        topic_named(name)
    assert panels['3D!leg']['followTf'] == FRAME_WORLD
    for cfg in panels.values():
        if 'topicToRender' in cfg:
            assert topic_named(cfg['topicToRender']).type == DIAGNOSTICS.type


# ------------------------------------------------------------------------------ PlotJuggler
def plotjuggler_curve(name: str) -> tuple[Topic, list[str | int]]:
    """A curve name as PlotJuggler's ROS 2 parsers make it: `<topic>/<joint>/<field>` for a
    sensor_msgs/JointState (its special parser), `<topic>/<field>[i]/...` for any other type."""
    parts = name.split('/')
    for k in range(len(parts) - 1, 1, -1):
        try:
            topic = topic_named('/'.join(parts[:k]))
        except KeyError:
            continue
        rest = parts[k:]
        if topic.type == 'sensor_msgs/msg/JointState':
            assert len(rest) == 2, f'{name}: a JointState curve is <topic>/<name>/<field>'
            element, field = rest
            names = topic.elements('name')
            assert names and element in names, f'{name}: {topic.name} names {names}'
            return topic, [field, names.index(element)]
        return topic, parse_steps('.'.join(rest))
    raise AssertionError(f'{name}: no topic of the interface is a prefix of it')


def check_plotjuggler(root: ET.Element) -> None:
    curves = [c.get('name') for c in root.iter('curve')]
    assert curves
    for curve in curves:
        topic, steps = plotjuggler_curve(curve)
        plotted_number(topic, steps)


# ------------------------------------------------------------------------------ RViz
def rviz_displays(manager: dict) -> list[dict]:
    return list(manager['Displays'])


def check_rviz(cfg: dict) -> None:
    manager = cfg['Visualization Manager']
    assert manager['Global Options']['Fixed Frame'] == FRAME_WORLD
    classes = set()
    for display in rviz_displays(manager):
        cls = display['Class']
        classes.add(cls)
        if cls in RVIZ_NO_TOPIC:
            continue
        assert cls in RVIZ_DISPLAY_TYPES, f'{cls}: add the message type it subscribes to'
        key, msg_type = RVIZ_DISPLAY_TYPES[cls]
        block = display[key]
        topic = topic_named(block['Value'])
        assert topic.type == msg_type, (display['Name'], topic.name, topic.type, msg_type)
        profile = qos_for(topic)
        assert RVIZ_RELIABILITY[block['Reliability Policy']] == profile.reliability, display
        assert RVIZ_DURABILITY[block['Durability Policy']] == profile.durability, display
    assert {'rviz_default_plugins/RobotModel', 'rviz_default_plugins/TF'} <= classes
    model = next(d for d in rviz_displays(manager) if d['Class'].endswith('/RobotModel'))
    assert model['Description Topic']['Value'] == ROBOT_DESCRIPTION.name
    # The URDF has shapes: show them, not the inertia boxes.
    assert model['Visual Enabled'] and not any(model['Mass Properties'].values())


@pytest.fixture
def viewers(repo_dir):
    return repo_dir / 'src' / 'equimus_bringup' / 'viewers'


def test_rviz_displays_match_topic_types_and_qos(viewers):
    check_rviz(yaml.safe_load((viewers / 'equimus.rviz').read_text()))


def test_foxglove_paths_exist_in_the_message_types(viewers):
    check_foxglove(json.loads((viewers / 'foxglove_layout.json').read_text()))


def test_plotjuggler_curves_exist_in_the_message_types(viewers):
    check_plotjuggler(ET.parse(viewers / 'plotjuggler_layout.xml').getroot())


@pytest.mark.parametrize(
    'path',
    [
        '/valve/applied.data[0]',  # the field before the topics became JointState
        '/valve/applied.position[0]',  # exists in the type, never filled on this topic
        '/valve/applied.effort[2]',  # two channels only
        '/valve/applied.effort',  # an array, not a number
        '/joint_states.header.stamp',  # a message, not a number
        '/mocap/thigh/pose.pose.position.w',
        '/valve/command.layout.dim[0].size',  # the layout is no plotted array of the graph
        '/no/such/topic.data[0]',
    ],
)
def test_a_wrong_foxglove_path_fails(path):
    layout = {
        'configById': {
            'Plot!x': {'paths': [{'value': path, 'label': 'maa x'}]},
            '3D!leg': {
                'followTf': FRAME_WORLD,
                'layers': {'l': {'layerId': 'foxglove.Urdf', 'topic': ROBOT_DESCRIPTION.name}},
            },
        }
    }
    with pytest.raises((AssertionError, KeyError)):
        check_foxglove(layout)


def test_a_mislabelled_foxglove_path_fails():
    layout = {
        'configById': {
            'Plot!x': {'paths': [{'value': '/valve/applied.effort[1]', 'label': 'maa applied'}]},
            '3D!leg': {'followTf': FRAME_WORLD, 'layers': {}},
        }
    }
    with pytest.raises(AssertionError, match='maa applied'):
        check_foxglove(layout)


@pytest.mark.parametrize(
    'curve',
    [
        '/valve/applied/data[0]',
        '/valve/applied/maa/position',  # a JointState field left empty on this topic
        '/valve/pressure/hip/effort',  # not a channel of the pressure topics
        '/joint_states/position[0]',  # PlotJuggler names JointState series by joint
        '/valve/command/data[2]',
        '/valve/command/effort[0]',
    ],
)
def test_a_wrong_plotjuggler_curve_fails(curve):
    root = ET.fromstring(f'<root><curve name="{curve}"/></root>')
    with pytest.raises(AssertionError):
        check_plotjuggler(root)


@pytest.mark.parametrize(
    'change',
    [
        {'Value': '/mocap/thigh/pose', 'Reliability Policy': 'Reliable'},  # sensor: best effort
        {'Value': '/joint_states'},  # a JointState, not a PoseStamped
    ],
)
def test_a_wrong_rviz_display_fails(viewers, change):
    cfg = yaml.safe_load((viewers / 'equimus.rviz').read_text())
    pose = next(d for d in cfg['Visualization Manager']['Displays'] if d['Class'].endswith('/Pose'))
    pose['Topic'].update(change)
    with pytest.raises(AssertionError):
        check_rviz(cfg)


def value_at(msg, steps: list[str | int]):
    for step in steps:
        msg = msg[step] if isinstance(step, int) else getattr(msg, step)
    return msg


@pytest.mark.slow
def test_every_plotted_path_reads_a_number_from_the_sim_graphs_messages(viewers, tmp_path):
    """The sim graph (make run's job, 0.5 s): its bag's messages hold every plotted field, and
    every topic fills exactly the arrays the interface lists (Topic.arrays), element names in
    order."""
    from equimus_record.bag import raw_messages

    run = subprocess.run(
        [sys.executable, '-m', 'equimus_bringup.main_job', '--duration', '0.5', '--out', tmp_path],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    bag = next(Path(tmp_path).glob('*/bag'))
    layout = json.loads((viewers / 'foxglove_layout.json').read_text())
    root = ET.parse(viewers / 'plotjuggler_layout.xml').getroot()
    plotted = [(t, s) for t, s, _ in foxglove_paths(layout)]
    plotted += [plotjuggler_curve(c.get('name')) for c in root.iter('curve')]
    topics = {t.name: t for t, _ in plotted}
    last: dict[str, object] = {}
    for name, msgtype, _, raw in raw_messages(bag, list(topics)):
        topic = topics[name]
        assert msgtype == topic.type, (name, msgtype)
        msg = deserialize_message(raw, message_class(topic.type))
        for field, kind in type(msg).get_fields_and_field_types().items():
            if SEQUENCE.fullmatch(kind):
                elements = topic.elements(field)
                got = list(getattr(msg, field))
                if elements is None:
                    assert not got, f'{name}.{field} is filled: list it in Topic.arrays'
                elif field == 'name':
                    assert tuple(got) == elements, (name, got)
                else:
                    assert len(got) == len(elements), (name, field, got)
        last[name] = msg
    assert set(last) == set(topics), f'no message on {set(topics) - set(last)}'
    for topic, steps in plotted:
        value = value_at(last[topic.name], steps)
        assert isinstance(value, float) and math.isfinite(value), (topic.name, steps, value)


def test_viewers_are_installed():
    from ament_index_python.packages import get_package_share_directory

    share = Path(get_package_share_directory('equimus_bringup')) / 'viewers'
    for name in VIEWERS:
        assert (share / name).is_file(), name
