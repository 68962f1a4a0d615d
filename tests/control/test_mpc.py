"""MPC: pressure bounds and rate limits hold for any state; linearisation predicts MuJoCo."""
import mujoco
import numpy as np

from equimus_control.mpc import LinearMPC, MPCConfig, linearise
from equimus_description.statics import holding_pressures


def test_constraints_hold_for_random_states(leg_model, sim_params, mpc_grid):
    cfg = MPCConfig(grid_lo=(1.2, 0.3), grid_hi=(1.8, 1.0), du_max=4.0)
    mpc = LinearMPC(leg_model, sim_params, cfg, mpc_grid)
    rng = np.random.default_rng(0)
    u_prev = mpc.u_last.copy()
    sat_seen = False
    for k in range(300):
        q = rng.uniform([1.1, 0.2], [1.9, 1.1])
        qd = rng.normal(0, 1.0, 2)
        ref = rng.uniform([1.1, 0.2], [1.9, 1.1]) if k % 20 == 0 else ref
        u, sat, info = mpc.step(q, qd, ref)
        assert np.all(u >= 0) and np.all(u <= 50)
        assert np.all(np.abs(u - u_prev) <= cfg.du_max + 1e-9)
        sat_seen |= bool(sat.any())
        u_prev = u
    assert sat_seen


def test_linearisation_predicts_one_period_of_mujoco(leg_model, sim_params):
    q0 = np.array([1.45, 0.55])
    p0 = holding_pressures(q0, sim_params)
    A, B, c = linearise(leg_model, q0, p0, 1 / 120)
    assert np.all(np.abs(c) < 1e-3)                   # a true equilibrium: no drift
    d = mujoco.MjData(leg_model.model)
    dq, dv, dp = np.array([0.01, -0.01]), np.array([0.05, 0.1]), np.array([1.0, -0.5])
    leg_model.reset(d, q0 + dq, dv)
    leg_model.set_pressures(d, p0 + dp)
    for _ in range(10):
        mujoco.mj_step(leg_model.model, d)
    x = np.concatenate([leg_model.joint_angles(d) - q0, leg_model.joint_velocities(d)])
    pred = A @ np.concatenate([dq, dv]) + B @ dp
    assert np.allclose(x, pred, atol=2e-3 * 1 + 0.02 * np.abs(pred)), (x, pred)
