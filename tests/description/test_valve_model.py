"""The one valve/chamber model (equimus_description.valve): at neutral parameters (no dead time,
filling as fast as venting) every consumer computes exactly what it computed before the model had
a dead time and separate fill and vent constants; otherwise its three solvers agree with each
other and with the closed form."""

import math
import sys

import numpy as np
import pytest

from equimus_description.valve import (
    MIN_REGULATED_KPA,
    Valve,
    ValveMemory,
    ValveParams,
    follow,
    hold,
    hold_steps,
)

sys.path.insert(0, str(__import__('pathlib').Path(__file__).parent))
import valve_reference  # noqa: E402

# the board emulator's old dead-time queue switched at board ticks; the model now switches at
# the exact time, so only its neutral half (the first 300 samples) is compared. The vector
# environment's observations changed after the reference was written (per-environment seeds,
# the policy's feature blocks), so its rewards and valve pressures (columns 36 on) are compared.
COMPARED = {'board_valve': np.s_[0:300], 'vector_env': np.s_[:, 36:]}
#: Consumers whose arithmetic is NumPy's scalar and elementwise code only: bit-identical on any
#: x86-64 host. The others step MuJoCo (and the MPC's OSQP) and are bit-identical on the host
#: that wrote the reference; on another CPU the same code rounds differently: at 44cbe95, whose CI
#: passed this test bit for bit, an AMD EPYC host with AVX-512 differed by up to 6.4e-11
#: (relative) on the simulators from the first frame and 2.3e-8 on the controllers' commands (the
#: QP solver's tolerance amplifies it). A valve only slightly off neutral differs by orders of
#: magnitude more (test_the_tolerance_sees_a_valve_just_off_neutral).
EXACT_EVERYWHERE = ('lag_steps', 'board_valve')
OTHER_HOST_RTOL = 1e-7


#: The hinges' stops when the reference was written: MuJoCo's default impedance. The stops
#: now ramp their force in (sim.limit_solimp in the description); rollouts that reach a stop
#: changed with them, so the consumers are compared on a description with the old stops.
REFERENCE_LIMIT_SOLIMP = [0.9, 0.95, 0.001, 0.5, 2.0]


@pytest.fixture(autouse=True)
def reference_stops(monkeypatch, tmp_path):
    """The default leg as the reference knew it: its description with the old stops."""
    import yaml

    from equimus_description import leg

    raw = yaml.safe_load(leg.default_leg_path().read_text())
    raw['sim']['limit_solimp'] = REFERENCE_LIMIT_SOLIMP
    path = tmp_path / 'leg.yaml'
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    monkeypatch.setattr(leg, 'default_leg_path', lambda: path)


@pytest.fixture(scope='module')
def reference():
    if not valve_reference.REFERENCE.exists():
        pytest.fail(f'{valve_reference.REFERENCE} missing: see valve_reference.py')
    ref = dict(np.load(valve_reference.REFERENCE))
    have = valve_reference.versions()
    for key, value in have.items():
        if str(ref[key]) != str(value):
            pytest.skip(
                f'{key} {value} differs from the reference file ({ref[key]}): regenerate it with '
                'valve_reference.py --write at commit 0a86558'
            )
    return ref


def test_neutral_valve_leaves_every_consumer_bit_identical(reference):
    got = valve_reference.compute()
    for name, value in got.items():
        sl = COMPARED.get(name, np.s_[:])
        want = reference[name][sl]
        assert value[sl].shape == want.shape, name
        if np.array_equal(value[sl], want):
            continue
        most = np.nanmax(np.abs(value[sl] - want))
        diff = f'{name}: differs from the neutral reference by up to {most:.3g}'
        assert name not in EXACT_EVERYWHERE, diff
        assert np.allclose(value[sl], want, rtol=OTHER_HOST_RTOL, atol=1e-12), diff


