"""Closed loop with the real MuJoCo leg (valve lag, noisy virtual mocap), plain Python:
PID and MPC must track the triangle and a step set better than open-loop static feedforward."""

import numpy as np
import pytest

from equimus_control.closed_loop import run
from equimus_control.mpc import LinearMPC, MPCConfig
from equimus_control.pid import PIDController, StaticFeedforward
from equimus_control.reference import Waypoints
from equimus_description.statics import holding_pressures

STEPS = [[1.4, 0.8], [1.6, 0.5], [1.45, 0.55]]


@pytest.mark.parametrize('kind', ['triangle', 'steps'])
def test_pid_and_mpc_beat_open_loop(kind, triangle, sim_params, leg_model, mpc_grid, make_sim):
    poses = triangle if kind == 'triangle' else np.array(STEPS)
    ref = Waypoints(poses, move=0.5 if kind == 'triangle' else 0.3, hold=1.5)
    p0 = np.clip(holding_pressures(poses[0], sim_params), 0, 50)
    res = {}
    for name in ('open', 'pid', 'mpc'):
        sim, mocap = make_sim(poses[0], p0, position_noise=0.0003, orientation_noise=0.002, seed=2)
        if name == 'open':
            c = StaticFeedforward(sim_params)
        elif name == 'pid':
            c = PIDController(sim_params)
        else:
            c = LinearMPC(
                leg_model, sim_params, MPCConfig(grid_lo=(1.2, 0.3), grid_hi=(1.8, 1.0)), mpc_grid
            )
            c.reset(p_valve=p0)
        r = run(sim, mocap, c, ref, 6.0)
        assert np.all((r.u >= 0) & (r.u <= 50))
        assert not r.vented[1:].any()  # the guards never tripped
        assert sim.resets == 0
        res[name] = r.rmse(skip=0.5)
    total = {k: float(np.sum(v)) for k, v in res.items()}
    assert total['pid'] < 0.95 * total['open'], res
    assert total['mpc'] < 0.9 * total['open'], res
    assert np.all(res['mpc'] < 0.13), res


def test_the_valves_get_what_the_actuation_stage_makes_of_each_command(
    triangle, sim_params, make_sim
):
    """`actuation` stands between the ControlStep and the valves (the sim graph's valve driver in
    the benchmark): here one that holds the MAA vented, so its pressure decays to 0 whatever PID
    asks, while the BAA follows the commands."""
    sim, mocap = make_sim(triangle[0], np.clip(holding_pressures(triangle[0], sim_params), 0, 50))
    seen = []

    def hold_maa_vented(u, t):
        seen.append((t, list(u)))
        return [0.0, float(u[1])]

    r = run(
        sim,
        mocap,
        PIDController(sim_params),
        Waypoints(triangle, 0.5, 1.5),
        2.0,
        actuation=hold_maa_vented,
    )
    assert len(seen) == len(r.t) and r.u[:, 0].max() > 1.0  # PID kept asking for MAA pressure
    assert sim.pressures[0] < 0.01 * r.u[:, 0].max()
    assert sim.pressures[1] == pytest.approx(r.u[-2, 1], abs=5.0)


def test_a_delayed_actuation_hands_on_each_command_that_many_frames_late():
    from equimus_control.closed_loop import delayed

    seen: list[float] = []

    def valves(u, t):
        seen.append(t)
        return [2.0 * u[0], 2.0 * u[1]]

    late = delayed(valves, 2, [5.0, 6.0])
    out = [late([float(k), 0.0], k / 120) for k in range(4)]
    assert out == [[5.0, 6.0], [5.0, 6.0], [0.0, 0.0], [2.0, 0.0]]
    assert seen == [k / 120 for k in range(4)]  # the driver itself still runs every frame
    assert delayed(valves, 0, [0.0, 0.0]) is valves
