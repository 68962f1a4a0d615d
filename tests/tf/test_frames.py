"""The plain pieces of state_publisher: the URDF tree's transforms, the rate gate, the batching
of one motion-capture frame's bodies."""

import math

import numpy as np

from equimus_description.urdf import build_urdf, forward_kinematics, rpy_matrix
from equimus_tf.frames import LegFrames, RateGate, StampBatch, mocap_frame


def test_leg_frames_match_forward_kinematics():
    urdf = build_urdf()
    lf = LegFrames(urdf)
    assert lf.joints == ('hip', 'knee')
    assert [(t.parent, t.child) for t in lf.static()] == [('world', 'base')]
    q = {'hip': 0.9, 'knee': 1.3}
    moving = {t.child: t for t in lf.moving(list(q), list(q.values()))}
    fk = forward_kinematics(urdf, q)
    base_pos, base_rot = fk['base']
    thigh = moving['thigh']
    assert np.allclose(base_pos + base_rot @ np.array(thigh.xyz), fk['thigh'][0], atol=1e-12)
    assert lf.moving(['hip', 'knee'], [math.nan, 1.0]) is None
    assert lf.moving(['hip'], [1.0]) is None


def test_mocap_frame_puts_motive_y_up_along_world_z():
    t = mocap_frame((0, 0, 0), (math.pi / 2, 0, 0))
    x, y, z, w = t.quat
    r = np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )
    assert np.allclose(r @ [0, 1, 0], [0, 0, 1])
    assert np.allclose(r, rpy_matrix((math.pi / 2, 0, 0)))


def test_rate_gate_keeps_every_second_frame_of_120_hz_at_60_hz():
    gate = RateGate(60.0)
    stamps = [round(i * 1e9 / 120) for i in range(120)]
    passed = [s for s in stamps if gate.ready(s)]
    assert len(passed) == 60
    assert RateGate(0.0).ready(5) and RateGate(0.0).ready(5)
    gate = RateGate(50.0)
    assert gate.ready(10_000_000_000)
    assert not gate.ready(10_000_000_000)  # same stamp again
    assert gate.ready(1_000)  # the source restarted: time went backwards


def test_stamp_batch_releases_a_complete_frame_or_the_previous_partial_one():
    b = StampBatch(('base', 'thigh', 'calf'))
    assert b.add('base', 10, 'B10') is None
    assert b.add('thigh', 10, 'T10') is None
    assert b.add('calf', 10, 'C10') == ['B10', 'T10', 'C10']
    assert b.add('base', 20, 'B20') is None
    assert b.add('thigh', 20, None) is None  # occluded: counts, publishes nothing
    assert b.add('calf', 20, 'C20') == ['B20', 'C20']
    assert b.add('base', 30, 'B30') is None
    assert b.add('base', 40, 'B40') == ['B30']  # frame 30 never completed
    assert b.add('calf', 35, 'late') is None
