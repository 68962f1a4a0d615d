"""Linear MPC: pressure bounds and rate limit hold for any state, the warm start pays, a QP the
solver cannot solve gives a safe command and says so, and the linearisation predicts MuJoCo."""

import mujoco
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from equimus_control.controller import Estimate, Reference
from equimus_control.mpc import LinearMPC, MPCConfig, linearise
from equimus_description.statics import holding_pressures

PERIOD = 1 / 120
GRID = dict(grid_lo=(1.2, 0.3), grid_hi=(1.8, 1.0))


def mpc_step(mpc, q, qd, q_ref, p_max=50.0):
    return mpc.step(
        Estimate(np.asarray(q, float), np.asarray(qd, float), 0.0),
        Reference(np.asarray(q_ref, float), np.zeros(2)),
        PERIOD,
        p_max,
    )


@pytest.fixture(scope='module')
def mpc(leg_model, sim_params, mpc_grid):
    return LinearMPC(leg_model, sim_params, MPCConfig(du_max=4.0, **GRID), mpc_grid)


pose = st.tuples(st.floats(0.9, 2.1), st.floats(0.0, 1.3))
rate = st.tuples(st.floats(-3.0, 3.0), st.floats(-3.0, 3.0))
kpa = st.tuples(st.floats(0.0, 50.0), st.floats(0.0, 50.0))


@settings(max_examples=150, deadline=None)
@given(q=pose, qd=rate, ref=pose, u_last=kpa, p_valve=kpa, p_max=st.floats(5.0, 50.0))
def test_constraints_hold_for_random_states(mpc, q, qd, ref, u_last, p_max, p_valve):
    mpc.u_last, mpc.p_valve = np.array(u_last), np.array(p_valve)
    out = mpc_step(mpc, q, qd, ref, p_max)
    u = out.pressures
    assert np.all(np.isfinite(u)) and np.all(u >= 0) and np.all(u <= p_max), (u, p_max)
    if np.all(np.array(u_last) <= p_max):  # the rate limit can hold: it does
        assert np.all(np.abs(u - np.array(u_last)) <= mpc.cfg.du_max + 1e-9), (u, u_last)
    assert np.array_equal(out.saturated, (u <= 1e-6) | (u >= p_max - 1e-6))


def test_saturation_is_reported_on_a_closed_loop_of_random_targets(mpc):
    rng = np.random.default_rng(0)
    mpc.reset()
    sat_seen = False
    ref = np.array([1.5, 0.6])
    for k in range(200):
        if k % 20 == 0:
            ref = rng.uniform([1.1, 0.2], [1.9, 1.1])
        out = mpc_step(mpc, rng.uniform([1.1, 0.2], [1.9, 1.1]), rng.normal(0, 1.0, 2), ref)
        sat_seen |= bool(out.saturated.any())
    assert sat_seen


def test_warm_start_gives_the_same_answer_in_fewer_iterations(leg_model, sim_params, mpc_grid):
    """The same QP solved cold (fresh solver) and warm (the solver just solved it): the same
    command, and the warm solve needs fewer iterations."""
    mpc = LinearMPC(leg_model, sim_params, MPCConfig(max_iter=20000, **GRID), mpc_grid)
    q, qd, ref = [1.45, 0.55], [0.3, -0.2], [1.6, 0.5]
    p0 = holding_pressures(np.array(q), sim_params)
    mpc.reset(p_valve=p0)
    before = (mpc.u_last.copy(), mpc.p_valve.copy())
    cold = mpc_step(mpc, q, qd, ref)
    mpc.u_last, mpc.p_valve = before[0].copy(), before[1].copy()
    warm = mpc_step(mpc, q, qd, ref)
    assert cold.info['status'] == 'solved' and warm.info['status'] == 'solved'
    assert warm.info['iters'] < cold.info['iters'], (warm.info, cold.info)
    np.testing.assert_allclose(warm.pressures, cold.pressures, atol=0.05)


def test_an_infeasible_qp_gives_a_safe_reported_command(leg_model, sim_params, mpc_grid):
    """p_max lowered below the last command minus the rate limit: no input satisfies both the
    bounds and the rate limit. The command stays within [0, p_max] and the failure is reported."""
    mpc = LinearMPC(leg_model, sim_params, MPCConfig(du_max=2.0, **GRID), mpc_grid)
    mpc.reset(p_valve=np.array([40.0, 40.0]))
    out = mpc_step(mpc, [1.45, 0.55], [0.0, 0.0], [1.6, 0.5], p_max=10.0)
    assert out.info['qp_failed'] and 'infeasible' in out.info['status'], out.info
    assert np.all(out.pressures >= 0) and np.all(out.pressures <= 10.0), out.pressures
    assert mpc.failures == 1
    ok = mpc_step(mpc, [1.45, 0.55], [0.0, 0.0], [1.6, 0.5], p_max=10.0)  # feasible again
    assert not ok.info['qp_failed'] and np.all(ok.pressures <= 10.0)


def test_linearisation_predicts_one_period_of_mujoco(leg_model, sim_params):
    q0 = np.array([1.45, 0.55])
    p0 = holding_pressures(q0, sim_params)
    A, B, c = linearise(leg_model, q0, p0, PERIOD)
    assert np.all(np.abs(c) < 1e-3)  # a true equilibrium: no drift
    d = mujoco.MjData(leg_model.model)
    dq, dv, dp = np.array([0.01, -0.01]), np.array([0.05, 0.1]), np.array([1.0, -0.5])
    leg_model.reset(d, q0 + dq, dv)
    leg_model.set_pressures(d, p0 + dp)
    for _ in range(10):
        mujoco.mj_step(leg_model.model, d)
    x = np.concatenate([leg_model.joint_angles(d) - q0, leg_model.joint_velocities(d)])
    pred = A @ np.concatenate([dq, dv]) + B @ dp
    assert np.allclose(x, pred, atol=2e-3 * 1 + 0.02 * np.abs(pred)), (x, pred)
