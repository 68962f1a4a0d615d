"""Predictive sampling: its rollouts are the MuJoCo model under the valve lag, its commands respect
the pressure bounds and rate limit for any state, and in closed loop with the simulated leg it
tracks a step set better than PID."""

import math

import mujoco
import numpy as np
import pytest

from equimus_control.closed_loop import run
from equimus_control.controller import Estimate, Reference
from equimus_control.pid import PIDController
from equimus_control.reference import Waypoints
from equimus_control.sampling import PredictiveSampling, SamplingConfig
from equimus_description.statics import holding_pressures

PERIOD = 1 / 120


@pytest.fixture(scope='module')
def plan_model(leg):
    from equimus_sim.leg_model import LegModel

    return LegModel(leg.with_timestep(PERIOD))


@pytest.fixture
def planner(plan_model, sim_params, leg):
    ps = PredictiveSampling(
        plan_model, sim_params, SamplingConfig(valve_tau=leg.valve_time_constant)
    )
    yield ps
    ps.close()


def test_rollouts_are_the_model_stepped_under_the_valve_lag(planner, plan_model, leg):
    q, qd, p_valve = np.array([1.45, 0.6]), np.array([0.4, -0.3]), np.array([12.0, 5.0])
    planner.reset(p_valve=p_valve)
    commands = np.zeros((planner.cfg.samples, planner.steps, 2))
    commands[:, :, 0] = np.linspace(0, 40, planner.cfg.samples)[:, None]
    commands[:, planner.steps // 2 :, 1] = 30.0
    states = planner._rollout(q, qd, commands).copy()
    m = plan_model.model
    d = mujoco.MjData(m)
    a = math.exp(-PERIOD / leg.valve_time_constant)
    for s in (0, planner.cfg.samples - 1):
        plan_model.reset(d, q, qd)
        p = p_valve.copy()
        for k in range(planner.steps):
            p = a * p + (1 - a) * commands[s, k]
            plan_model.set_pressures(d, p)
            mujoco.mj_step(m, d)
            assert np.allclose(states[s, k, planner._qcols], plan_model.joint_angles(d), atol=1e-9)
    # different plans really lead to different motions
    assert np.ptp(states[:, -1, planner._qcols[0]]) > 0.05


def test_commands_respect_bounds_and_rate_limit(plan_model, sim_params, leg):
    cfg = SamplingConfig(valve_tau=leg.valve_time_constant, du_max=4.0, samples=6, horizon=0.1)
    ps = PredictiveSampling(plan_model, sim_params, cfg)
    rng = np.random.default_rng(0)
    u_prev = ps.u_last.copy()
    sat_seen = False
    ref = np.array([1.5, 0.6])
    try:
        for k in range(150):
            q = rng.uniform([1.1, 0.2], [1.9, 1.1])
            qd = rng.normal(0, 1.0, 2)
            ref = rng.uniform([1.1, 0.2], [1.9, 1.1]) if k % 20 == 0 else ref
            out = ps.step(Estimate(q, qd, 0.0), Reference(ref, np.zeros(2)), PERIOD, 50.0)
            u, sat, info = out.pressures, out.saturated, out.info
            assert np.all(u >= 0) and np.all(u <= 50), u
            assert np.all(np.abs(u - u_prev) <= cfg.du_max + 1e-9)
            assert math.isfinite(info['cost'])
            sat_seen |= bool(sat.any())
            u_prev = u
    finally:
        ps.close()
    assert sat_seen


def test_the_planning_model_must_step_at_the_control_period(leg_model, sim_params):
    with pytest.raises(ValueError, match='control period'):
        PredictiveSampling(leg_model, sim_params)  # leg_model steps at 1/1200 s


def test_tracks_steps_better_than_pid(planner, sim_params, make_sim):
    poses = np.array([[1.4, 0.8], [1.6, 0.5], [1.45, 0.55]])
    ref = Waypoints(poses, move=0.3, hold=1.5)
    p0 = np.clip(holding_pressures(poses[0], sim_params), 0, 50)
    total = {}
    for name in ('pid', 'sampling'):
        sim, mocap = make_sim(poses[0], p0, position_noise=0.0003, orientation_noise=0.002, seed=2)
        if name == 'pid':
            c = PIDController(sim_params)
        else:
            c = planner
            c.reset(p_valve=p0)
        r = run(sim, mocap, c, ref, 6.0)
        assert np.all((r.u >= 0) & (r.u <= 50))
        assert sim.resets == 0
        total[name] = float(np.sum(r.rmse(skip=0.5)))
    assert total['sampling'] < 0.9 * total['pid'], total
