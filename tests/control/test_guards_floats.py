"""The ControlStep guards on plain floats (Supervisor.check_state, clip; set_reference) decide
as the array tests they replaced, over random states with NaN, ±inf and out-of-range values."""

import math
import random

import numpy as np

from equimus_control.step import ControlStep
from equimus_control.supervisor import VENT, SafetyConfig, Supervisor


def _array_verdict(q, qd, cfg, rearming):
    """The array form of check_state's decision (True = may act)."""
    q = np.asarray(q, float)
    if q.shape != (2,) or not np.all(np.isfinite(q)):
        return False
    if qd is not None and not np.all(np.isfinite(qd)):
        return False
    lo, hi = np.asarray(cfg.safe_min), np.asarray(cfg.safe_max)
    if np.any(q < lo) or np.any(q > hi):
        return False
    m = cfg.rearm_margin
    return not (rearming and (np.any(q < lo + m) or np.any(q > hi - m)))


def _value(r):
    return r.choice([math.nan, math.inf, -math.inf, r.uniform(-1, 4), r.uniform(0.5, 2.5)])


def test_check_state_and_clip_decide_as_the_array_tests():
    cfg = SafetyConfig()
    r = random.Random(21)
    sup = Supervisor(cfg)
    for _ in range(3000):
        q = [_value(r), _value(r)] if r.random() < 0.95 else [1.0]
        qd = None if r.random() < 0.2 else np.array([_value(r), _value(r)])
        rearming = sup.venting and sup.reason.startswith('joint_limit')
        expected = _array_verdict(q, qd, cfg, rearming)
        assert sup.check_state(np.array(q), 0.0, qd) == expected, (q, qd, sup.reason)
        u = np.array([_value(r) * 30, _value(r) * 30])
        out = sup.clip(u)
        if np.all(np.isfinite(u)):
            assert np.array_equal(out, np.clip(u, 0.0, cfg.p_max))
        else:
            assert np.array_equal(out, VENT) and sup.venting


class _Hold:
    def reset(self):
        pass

    def step(self, state, ref, dt, p_max):
        raise AssertionError('not called here')


def test_set_reference_refuses_non_finite_poses_and_zeroes_bad_rates():
    step = ControlStep(_Hold())
    assert not step.set_reference([math.nan, 1.0], [0.0, 0.0], 1.0)
    assert not step.set_reference([1.0], [0.0, 0.0], 1.0)
    assert step.set_reference([1.0, 0.5, 9.0], [math.inf, -2.0], 2.0)
    assert list(step.q_ref) == [1.0, 0.5] and list(step.qd_ref) == [0.0, -2.0]
    assert step.set_reference([1.1, 0.6], [], 3.0) and list(step.qd_ref) == [0.0, 0.0]
    assert step.ref_stamp == 3.0
