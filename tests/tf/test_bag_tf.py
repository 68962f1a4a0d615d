"""A bag recorded from the sim graph (make run's job) holds robot_description, /tf_static and /tf
with the leg's and the motion-capture bodies' frames."""

import pathlib
import subprocess
import sys

import pytest
from rosbags.highlevel import AnyReader

from equimus_description.interface import (
    BODIES,
    ROBOT_DESCRIPTION,
    TF,
    TF_STATIC,
    mocap_frame,
)
from equimus_description.urdf import build_urdf

pytest.importorskip(
    'tf2_msgs.msg', reason='tf2_msgs not built (scripts/setup.sh builds third_party/tf2_msgs)'
)


@pytest.mark.slow
def test_sim_graph_bag_holds_tf_and_robot_description(tmp_path):
    run = subprocess.run(
        [sys.executable, '-m', 'equimus_bringup.main_job', '--duration', '2', '--out', tmp_path],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    bag = next(pathlib.Path(tmp_path).glob('*/bag'))
    frames: dict[str, set] = {TF.name: set(), TF_STATIC.name: set()}
    urdf = []
    with AnyReader([bag]) as reader:
        wanted = [c for c in reader.connections if c.topic in (*frames, ROBOT_DESCRIPTION.name)]
        for conn, _, raw in reader.messages(connections=wanted):
            msg = reader.deserialize(raw, conn.msgtype)
            if conn.topic == ROBOT_DESCRIPTION.name:
                urdf.append(msg.data)
            else:
                frames[conn.topic] |= {
                    (t.header.frame_id, t.child_frame_id) for t in msg.transforms
                }
    assert urdf == [build_urdf()]
    assert {('world', 'base'), ('world', 'mocap')} <= frames[TF_STATIC.name]
    want = {('base', 'thigh'), ('thigh', 'calf'), *(('mocap', mocap_frame(b)) for b in BODIES)}
    assert want <= frames[TF.name], frames[TF.name]
