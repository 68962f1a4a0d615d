"""The compiled kernels (equimus_control._kernels) against their Python forms, bit for bit:
hinge_angles, filter_update, pid_law and waypoint_preview on drawn inputs (ordinary, extreme and
malformed: the same values or the same exception type), and a closed loop run with each form
giving the same trajectory to the last bit."""

import math
import struct

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from equimus_control import kernels
from equimus_control.closed_loop import run
from equimus_control.estimation import (
    EstimatorConfig,
    HingeSpec,
    JointStateEstimator,
    filter_update,
    hinge_angles,
)
from equimus_control.pid import PIDController, PIDGains, pack_statics, pid_law
from equimus_control.reference import (
    MAX_SEGMENTS,
    PREVIEW_S,
    PREVIEW_SPACING_S,
    Waypoints,
    preview_rows,
    waypoint_preview,
)
from equimus_description.statics import StaticParams, holding_pressures

C = kernels.compiled()


def test_this_build_has_the_compiled_kernels():
    """setup.py builds them optionally; here (a C compiler is present) they must be built, or
    every other test in this file would compare Python with itself."""
    assert C is not None, kernels.MISSING
    assert len(pack_statics(StaticParams())) == C.N_STATICS
    assert JointStateEstimator().kernels == 'compiled'
    assert PIDController(StaticParams()).kernels == 'compiled'
    assert JointStateEstimator(compiled=False).kernels == 'python'


def _bits(value):
    """Floats by their bit patterns (NaN as one), in nested lists and tuples."""
    if isinstance(value, (list, tuple)):
        return type(value)(_bits(v) for v in value)
    if isinstance(value, float):
        return 'nan' if math.isnan(value) else struct.pack('<d', value)
    return value


def _outcome(f, *args):
    try:
        return 'ok', _bits(f(*args))
    except Exception as exc:  # noqa: BLE001 - the type is what is compared
        return 'raised', type(exc)


def same(reference, compiled, *args):
    want, got = _outcome(reference, *args), _outcome(compiled, *args)
    assert got == want, args


finite = st.floats(-1e3, 1e3, allow_nan=False)
anything = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, 1e-200])
unit = st.floats(-1.0, 1.0, allow_nan=False)
quaternion = st.tuples(unit, unit, unit, unit) | st.tuples(anything, anything, anything, anything)
position = st.tuples(finite, finite, finite) | st.lists(anything, max_size=4).map(tuple)
pose = st.tuples(position, quaternion)
malformed = st.sampled_from(
    [((0.0, 0.0, 0.0), (0.0, 0.0, 1.0)), ((0.0,), (0, 0, 0, 1, 0)), (1.0, 2.0), 'ab', None]
)
axis = st.tuples(unit, unit, unit).filter(lambda v: sum(c * c for c in v) > 1e-3)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(pose | malformed, min_size=2, max_size=4) | st.lists(pose, min_size=3, max_size=3),
    st.lists(st.tuples(axis, axis, finite), min_size=1, max_size=3),
)
def test_hinge_angles(poses, specs):
    hinges = tuple(
        HingeSpec(ap, ac, offset).packed(j % 3, (j + 1) % 3)
        for j, (ap, ac, offset) in enumerate(specs)
    )
    same(hinge_angles, C.hinge_angles, poses, 3, hinges)


def test_hinge_angles_of_the_leg_s_default_chain():
    chain = EstimatorConfig().chain
    hinges = tuple(h.packed(a, b) for a, b, h in chain)
    rng = np.random.default_rng(3)
    for _ in range(2000):
        poses = [(tuple(rng.normal(size=3)), tuple(rng.normal(size=4))) for _ in range(3)]
        a, b = hinge_angles(poses, 3, hinges), C.hinge_angles(poses, 3, hinges)
        assert a is not None and _bits(a) == _bits(b)


state = st.tuples(finite, st.floats(-50, 50))
covariance = st.tuples(st.floats(0, 1), st.floats(-1, 1), st.floats(0, 200))