@pytest.mark.parametrize('valve', ['mujoco', 'python'])
def test_the_tolerance_sees_a_valve_just_off_neutral(reference, valve):
    """The other-host tolerance would still fail a valve that does not reduce to the lag: a
    dead time of one physics step (1.7 ms) or filling 1 % slower than venting."""
    want = reference[f'sim_{valve}']
    tau = load_leg_valve_tau()
    for overrides in (
        {'valve.dead_time': 1.0 / 600.0},
        {'valve.fill_time_constant': 1.01 * tau, 'valve.vent_time_constant': tau},
    ):
        got = valve_reference.simulator(valve, overrides=overrides)
        assert not np.allclose(got, want, rtol=100 * OTHER_HOST_RTOL, atol=1e-10), overrides


def load_leg_valve_tau() -> float:
    from equimus_description.leg import load_leg

    return load_leg().valve_time_constant


def test_the_default_leg_has_the_neutral_valve():
    from equimus_description.leg import load_leg

    v = load_leg().valve
    assert v.is_lag and v.dead_time == 0.0 and v.tau == load_leg().valve_time_constant


# The VPPE's wind-up while a vented muscle takes up its slack, as fitted to the ToCenter file in
# a trial (docs/identification.md): MAA slack 14.9 kPa, BAA none.
REGULATED = ValveParams(
    (0.258, 0.338),
    (0.005, 0.127),
    0.0952,
    slack=(14.9, 0.0),
    integral_gain=(1.87, 0.78),
    integral_leak=(1.39, 1.38),
)
# The same with the MAA's slack taken up at least at 60 kPa/s whatever the setpoint.
RATED = ValveParams(**{**vars(REGULATED), 'slack_rate': (60.0, 0.0)})


GENERAL = ValveParams(tau_fill=0.3, tau_vent=0.08, dead_time=0.0237)


def exact(params, p0, times, switches):
    """Closed form of the model: piecewise-constant command (t_i, u_i), integrated exactly
    between the delayed switching instants."""
    out = []
    for t in times:
        p = np.array(p0, float)
        edges = sorted(
            {0.0, t} | {s + params.dead_time for s, _ in switches if s + params.dead_time < t}
        )
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            u = np.array(p0, float)
            for s, v in switches:
                if s + params.dead_time <= a:
                    u = np.asarray(v, float)
            tau = np.where(u > p, params.tau_fill, params.tau_vent)
            p = u + (p - u) * np.exp(-(b - a) / tau)
        out.append(p)
    return np.array(out)


def test_the_three_solvers_agree_with_the_closed_form():
    dt = 1.0 / 600.0
    n = 600
    u = np.zeros((n, 2))
    u[50:300] = (40.0, 10.0)
    u[300:] = (5.0, 30.0)
    switches = [(50 * dt, (40.0, 10.0)), (300 * dt, (5.0, 30.0))]
    times = np.arange(1, n + 1) * dt
    want = exact(GENERAL, (0.0, 0.0), times, switches)
    p_follow, _ = follow(GENERAL, u, np.zeros(2), dt)
    assert np.max(np.abs(p_follow - want)) < 1e-9
    # held per 5-step frame, the history carried from frame to frame
    p, hist, rows = np.zeros(2), None, []
    for k in range(0, n, 5):
        seg, hist = hold(GENERAL, p, u[k], 5, dt, hist)
        rows.append(seg)
        p = seg[-1]
    assert np.max(np.abs(np.concatenate(rows) - want)) < 1e-9
    v = Valve(GENERAL, 2, p0=(0.0, 0.0))
    stepped = np.array([v.step(u[k], dt).copy() for k in range(n)])
    assert np.max(np.abs(stepped - want)) < 1e-9


def test_dead_time_and_asymmetry_are_what_they_say():
    dt = 0.001
    u = np.zeros((1000, 1))
    u[:500] = 30.0
    p, _ = follow(GENERAL, u, np.zeros(1), dt)
    k_dead = int(math.floor(GENERAL.dead_time / dt))
    assert np.all(p[:k_dead, 0] == 0.0) and p[k_dead + 1, 0] > 0.0  # nothing before the dead time
    # half of a fill at dead time + τ_fill·ln 2, half of a vent at dead time + τ_vent·ln 2
    t_half_fill = (np.argmax(p[:500, 0] >= 15.0) + 1) * dt
    p_vent = 30.0 * (1.0 - math.exp(-0.5 / GENERAL.tau_fill))  # filled for 0.5 s, then vents
    t_half_vent = (np.argmax(p[500:, 0] <= p_vent / 2) + 1) * dt
    assert t_half_fill == pytest.approx(GENERAL.dead_time + GENERAL.tau_fill * math.log(2), abs=dt)
    assert t_half_vent == pytest.approx(GENERAL.dead_time + GENERAL.tau_vent * math.log(2), abs=dt)


