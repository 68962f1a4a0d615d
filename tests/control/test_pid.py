"""PID pressure mapping: always 0–50 kPa, exact when feasible, impedance transfer vs FD."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from equimus_control.controller import Estimate, Reference
from equimus_control.pid import (
    PIDController,
    PIDGains,
    box_lsq,
    impedance_transfer,
    pressure_torque_matrix,
    pressures_for_torque,
)
from equimus_description.kinematics import actuation_jacobian, actuator_lengths
from equimus_description.statics import StaticParams, holding_pressures

P_SIM = StaticParams(pressure_sign=1.0)
angle = st.floats(0.6, 2.2)
knee = st.floats(0.1, 1.9)
big = st.floats(-1e3, 1e3, allow_nan=False)


def pid_step(pid, q, qd, q_ref, p_max=50.0):
    """One PID step through the Controller interface at 120 Hz, reference at rest."""
    return pid.step(
        Estimate(np.asarray(q, float), np.asarray(qd, float), 0.0),
        Reference(np.asarray(q_ref, float), np.zeros(2)),
        1 / 120,
        p_max,
    )


@settings(max_examples=300, deadline=None)
@given(
    angle,
    knee,
    angle,
    knee,
    big,
    big,
    st.floats(0, 50),
    st.floats(0, 50),
    st.sampled_from([1.0, -1.0]),
)
def test_pid_pressures_always_in_range(q1, q2, r1, r2, v1, v2, p1, p2, sign):
    from dataclasses import replace

    params = replace(P_SIM, pressure_sign=sign)
    pid = PIDController(params)
    for _ in range(3):
        out = pid_step(pid, [q1, q2], [v1, v2], [r1, r2])
        assert np.all(out.pressures >= 0) and np.all(out.pressures <= 50)
        assert np.all(np.isfinite(out.pressures))
    P, sat, err = pressures_for_torque([q1, q2], [v1 / 100, v2 / 100], [p1, p2], params)
    assert np.all((P >= 0) & (P <= 50))


@settings(max_examples=200, deadline=None)
@given(
    st.floats(-5, 5),
    st.floats(-5, 5),
    st.floats(-5, 5),
    st.floats(-5, 5),
    st.floats(-10, 10),
    st.floats(-10, 10),
)
def test_box_lsq_is_optimal(a, b, c, d, t1, t2):
    """No point of a fine grid over the box beats the active-set solution."""
    A = np.array([[a, b], [c, d]])
    t = np.array([t1, t2])
    lo, hi = np.zeros(2), np.full(2, 1.0)
    x, _ = box_lsq(A, t, lo, hi)
    g = np.linspace(0, 1, 41)
    X = np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)
    best = np.min(np.sum((X @ A.T - t) ** 2, axis=1))
    assert np.sum((A @ x - t) ** 2) <= best + 1e-9


def test_feasible_torque_is_delivered_exactly_and_saturation_reported():
    q = np.array([1.45, 0.55])
    p_ff = holding_pressures(q, P_SIM)
    A = pressure_torque_matrix(q, P_SIM)
    tau = A @ np.array([2.0, -1.0])
    P, sat, err = pressures_for_torque(q, tau, p_ff, P_SIM)
    assert np.allclose(err, 0, atol=1e-9) and not sat.any()
    P, sat, err = pressures_for_torque(q, A @ np.array([-100.0, 0.0]), p_ff, P_SIM)
    assert sat[0] and P[0] == 0.0 and np.linalg.norm(err) > 0.1


def test_anti_windup_keeps_integral_bounded_when_saturated():
    pid = PIDController(P_SIM)
    for _ in range(2000):  # unreachable target, 16 s
        out = pid_step(pid, [1.2, 1.2], [0, 0], [2.5, 0.0])
    assert out.saturated.any()
    # conditional integration: no wind-up at all while the valves cannot deliver
    assert np.all(np.abs(pid.integral) < 0.05 * np.array(pid.g.i_max)), pid.integral


def test_back_calculation_bleeds_a_wound_integral():
    runs = {}
    for k_aw in (0.0, 5.0):
        pid = PIDController(P_SIM, PIDGains(k_aw=k_aw))
        pid.integral = -np.array(pid.g.i_max)  # wound up the other way
        for _ in range(240):
            pid_step(pid, [1.2, 1.2], [0, 0], [2.5, 0.0])
        runs[k_aw] = np.abs(pid.integral).sum()
    assert runs[5.0] < runs[0.0] - 0.2, runs  # the joint that falls short bleeds to 0


def test_derivative_on_measurement_no_kick_on_reference_step():
    pid = PIDController(P_SIM)
    a = pid_step(pid, [1.2, 1.2], [0, 0], [1.2, 1.2])
    pid.reset()
    b = pid_step(pid, [1.2, 1.2], [0, 0], [1.25, 1.2])
    assert np.all(np.abs(b.pressures - a.pressures) < 20)


def test_impedance_transfer_matches_finite_differences():
    """K_Pm = −∂F/∂l at constant l̇, K_Dm = −∂F/∂l̇, F from the joint PD through J_A⁻ᵀ."""
    g = P_SIM.geometry
    kp, kd = np.array([3.0, 1.5]), np.array([0.2, 0.1])
    q_ref = np.array([1.3, 1.0])

    def F_of(q, ld):
        J = actuation_jacobian(q, g)
        qd = np.linalg.solve(J, ld)
        return impedance_transfer(q, qd, q_ref, kp, kd, P_SIM)[0]

    for q in (np.array([1.2, 1.2]), np.array([1.0, 1.6])):
        qd = np.array([0.4, -0.3])
        J = actuation_jacobian(q, g)
        ld = J @ qd
        F, KP, KD = impedance_transfer(q, qd, q_ref, kp, kd, P_SIM)
        h = 1e-6
        dF_dq = np.column_stack(
            [(F_of(q + h * e, ld) - F_of(q - h * e, ld)) / (2 * h) for e in np.eye(2)]
        )
        dl_dq = np.column_stack(
            [
                (actuator_lengths(q + h * e, g) - actuator_lengths(q - h * e, g)) / (2 * h)
                for e in np.eye(2)
            ]
        )
        KP_fd = -dF_dq @ np.linalg.inv(dl_dq)
        KD_fd = -np.column_stack(
            [(F_of(q, ld + h * e) - F_of(q, ld - h * e)) / (2 * h) for e in np.eye(2)]
        )
        assert np.allclose(KP, KP_fd, rtol=1e-5, atol=1e-3), (KP, KP_fd)
        assert np.allclose(KD, KD_fd, rtol=1e-5, atol=1e-5)
        # the ∂J_A/∂θ term matters: dropping it (as [20] did) is visibly wrong here
        Ji = np.linalg.inv(J)
        naive = P_SIM.pressure_sign * Ji.T @ np.diag(kp) @ Ji
        assert np.linalg.norm(naive - KP_fd) > 1e-2 * np.linalg.norm(KP_fd)


def test_pid_output_respects_a_lowered_p_max():
    pid = PIDController(P_SIM)
    out = pid_step(pid, [1.2, 1.2], [0, 0], [2.5, 0.0], p_max=10.0)
    assert np.all(out.pressures <= 10.0) and out.saturated.any()


def test_gains_are_validated():
    import pytest

    from equimus_description.config import ConfigError

    with pytest.raises(ConfigError, match='kp'):
        PIDGains(kp=(float('nan'), 1.0))
    with pytest.raises(ConfigError, match='ki'):
        PIDGains(ki=(1.0,))