@settings(max_examples=400, deadline=None)
@example(  # dt**2 by the C library's pow is one ulp off dt * dt here (GCC's rewrite of pow)
    joints=[((0.0, 0.0), (0.0, 0.0, 0.0), 0.0)],
    dt=0.05672618464293473,
    sigma_acc=1.0,
    sigma_meas=0.0625,
    ragged=False,
)
@given(
    st.lists(st.tuples(state, covariance, finite), min_size=1, max_size=3),
    st.floats(1e-4, 0.2) | anything,
    st.floats(0.0, 100.0) | anything,
    st.floats(1e-5, 0.1) | st.sampled_from([0.0, 1e200]),
    st.booleans(),
)
def test_filter_update(joints, dt, sigma_acc, sigma_meas, ragged):
    x = [list(s) for s, _, _ in joints]
    P = [c for _, c, _ in joints]
    z = [w for _, _, w in joints] + ([0.0] if ragged else [])
    same(filter_update, C.filter_update, x, P, z, dt, sigma_acc, sigma_meas)


def test_filter_update_over_many_frame_intervals():
    """The predict's powers of dt (dt**2, dt**3, dt**4) over 20000 intervals around a frame's:
    where pow(x, 2.0) and x * x differ in the last bit, the two forms must still agree."""
    rng = np.random.default_rng(7)
    x, P = [[0.3, -1.2], [1.1, 0.4]], [(1e-5, 2e-4, 0.02), (3e-6, -1e-4, 0.5)]
    for dt in rng.uniform(1e-3, 0.1, 20_000).tolist():
        z = [0.31, 1.09]
        assert _bits(filter_update(x, P, z, dt, 10.0, 0.002)) == _bits(
            C.filter_update(x, P, z, dt, 10.0, 0.002)
        ), dt


angle = st.floats(-4.0, 4.0, allow_nan=False)
rate = st.floats(-20.0, 20.0, allow_nan=False)
gain = st.floats(0.0, 50.0, allow_nan=False)


@settings(max_examples=600, deadline=None)
@given(
    st.tuples(angle, angle, rate, rate, angle, angle, rate, rate),
    st.tuples(gain, gain, gain, gain, gain, gain, gain, gain, gain, gain),
    st.tuples(st.floats(-2, 2), st.floats(-2, 2), st.floats(1e-4, 0.1)),
    st.sampled_from([50.0, 30.0, 5.0, 0.0]) | st.floats(0.0, 60.0),
    st.booleans(),
)
def test_pid_law(state, gains, rest, p_max, wild):
    params = StaticParams(area_slope=(0.0, 1.5)) if wild else StaticParams()
    kp0, kp1, ki0, ki1, kd0, kd1, k_aw, i_max0, i_max1, _ = gains
    args = (*state, kp0, kp1, ki0, ki1, kd0, kd1, k_aw, i_max0, i_max1, *rest, p_max)
    want = _outcome(pid_law, params, *args)
    assert want == _outcome(C.pid_law, pack_statics(params), *args), args


@settings(max_examples=200, deadline=None)
@given(st.lists(anything, min_size=8, max_size=8), st.sampled_from([50.0, math.nan, math.inf]))
def test_pid_law_on_non_finite_values(values, p_max):
    args = (*values, 3.0, 1.5, 4.0, 2.0, 0.15, 0.06, 5.0, 0.5, 0.3, 0.1, -0.1, 1 / 120, p_max)
    want = _outcome(pid_law, StaticParams(), *args)
    assert want == _outcome(C.pid_law, pack_statics(StaticParams()), *args)


coordinate = st.floats(-4.0, 4.0, allow_nan=False)