def test_batched_hold_equals_one_environment_at_a_time():
    dt = 1.0 / 1200.0
    rng = np.random.default_rng(0)
    p0 = rng.uniform(0, 50, (4, 2))
    hist = np.repeat(p0[:, None, :], GENERAL.history_steps(dt), axis=1)
    p, h = p0.copy(), hist.copy()
    for _ in range(30):
        u = rng.uniform(0, 50, (4, 2))
        batch, h_new = hold(GENERAL, p, u, 10, dt, h)
        for i in range(4):
            one, one_h = hold(GENERAL, p[i], u[i], 10, dt, h[i])
            assert np.allclose(one, batch[i], rtol=0, atol=1e-12)
            assert np.array_equal(one_h, h_new[i])
        p, h = batch[:, -1], h_new


def test_parameters_are_checked():
    with pytest.raises(ValueError, match='tau_fill'):
        ValveParams(tau_fill=0.0)
    with pytest.raises(ValueError, match='dead_time'):
        ValveParams(dead_time=-0.01)
    with pytest.raises(ValueError, match='no single time constant'):
        _ = GENERAL.tau
    assert ValveParams.lag(0.2).is_lag and not GENERAL.is_lag


@pytest.mark.parametrize(
    'params',
    [
        ValveParams((0.258, 0.338), (0.005, 0.127), 0.0952),  # the shipped fit: f > 0
        ValveParams(0.2, 0.05, 5 / 600),  # a dead time of whole steps
        ValveParams(0.3, 0.1, 0.0),  # fill ≠ vent without a dead time
        ValveParams(0.2171, 0.2171, 0.0),  # the lag (hold's own path)
        ValveParams(0.2, 0.1, 0.02, fill_rate=(80.0, math.inf)),  # a rate limit (hold's path)
        REGULATED,  # the regulator, dead time of a fraction of a step
        ValveParams(0.3, 0.1, 5 / 600, slack=8.0, integral_gain=2.0),  # whole steps, no leak
        RATED,  # the slack taken up at a least rate
    ],
)
def test_the_simulators_per_frame_hold_is_hold_bit_for_bit(params):
    """hold_steps (the simulator's frame) against hold over frames of 1, 5 and 40 steps, with
    the command changing at random frames (inside the dead time too): every pressure equal to
    the last bit, and so the history carried between frames."""
    rng = np.random.default_rng(7)
    dt = 1 / 600
    p_a = p_b = np.array([3.0, 0.0])
    hist_a = hist_b = None
    u = np.array([0.0, 0.0])
    for frame in range(300):
        if rng.random() < 0.3:
            u = np.round(rng.uniform(0.0, 50.0, 2), 1) * (rng.random(2) < 0.8)
        n = (1, 5, 40)[frame % 3]
        if frame == 150 and isinstance(hist_b, ValveMemory):  # a memory hold_steps did not write
            hist_b = ValveMemory(
                *(np.asarray(v) for v in (hist_b.commands, hist_b.integral, hist_b.slack))
            )
        elif frame == 150 and hist_b is not None:
            hist_b = np.asarray(hist_b)  # a history hold_steps did not write: rows as arrays
        a, hist_a = hold(params, p_a, u, n, dt, hist_a)
        b, hist_b = hold_steps(params, p_b.tolist(), u.tolist(), n, dt, hist_b)
        assert np.array_equal(a, np.array(b)), (frame, a - np.array(b))
        p_a, p_b = a[-1], np.array(b[-1])
    if isinstance(hist_a, ValveMemory):
        for field in ('commands', 'integral', 'slack'):
            a_, b_ = getattr(hist_a, field), getattr(hist_b, field)
            assert np.array_equal(np.reshape(a_, (-1, 2)), np.reshape(b_, (-1, 2))), field
    elif hist_a is None:
        assert hist_b is None
    else:
        assert np.array_equal(np.reshape(hist_a, (-1, 2)), np.reshape(hist_b, (-1, 2)))


