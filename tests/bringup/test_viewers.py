"""The RViz, Foxglove and PlotJuggler files name only topics, frames and joints the graph has,
are installed with equimus_bringup, and `rviz:=true` starts RViz in both launch files."""

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from equimus_description.interface import (
    FRAME_WORLD,
    JOINTS,
    ROBOT_DESCRIPTION,
    TF,
    TF_STATIC,
    TOPICS,
)

KNOWN_TOPICS = {t.name for t in (*TOPICS, ROBOT_DESCRIPTION, TF, TF_STATIC)}
VIEWERS = ('equimus.rviz', 'foxglove_layout.json', 'plotjuggler_layout.xml')


@pytest.fixture
def viewers(repo_dir):
    return repo_dir / 'src' / 'equimus_bringup' / 'viewers'


def _rviz_topics(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == 'Topic' and isinstance(value, dict) or key == 'Description Topic':
                yield value['Value']
            else:
                yield from _rviz_topics(value)
    elif isinstance(node, list):
        for item in node:
            yield from _rviz_topics(item)


def test_rviz_config(viewers):
    cfg = yaml.safe_load((viewers / 'equimus.rviz').read_text())
    manager = cfg['Visualization Manager']
    assert manager['Global Options']['Fixed Frame'] == FRAME_WORLD
    topics = set(_rviz_topics(manager))
    assert ROBOT_DESCRIPTION.name in topics
    assert topics <= KNOWN_TOPICS, topics - KNOWN_TOPICS
    classes = {d['Class'] for d in manager['Displays']}
    assert {'rviz_default_plugins/RobotModel', 'rviz_default_plugins/TF'} <= classes


def test_foxglove_layout(viewers):
    layout = json.loads((viewers / 'foxglove_layout.json').read_text())
    panels = layout['configById']
    paths = [p['value'] for cfg in panels.values() for p in cfg.get('paths', [])]
    assert paths
    for path in paths:
        topic = path.split('.')[0]
        assert topic in KNOWN_TOPICS, path
    layers = panels['3D!leg']['layers']
    assert any(la.get('topic') == ROBOT_DESCRIPTION.name for la in layers.values())
    assert panels['3D!leg']['followTf'] == FRAME_WORLD


def test_plotjuggler_layout(viewers):
    root = ET.parse(viewers / 'plotjuggler_layout.xml').getroot()
    curves = [c.get('name') for c in root.iter('curve')]
    assert curves
    for curve in curves:
        m = re.fullmatch(r'(/.+?)/(?:(\w+)/position|data\[(\d)\])', curve)
        assert m, curve
        topic, joint = m.group(1), m.group(2)
        assert topic in KNOWN_TOPICS, curve
        assert joint is None or joint in JOINTS, curve


def test_viewers_are_installed():
    from ament_index_python.packages import get_package_share_directory

    share = Path(get_package_share_directory('equimus_bringup')) / 'viewers'
    for name in VIEWERS:
        assert (share / name).is_file(), name


@pytest.mark.parametrize('name', ['sim.launch.py', 'hardware.launch.py'])
def test_rviz_argument_in_both_launch_files(repo_dir, name):
    """launch_ros is not installable here: check that both files add the viewer actions, and
    that those declare `rviz` and start rviz2 on it with the installed config."""
    assert 'viewer_actions()' in (repo_dir / 'launch' / name).read_text()
    common = (repo_dir / 'src/equimus_bringup/equimus_bringup/launch_common.py').read_text()
    body = common[common.index('def viewer_actions') :]
    for needle in (
        "DeclareLaunchArgument(\n            'rviz'",
        "package='rviz2'",
        "condition=IfCondition(LaunchConfiguration('rviz'))",
        '*RVIZ_CONFIG',
    ):
        assert needle in body, needle
    assert "RVIZ_CONFIG = ('viewers', 'equimus.rviz')" in common
