"""LegSimulator on the real MuJoCo model: valve lag, physical sanity check, instability recovery,
statics."""

import csv
import math

import numpy as np
import pytest

from equimus_description.leg import load_leg
from equimus_description.valve import ValveLag
from equimus_sim.simulator import LegSimulator, make_simulator, physical_problem

TAU = load_leg().valve_time_constant

FRAME = 1.0 / 120.0


@pytest.fixture(scope='module')
def sim_factory():
    cache = {}

    def make(**kw):
        key = tuple(sorted(kw.items()))
        if key not in cache:
            cache[key] = make_simulator(**kw)
        s = cache[key]
        s.reset('test set-up')
        s.resets = 0
        s.rejected = 0
        return s

    return make


def test_valve_recursion_is_the_exact_first_order_response():
    v = ValveLag(TAU, 2, p0=[5.0, 40.0])
    dt = 1 / 600
    for _ in range(300):
        v.step([30.0, 0.0], dt)
    assert np.allclose(
        v.p, ValveLag.closed_form([5.0, 40.0], [30.0, 0.0], 300 * dt, TAU), atol=1e-9
    )


def test_simulated_valve_pressure_follows_closed_form(sim_factory):
    sim = sim_factory(timestep=1 / 600)
    p0 = sim.pressures
    t0 = sim.time
    sim.set_command([30.0, 12.5])
    for k in range(1, 61):
        sim.advance(FRAME)
        expected = ValveLag.closed_form(p0, [30.0, 12.5], sim.time - t0, sim.valve.tau)
        assert np.allclose(sim.pressures, expected, atol=1e-9), k
    assert sim.valve.tau == TAU
    # after 0.5 s (2.3 τ) the valve is at 1 − e^(−0.5/τ) ≈ 90 % of the step
    assert sim.pressures[0] == pytest.approx(30.0 * (1 - math.exp(-0.5 / TAU)), rel=1e-9)


@pytest.mark.parametrize(
    'cmd,words',
    [
        ([math.nan, 10.0], 'not finite'),
        ([20.0, math.inf], 'not finite'),
        ([-3.0, 5.0], 'outside'),
        ([10.0, 75.0], 'outside'),
        ([10.0], 'expected 2'),
        ([1.0, 2.0, 3.0], 'expected 2'),
        (['a', 'b'], 'not numbers'),
    ],
)
def test_pressures_no_valve_can_produce_are_named(cmd, words):
    assert words in physical_problem(cmd)


def test_pressures_within_the_valve_range_pass():
    assert physical_problem([0.0, 50.0]) is None


def test_impossible_pressures_leave_the_valves_at_their_setpoint(sim_factory):
    """A sanity check, not the safety layer: no clamping or venting here (the driver does it)."""
    sim = sim_factory(timestep=1 / 600)
    assert sim.set_command([20.0, 10.0]) is None
    for cmd in ([math.nan, 80.0], [-10.0, math.inf], [1e9, -1e9]):
        assert sim.set_command(cmd)
        assert np.array_equal(sim.command, [20.0, 10.0])
        sim.advance(FRAME)
        assert np.all(np.isfinite(sim.pressures)) and np.all(sim.pressures <= 20.0)
    assert sim.rejected == 3 and 'kPa' in sim.last_reject_reason
    assert np.all(np.isfinite(sim.joint_state()[0]))


def test_without_a_valve_the_pressures_act_at_once(sim_factory):
    """valve=None (the rig emulator: the board emulator's valve is the valve)."""
    lagged = sim_factory(timestep=1 / 600)
    sim = LegSimulator(lagged.leg, valve=None)
    assert sim.valve is None
    sim.set_command([30.0, 12.5])
    sim.advance(FRAME)
    assert np.array_equal(sim.pressures, [30.0, 12.5])


@pytest.mark.parametrize('field', ['qvel', 'qpos'])
def test_nan_state_resets_and_reports_without_raising(sim_factory, field):
    sim = sim_factory(timestep=1 / 600)
    sim.set_command([20.0, 20.0])
    for _ in range(30):
        sim.advance(FRAME)
    t_before = sim.time
    getattr(sim.data, field)[:] = np.nan
    sim.advance(FRAME)
    assert sim.resets == 1
    assert 'reset to the initial pose' in sim.last_reset_reason
    theta, dtheta = sim.joint_state()
    assert np.allclose(theta, sim.initial_q, atol=1e-6) and np.allclose(dtheta, 0.0)
    assert np.allclose(sim.pressures, sim.initial_pressures)
    assert sim.time == pytest.approx(t_before + FRAME)  # time stays monotonic over a reset
    sim.advance(FRAME)
    assert sim.resets == 1 and np.all(np.isfinite(sim.data.qpos))