def _fills_and_vents(n=600):
    u = np.zeros((n, 2))
    u[20:200] = (10.0, 20.0)
    u[330:480] = (35.0, 10.0)
    return u


@pytest.mark.parametrize('regulated', [REGULATED, RATED], ids=['regulator', 'slack_rate'])
def test_the_regulators_solvers_agree(regulated):
    """follow, hold over frames (memory carried), batched and one at a time, and hold_steps give
    the same pressures bit for bit; the clock-stepped Valve (the board emulator's) the same
    within 1e-9 kPa when the dead time is whole steps (its pieces are then the grid's)."""
    dt = 0.01
    u = _fills_and_vents()
    want, memory = follow(regulated, u, np.zeros(2), dt)
    assert isinstance(memory, ValveMemory)
    first, mid = follow(regulated, u[:137], np.zeros(2), dt)
    rest, _ = follow(regulated, u[137:], first[-1], dt, mid)
    assert np.array_equal(np.concatenate([first, rest]), want)
    batch, _ = follow(regulated, np.stack([u, u[::-1]]), np.zeros((2, 2)), dt)
    assert np.array_equal(batch[0], want)
    assert np.array_equal(batch[1], follow(regulated, u[::-1], np.zeros(2), dt)[0])
    p, mem, rows = [0.0, 0.0], None, []
    for k in range(len(u)):
        seg, mem = hold_steps(regulated, p, u[k].tolist(), 1, dt, mem)
        rows.append(seg[-1])
        p = seg[-1]
    assert np.array_equal(np.array(rows), want)
    whole = ValveParams(**{**vars(regulated), 'dead_time': 0.09})
    grid, _ = follow(whole, u, np.zeros(2), dt)
    v = Valve(whole, 2)
    stepped = np.array([v.step(u[k], dt).copy() for k in range(len(u))])
    assert np.max(np.abs(stepped - grid)) < 1e-9


def test_the_regulator_is_what_it_says():
    """A fill from vented: no pressure until the slack has taken its inflow, then an overshoot
    that unwinds back to the setpoint, a larger share of a low setpoint; venting restores the
    slack, so a second fill repeats the first exactly."""
    dt = 0.005
    slack_only = ValveParams(0.2, 0.05, 0.0, slack=10.0)
    p, _ = follow(slack_only, np.full((200, 1), 10.0), np.zeros(1), dt)
    per_step = 10.0 * (1.0 - math.exp(-dt / 0.2))  # inflow while the pressure is 0
    assert int(np.argmax(p[:, 0] > 0.0)) == math.floor(10.0 / per_step)
    valve = ValveParams(0.2, 0.05, 0.0, slack=10.0, integral_gain=2.0, integral_leak=1.5)
    for level in (10.0, 40.0):
        u = np.full((1200, 1), level)
        p, _ = follow(valve, u, np.zeros(1), dt)
        assert p[-1, 0] == pytest.approx(level, rel=0.01)  # the integral leaks away
        if level == 10.0:
            low_overshoot = p[:, 0].max() / level - 1.0
        else:
            assert 0.0 < p[:, 0].max() / level - 1.0 < low_overshoot
    u = np.zeros((1600, 1))
    u[:600] = u[800:1400] = 10.0
    p, _ = follow(valve, u, np.zeros(1), dt)
    assert p[799, 0] < 0.01  # vented
    assert np.allclose(p[800:1400], p[:600], atol=1e-6)
    # below the regulated minimum the valve does not integrate: no overshoot
    integral_only = ValveParams(0.2, 0.05, 0.0, integral_gain=2.0, integral_leak=1.5)
    low = 0.5 * MIN_REGULATED_KPA
    p, _ = follow(integral_only, np.full((600, 1), low), np.zeros(1), dt)
    assert p.max() <= low and p[-1, 0] == pytest.approx(low, rel=1e-6)
    p, _ = follow(integral_only, np.full((600, 1), 2 * MIN_REGULATED_KPA), np.zeros(1), dt)
    assert p.max() > 2 * MIN_REGULATED_KPA * 1.01


