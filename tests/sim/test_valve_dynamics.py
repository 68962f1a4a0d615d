"""The valve lag as MuJoCo actuator dynamics agrees with the exact zero-order-hold ValveLag.

The sim node's default (valve_model: mujoco) integrates the valves inside MuJoCo (`filterexact`
with `actearly`) and steps a whole frame in one mj_step call; the Python loop (valve_model:
python) steps equimus_description.valve.ValveLag once per physics step. Both discretise
τ·ṗ = u − p exactly for a held setpoint, so over a run of random setpoint steps they must agree
to rounding: pressures within 1e-9 kPa, joint angles within 1e-9 rad (measured: 4e-14 kPa and
1e-15 rad over 10 s).
"""

import numpy as np
import pytest

from equimus_description.valve import ValveLag
from equimus_sim.simulator import make_simulator

FRAME = 1 / 120
P_TOL_KPA = 1e-9
Q_TOL_RAD = 1e-9


@pytest.mark.parametrize('variant', ['equimus', 'pure'])
def test_mujoco_valves_match_the_exact_lag(variant):
    py = make_simulator(variant=variant, timestep=1 / 600, valve='python')
    mj = make_simulator(variant=variant, timestep=1 / 600, valve='mujoco')
    assert isinstance(py.valve, ValveLag) and mj.valve is not None
    assert mj.valve.tau == py.valve.tau
    rng = np.random.default_rng(7)
    worst_p = worst_q = 0.0
    moved = 0.0
    for k in range(1200):
        if k % 25 == 0:  # a new setpoint every 25 frames, mid-transient of the last one
            u = rng.uniform(0.0, 50.0, 2)
            assert py.set_command(u) is None and mj.set_command(u) is None
        py.advance_to((k + 1) * FRAME)
        mj.advance_to((k + 1) * FRAME)
        worst_p = max(worst_p, float(np.abs(py.pressures - mj.pressures).max()))
        worst_q = max(worst_q, float(np.abs(py.joint_state()[0] - mj.joint_state()[0]).max()))
        moved = max(moved, float(np.abs(mj.joint_state()[0] - mj.initial_q).max()))
    print(f'{variant}: |Δp| <= {worst_p:.2e} kPa, |Δθ| <= {worst_q:.2e} rad')
    assert worst_p < P_TOL_KPA and worst_q < Q_TOL_RAD
    assert moved > 0.05 and py.resets == mj.resets == 0  # the leg did move


def test_mujoco_valves_follow_the_closed_form():
    """A held step: the pressures are the exact first-order response at every frame."""
    sim = make_simulator(timestep=1 / 600)
    p0, u = sim.pressures, np.array([30.0, 12.5])
    sim.set_command(u)
    for k in range(1, 61):
        sim.advance_to(k * FRAME)
        expected = ValveLag.closed_form(p0, u, k * FRAME, sim.valve.tau)
        assert np.allclose(sim.pressures, expected, rtol=0, atol=1e-9)


def test_a_reset_sets_the_valve_state():
    sim = make_simulator(timestep=1 / 600)
    sim.set_command([40.0, 40.0])
    sim.advance_to(0.5)
    q = sim.equilibrium([10.0, 20.0])
    sim.place(q, [10.0, 20.0])
    assert np.allclose(sim.pressures, [10.0, 20.0]) and np.allclose(sim.command, [10.0, 20.0])
    sim.advance_to(sim.time + 0.5)  # at rest at its own equilibrium: stays there
    assert np.allclose(sim.joint_state()[0], q, atol=2e-3)
    assert np.allclose(sim.pressures, [10.0, 20.0])


GENERAL = {
    'valve.dead_time': 0.0437,  # not a whole number of 1/600 s steps
    'valve.fill_time_constant': 0.31,
    'valve.vent_time_constant': 0.09,
}

# and the regulator: the BAA's muscle has slack, both valves integrate
REGULATED = {
    **GENERAL,
    'valve.slack.baa': 8.0,
    'valve.integral_gain.maa': 1.5,
    'valve.integral_gain.baa': 0.8,
    'valve.integral_leak.maa': 1.0,
}


@pytest.mark.parametrize('overrides', [GENERAL, REGULATED], ids=['chamber', 'regulator'])
@pytest.mark.parametrize('variant', ['equimus', 'pure'])
def test_a_valve_with_dead_time_and_fill_vent_constants_is_the_description_model(
    variant, overrides
):
    """Both valve paths step the description's valve model (valve.follow on the same commands
    gives the same pressures) and move the leg the same way; the dead time really delays."""
    from equimus_description.valve import follow

    py = make_simulator(variant=variant, timestep=1 / 600, valve='python', overrides=overrides)
    mj = make_simulator(variant=variant, timestep=1 / 600, valve='mujoco', overrides=overrides)
    assert not py.valve_params.is_lag and py.valve_params == mj.valve_params
    assert py.valve_params.has_regulator == (overrides is REGULATED)
    rng = np.random.default_rng(3)
    steps, p_py, worst_q = [], [], 0.0
    for k in range(600):
        if k % 20 == 0:
            u = rng.uniform(0.0, 50.0, 2)
            py.set_command(u)
            mj.set_command(u)
        steps.append(np.repeat(py.command[None], 5, axis=0))
        py.advance_to((k + 1) * FRAME)
        mj.advance_to((k + 1) * FRAME)
        p_py.append(py.pressures)
        assert np.allclose(py.pressures, mj.pressures, rtol=0, atol=1e-9)
        worst_q = max(worst_q, float(np.abs(py.joint_state()[0] - mj.joint_state()[0]).max()))
    assert worst_q < 1e-6
    want, _ = follow(py.valve_params, np.concatenate(steps), py.initial_pressures, 1 / 600)
    assert np.allclose(np.array(p_py), want[4::5], rtol=0, atol=1e-9)
    # the first command reaches the chamber only after the dead time
    first = want[:, 0]
    onset = np.argmax(np.abs(first - py.initial_pressures[0]) > 0) / 600
    assert onset == pytest.approx(GENERAL['valve.dead_time'], abs=1 / 600)
    assert py.resets == mj.resets == 0