def test_mujoco_bad_state_warning_resets_but_other_warnings_do_not(sim_factory):
    """The stability check reads MuJoCo's warning counters: a harmless warning (here a full
    contact buffer) changes them without a reset, and a bad-state warning after it still trips."""
    import mujoco

    sim = sim_factory(timestep=1 / 600)
    sim.set_command([20.0, 20.0])
    sim.advance(FRAME)
    sim.data.warning[mujoco.mjtWarning.mjWARN_CONTACTFULL].number += 1
    sim.advance(FRAME)
    assert sim.resets == 0
    sim.data.qvel[:] = np.nan  # mj_step flags BADQVEL and auto-resets its own state
    sim.advance(FRAME)
    assert sim.resets == 1
    assert 'MuJoCo reported an unstable state (mjWARN_BADQVEL' in sim.last_reset_reason
    sim.advance(FRAME)
    assert sim.resets == 1


def test_runaway_velocity_is_detected(sim_factory):
    sim = sim_factory(timestep=1 / 600)
    sim.data.qvel[:] = 1e6
    sim.advance(FRAME)
    assert sim.resets == 1
    assert np.all(np.isfinite(sim.data.qvel)) and np.max(np.abs(sim.data.qvel)) < 1.0


def test_step_counts_track_nominal_time(sim_factory):
    exact = sim_factory(timestep=1 / 600)
    steps0 = exact.steps
    assert [exact.advance(FRAME) for _ in range(12)] == [5] * 12
    assert exact.steps - steps0 == 60
    odd = sim_factory(timestep=0.001)
    counts = [odd.advance(FRAME) for _ in range(24)]
    assert set(counts) == {8, 9} and sum(counts) == 200
    assert abs(odd.steps * odd.dt - odd.time) <= odd.dt / 2 + 1e-12


def test_body_arrays_match_leg_model_body_pose(sim_factory):
    sim = sim_factory(timestep=1 / 600)
    sim.set_command([35.0, 5.0])
    for _ in range(40):
        sim.advance(FRAME)
    P, Q = sim.body_arrays(('base', 'thigh', 'calf'))
    for i, name in enumerate(('base', 'thigh', 'calf')):
        pos, quat = sim.leg.body_pose(sim.data, name)
        assert np.allclose(P[i], pos) and np.allclose(Q[i], quat)
    # poses belong to the same instant as the joint state (not one physics step behind)
    theta = sim.joint_state()[0]
    knee_planar = 0.25 * np.array([math.cos(theta[0]), math.sin(theta[0])])
    knee_world = np.array([0.0, knee_planar[0], -knee_planar[1]])  # planar x = +y_w, y = −z_w
    assert np.allclose(P[2] - P[1], knee_world, atol=1e-9)


def test_unpressurised_leg_hangs_near_the_measured_static_point(sim_factory, shared_dir):
    """0 kPa: the real leg rests at about (73°, 61°). Loose check (no fitting here)."""
    with open(shared_dir / 'data/equimus/physical/static/StaticPoint_all_36.csv') as f:
        rows = [
            r for r in csv.DictReader(f) if float(r['P1 (kPa)']) == 0 and float(r['P2 (kPa)']) == 0
        ]
    measured = np.array([float(rows[0]['theta1 (deg)']), float(rows[0]['theta2 (deg)'])])
    sim = sim_factory(timestep=1 / 600)
    assert np.allclose(sim.initial_pressures, 0.0)
    for _ in range(240):  # 2 s at 0 kPa from the equilibrium: it must stay there
        sim.advance(FRAME)
    theta = np.degrees(sim.joint_state()[0])
    err = theta - measured
    print(
        f'0 kPa static point: sim {theta.round(2)} deg, measured {measured.round(2)} deg, '
        f'error {err.round(2)} deg'
    )
    assert np.allclose(theta, np.degrees(sim.initial_q), atol=0.05)
    assert np.all(np.abs(err) < 6.0), f'0 kPa equilibrium off by {err} deg'


def test_invalid_construction_is_refused(sim_factory):
    sim = sim_factory(timestep=1 / 600)
    with pytest.raises(ValueError, match='initial pressures'):
        LegSimulator(sim.leg, valve=0.2, initial_pressures=[math.nan, 0.0])
    with pytest.raises(ValueError, match='time constant'):
        LegSimulator(sim.leg, valve=0.0)
    with pytest.raises(ValueError, match='duration'):
        sim.advance(math.nan)