def test_a_slack_rate_takes_the_slack_up_in_the_same_time_at_every_setpoint():
    """In proportion to the inflow the slack delays a fill at 10 kPa several times longer than
    one at 50 kPa; taken up at least at slack_rate it costs about slack / slack_rate at both,
    and the chamber does not rise while it lasts. A slack_rate without a slack changes nothing."""
    dt = 0.005

    def onset(valve, level):
        p, _ = follow(valve, np.full((400, 1), level), np.zeros(1), dt)
        return int(np.argmax(p[:, 0] > 0.0)) * dt

    proportional = ValveParams(0.2, 0.05, 0.0, slack=15.0)
    assert onset(proportional, 10.0) > 3.0 * onset(proportional, 50.0)
    rated = ValveParams(0.2, 0.05, 0.0, slack=15.0, slack_rate=60.0)
    low, high = onset(rated, 10.0), onset(rated, 50.0)
    assert low == pytest.approx(15.0 / 60.0, abs=2 * dt)
    assert high <= low and high > 0.5 * onset(proportional, 50.0)
    # continuous in the rate (identification differentiates it): the pressures move in
    # proportion to a small change, not by a step's worth when the slack runs out a step early
    u = np.full((300, 1), 10.0)

    def moved(rel):
        faster = ValveParams(0.2, 0.05, 0.0, slack=15.0, slack_rate=60.0 * (1.0 + rel))
        return np.abs(
            follow(faster, u, np.zeros(1), dt)[0] - follow(rated, u, np.zeros(1), dt)[0]
        ).max()

    assert moved(1e-4) > 0.0 and moved(1e-3) == pytest.approx(10.0 * moved(1e-4), rel=0.05)
    chamber = ValveParams(0.2, 0.05, 0.0)
    u = np.full((400, 1), 20.0)
    assert np.array_equal(
        follow(ValveParams(0.2, 0.05, 0.0, slack_rate=60.0), u, np.zeros(1), dt)[0],
        follow(chamber, u, np.zeros(1), dt)[0],
    )


def test_neutral_regulator_is_the_chamber_bit_for_bit():
    chamber = ValveParams((0.258, 0.338), (0.005, 0.127), 0.0952)
    neutral = ValveParams(
        **{**vars(chamber), 'slack': 0.0, 'integral_gain': 0.0, 'integral_leak': 3.0}
    )
    assert not neutral.has_regulator and REGULATED.has_regulator
    u = _fills_and_vents()
    assert np.array_equal(
        follow(neutral, u, np.zeros(2), 0.01)[0], follow(chamber, u, np.zeros(2), 0.01)[0]
    )


def test_regulator_parameters_are_checked(tmp_path):
    with pytest.raises(ValueError, match='slack'):
        ValveParams(slack=-1.0)
    with pytest.raises(ValueError, match='integral_gain'):
        ValveParams(integral_gain=(1.0, math.nan))
    with pytest.raises(ValueError, match='slack_rate'):
        ValveParams(slack=5.0, slack_rate=-1.0)
    with pytest.raises(ValueError, match='cannot be combined'):
        ValveParams(fill_rate=100.0, slack=5.0)
    from equimus_description.leg import LegDescriptionError, load_leg

    leg = load_leg().with_overrides({'valve.slack.maa': 14.9, 'valve.integral_gain.baa': 0.8})
    assert leg.valve.slack == (14.9, 0.0) and leg.valve.integral_gain == (0.0, 0.8)
    rated = load_leg().with_overrides({'valve.slack.maa': 14.9, 'valve.slack_rate.maa': 60.0})
    assert rated.valve.slack_rate == (60.0, 0.0)
    assert load_leg().valve == ValveParams(leg.valve_time_constant, leg.valve_time_constant)
    with pytest.raises(LegDescriptionError, match='valve.slack.baa'):
        load_leg().with_overrides({'valve.slack.baa': -2.0})
