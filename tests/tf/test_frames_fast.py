"""equimus_tf.frames: the float fast path of the movable joints equals the rotation-matrix
path (the URDF chain), and pose_is_finite refuses every non-finite field."""

import math
import random

import pytest

from equimus_description.leg import load_leg
from equimus_description.urdf import build_urdf
from equimus_tf.frames import LegFrames, pose_is_finite


def test_moving_equals_the_matrix_path():
    f = LegFrames(build_urdf(load_leg()))
    r = random.Random(4)
    names = list(f.joints)
    for _ in range(500):
        q = [r.uniform(-7.0, 7.0) for _ in names]
        fast, ref = f.moving(names, q), f.moving_by_matrix(names, q)
        assert fast is not None and ref is not None and len(fast) == len(ref) == len(names)
        for a, b in zip(fast, ref, strict=True):
            assert (a.parent, a.child, a.xyz) == (b.parent, b.child, b.xyz)
            # q and -q are one rotation; the two paths may pick either sign
            dot = sum(x * y for x, y in zip(a.quat, b.quat, strict=True))
            assert abs(abs(dot) - 1.0) < 1e-12
            sign = 1.0 if dot > 0 else -1.0
            assert all(abs(x - sign * y) < 1e-12 for x, y in zip(a.quat, b.quat, strict=True))
    assert f.moving(names, [0.5, math.nan]) is None
    assert f.moving(names[:1], [0.5]) is None


@pytest.mark.parametrize('bad', [math.nan, math.inf, -math.inf])
def test_pose_is_finite_refuses_each_field(bad):
    pos, quat = [0.1, 0.2, 0.3], [0.0, 0.0, 0.0, 1.0]
    assert pose_is_finite(pos, quat)
    for i in range(7):
        values = pos + quat
        values[i] = bad
        assert not pose_is_finite(values[:3], values[3:])
