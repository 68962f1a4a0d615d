"""The PID's plain-float control law (PIDController.step) against its numpy form (step_numpy),
and the float statics against numpy's solve: the same commands, saturation flags, torque errors
and integral, cycle after cycle, over random states, references, gains and p_max."""

import random

import numpy as np

from equimus_control.controller import Estimate, Reference
from equimus_control.pid import PIDController, PIDGains, box_lsq
from equimus_description.kinematics import actuation_derivatives, actuation_lengths_jacobian
from equimus_description.statics import (
    StaticParams,
    gravity_generalized,
    holding_forces,
    holding_pressures,
)

TOL = 1e-9


def test_float_law_equals_numpy_law_over_many_cycles():
    params = StaticParams()
    r = random.Random(12)
    for trial in range(30):
        gains = PIDGains(
            kp=(r.uniform(0, 20), r.uniform(0, 20)),
            ki=(r.uniform(0, 40), r.uniform(0, 40)),
            kd=(r.uniform(0, 1), r.uniform(0, 1)),
            i_max=(r.uniform(0, 2), r.uniform(0, 2)),
            k_aw=r.uniform(0, 20),
        )
        fast, ref = PIDController(params, gains), PIDController(params, gains)
        p_max = r.choice([50.0, 30.0, 5.0])
        saturated = 0
        for _ in range(60):
            q = (r.uniform(0.9, 2.0), r.uniform(0.2, 1.6))
            state = Estimate(np.array(q), np.array([r.uniform(-3, 3), r.uniform(-3, 3)]), 0.0)
            target = Reference(
                np.array([r.uniform(0.9, 2.0), r.uniform(0.2, 1.6)]),
                np.array([r.uniform(-2, 2), r.uniform(-2, 2)]),
            )
            dt = r.choice([1 / 120, 1 / 60, 0.02])
            a = fast.step(state, target, dt, p_max)
            b = ref.step_numpy(state, target, dt, p_max)
            np.testing.assert_allclose(a.pressures, b.pressures, rtol=0, atol=TOL)
            assert list(a.saturated) == list(b.saturated)
            for key in ('torque_error', 'feedforward'):
                np.testing.assert_allclose(a.info[key], b.info[key], rtol=0, atol=TOL)
            np.testing.assert_allclose(fast.integral, ref.integral, rtol=0, atol=TOL)
            saturated += bool(np.any(b.saturated))
        # the box and the anti-windup paths were exercised, not only the free optimum
        assert trial < 5 or saturated > 0


def test_float_statics_equal_numpy():
    params = StaticParams()
    r = random.Random(3)
    for _ in range(300):
        q = np.array([r.uniform(0.9, 2.0), r.uniform(0.2, 1.6)])
        lengths, J, _ = actuation_derivatives(q, params.geometry)
        fl, j0, j1 = actuation_lengths_jacobian(q, params.geometry)
        np.testing.assert_allclose(fl, lengths, rtol=0, atol=1e-15)
        np.testing.assert_allclose([j0, j1], J, rtol=0, atol=1e-15)
        _, dU = gravity_generalized(q, params)
        ref = np.asarray(params.k) * (lengths - np.asarray(params.l0)) - np.linalg.solve(
            J.T, params.g * dU
        )
        np.testing.assert_allclose(holding_forces(q, params), ref, rtol=1e-12, atol=1e-9)
        ref_p = params.pressure_sign * ref / np.asarray(params.S) / 1e3
        np.testing.assert_allclose(holding_pressures(q, params), ref_p, rtol=1e-12, atol=1e-12)


def test_box_lsq_keeps_its_array_interface():
    x, sat = box_lsq(np.eye(2), np.array([2.0, -1.0]), np.zeros(2), np.ones(2))
    assert isinstance(x, np.ndarray) and isinstance(sat, np.ndarray) and sat.dtype == bool
    assert list(x) == [1.0, 0.0] and list(sat) == [True, True]