@settings(max_examples=600, deadline=None)
@example(  # 15.4 // 2.2 is 6.0 where floor(15.4 / 2.2) is 7: Python's floor division decides
    poses=[[0.5], [1.0], [2.0]], move=1.0, hold=1.2, loop=True, t=15.4, spacing=0.5, count=2
)
@given(
    st.integers(1, 4).flatmap(
        lambda joints: st.lists(
            st.lists(coordinate, min_size=joints, max_size=joints), min_size=1, max_size=4
        )
    ),
    st.sampled_from([0.0, 0.5]) | st.floats(1e-6, 3.0),
    st.sampled_from([1e-3, 1.5]) | st.floats(1e-3, 3.0),
    st.booleans(),
    st.sampled_from([0.0, 3.0]) | st.floats(0.0, 1e4),
    st.sampled_from([PREVIEW_SPACING_S, 0.5]) | st.floats(1e-4, 1.0),
    st.integers(0, 40),
)
def test_waypoint_preview(poses, move, hold, loop, t, spacing, count):
    stamp = 1_800_000_000.0 + t  # a node clock's seconds
    same(waypoint_preview, C.waypoint_preview, poses, move, hold, loop, t, stamp, spacing, count)


@pytest.mark.parametrize(
    'args',
    [
        ([[0.1]], 0.5, 1.0, True, math.nan, 0.0, 0.1, 3),
        ([[0.1]], 0.5, 1.0, True, 0.0, math.inf, 0.1, 3),
        ([[0.1]], 0.5, 1.0, True, 0.0, 0.0, 0.1, -1),
        ([], 0.5, 1.0, True, 0.0, 0.0, 0.1, 3),
        ([[0.1, 0.2], [0.3]], 0.5, 1.0, True, 0.0, 0.0, 0.1, 3),
        ([[0.1]], 0.5, 1.0, True, 1e300, 0.0, 0.1, 3),
        ([[0.1]], 0.5, 1.0, True, 0.0, 0.0, 1e300, 3),
    ],
)
def test_waypoint_preview_refuses_what_has_no_preview(args):
    """Non-finite times, a negative count, no poses, ragged poses, a time too far out for its
    segment's number: a ValueError either way."""
    assert C.MAX_SEGMENTS == MAX_SEGMENTS
    assert _outcome(waypoint_preview, *args) == ('raised', ValueError)
    assert _outcome(C.waypoint_preview, *args) == ('raised', ValueError)


def test_the_reference_node_s_preview_is_the_trajectory_at_each_time(triangle):
    """What the reference node publishes (`preview_rows`, compiled): each row is the time on the
    node clock and the trajectory's own sample (`Waypoints.at`), bit for bit, through the
    triangle's moves and holds."""
    ref = Waypoints(triangle, move=0.5, hold=1.5)
    cols = 1 + 2 * len(triangle[0])
    for t in np.arange(0.0, 13.0, 0.1).tolist():
        stamp = 1_800_000_000.0 + t
        rows = preview_rows(ref, t, stamp, PREVIEW_S, PREVIEW_SPACING_S, C)
        assert _bits(rows) == _bits(preview_rows(ref, t, stamp, PREVIEW_S, PREVIEW_SPACING_S))
        for i in range(len(rows) // cols):
            ti = t + PREVIEW_SPACING_S * i
            q, qd = ref.at(ti)
            assert _bits(rows[i * cols : (i + 1) * cols]) == _bits([stamp + (ti - t), *q, *qd])


def test_a_closed_loop_runs_the_same_with_either_form(triangle, sim_params, make_sim, monkeypatch):
    """The estimator and the PID, built compiled and then in Python (EQUIMUS_KERNELS=python),
    track the triangle on the simulated leg with noisy mocap: the same estimates and commands."""
    ref = Waypoints(triangle, move=0.5, hold=0.5)
    p0 = np.clip(holding_pressures(triangle[0], sim_params), 0, 50)
    out = {}
    for form in ('compiled', 'python'):
        if form == 'python':
            monkeypatch.setenv(kernels.ENV, 'python')
        controller = PIDController(sim_params, PIDGains(lead=0.03))
        assert controller.kernels == form
        sim, mocap = make_sim(
            triangle[0], p0, position_noise=0.0003, orientation_noise=0.002, seed=2
        )
        out[form] = run(sim, mocap, controller, ref, 3.0)
    a, b = out['compiled'], out['python']
    for name in ('q', 'q_est', 'u', 'saturated', 'vented'):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert np.ptp(a.u) > 1.0  # the valves moved: a loop, not a hold
