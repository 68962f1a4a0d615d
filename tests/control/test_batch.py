"""The PID law on arrays (equimus_control.batch) is PIDController's, leg by leg and cycle by
cycle, including the saturated cases and the anti-windup."""

import numpy as np

from equimus_control.batch import BatchPID, box_lsq, holding_pressures, pressure_torque
from equimus_control.controller import Estimate, Reference
from equimus_control.pid import PIDController, PIDGains, box_lsq_floats, pressure_torque_matrix
from equimus_description.leg import load_leg
from equimus_description.statics import StaticParams
from equimus_description.statics import holding_pressures as holding_one

PARAMS = StaticParams.from_leg(load_leg())


def test_statics_and_box_least_squares_match_the_scalar_ones():
    rng = np.random.default_rng(0)
    q = rng.uniform([0.7, 0.0], [2.4, 1.9], (300, 2))
    H = holding_pressures(q, PARAMS)
    A = pressure_torque(q, PARAMS)
    for i in range(len(q)):
        assert np.allclose(H[i], holding_one(q[i], PARAMS), rtol=1e-12, atol=1e-12)
        assert np.allclose(A[i], pressure_torque_matrix(q[i], PARAMS), rtol=1e-12, atol=1e-15)
    # targets inside and far outside the box: every active set occurs
    b = rng.normal(0.0, 2.0, (300, 2))
    lo, hi = np.zeros((300, 2)), np.full((300, 2), 50.0)
    x, sat = box_lsq(A, b, lo, hi)
    kinds = set()
    for i in range(len(q)):
        xs, ss = box_lsq_floats(A[i].tolist(), b[i].tolist(), (0.0, 0.0), (50.0, 50.0))
        assert np.allclose(x[i], xs, atol=1e-9) and list(sat[i]) == ss, (i, x[i], xs)
        kinds.add(tuple(ss))
    assert kinds == {(False, False), (True, False), (False, True), (True, True)}


def test_batch_pid_is_the_pid_cycle_by_cycle():
    gains = PIDGains(kp=(5.3, 20.0), ki=(3.6, 2.1), kd=(0.16, 0.027), i_max=(0.05, 0.03))
    n = 40
    batch = PIDController(PARAMS, gains), BatchPID(PARAMS, gains, n)
    one = [PIDController(PARAMS, gains) for _ in range(n)]
    rng = np.random.default_rng(1)
    q = rng.uniform([1.1, 0.2], [1.8, 1.1], (n, 2))
    q_ref = q + rng.normal(0.0, 0.15, (n, 2))
    worst, saturated = 0.0, 0
    for _ in range(60):  # a long enough run for the integrals to saturate and bleed
        qd = rng.normal(0.0, 1.0, (n, 2))
        qd_ref = rng.normal(0.0, 0.5, (n, 2))
        dt = rng.uniform(0.006, 0.011, n)
        P, sat = batch[1].step(q, qd, q_ref, qd_ref, dt, 45.0)
        for i, c in enumerate(one):
            out = c.step(Estimate(q[i], qd[i], 0.0), Reference(q_ref[i], qd_ref[i]), dt[i], 45.0)
            worst = max(
                worst,
                float(np.abs(out.pressures - P[i]).max()),
                float(np.abs(c.integral - batch[1].integral[i]).max()),
            )
            assert list(out.saturated) == list(sat[i])
        saturated += int(sat.any(axis=1).sum())
        q = q + rng.normal(0.0, 0.01, (n, 2))
    assert worst < 1e-9, worst
    assert saturated > 100  # the saturated branch was exercised
    i_max = np.asarray(gains.i_max)
    assert np.any(np.isclose(np.abs(batch[1].integral), i_max))  # and the clamp
    batch[1].reset(np.array([0, 3]))
    assert not batch[1].integral[[0, 3]].any() and batch[1].integral[1].any()
