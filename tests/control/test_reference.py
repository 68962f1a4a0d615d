"""References: continuous positions, velocities that are the derivative, triangle from statics."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from equimus_control.reference import (
    MIN_SEGMENT_S,
    PREVIEW_S,
    PREVIEW_SPACING_S,
    Sinusoid,
    Waypoints,
    float_sampler,
    make_reference,
    min_jerk,
    preview_samples,
    triangle_poses,
)
from equimus_description.statics import equilibrium


@pytest.mark.parametrize(
    'traj', [Waypoints([[1.4, 0.8], [1.6, 0.5], [1.45, 0.55]], move=0.5, hold=1.0), Sinusoid()]
)
def test_velocity_is_the_derivative_and_position_is_continuous(traj):
    h = 1e-5
    for t in np.arange(0.0, 6.0, 0.013):
        q, v = traj(t)
        fd = (traj(t + h)[0] - traj(t - h)[0]) / (2 * h) if t > h else v
        assert np.allclose(v, fd, atol=1e-3), (t, v, fd)
        assert np.all(np.abs(traj(t + 1e-4)[0] - q) < 1e-2)


def test_waypoints_hold_each_pose_and_loop():
    w = Waypoints([[1.0, 0.1], [1.2, 0.3]], move=0.5, hold=1.0)
    assert np.allclose(w(0.7)[0], [1.0, 0.1])
    assert np.allclose(w(1.5 + 0.6)[0], [1.2, 0.3]) and np.allclose(w(2.2)[1], 0)
    assert np.allclose(w(3.0 + 0.6)[0], [1.0, 0.1])  # looped back


def test_triangle_vertices_are_static_equilibria(sim_params, triangle):
    for p, q in zip([(6.15, 2.73), (3.76, 7.26), (19.80, 8.52)], triangle, strict=True):
        assert np.allclose(equilibrium(p, sim_params, q0=q + 0.1), q, atol=1e-5)
    assert np.ptp(triangle, axis=0).min() > 0.02  # a real triangle
    assert np.allclose(
        make_reference('triangle', sim_params, move=0.5, hold=1.0)(0.1)[0],
        triangle_poses(sim_params)[0],
    )


def test_unknown_kind_is_a_clear_error():
    with pytest.raises(ValueError, match='triangle'):
        make_reference('zigzag')


def test_a_late_reference_is_carried_to_the_state_time_and_no_further():
    from equimus_control.reference import reference_at

    q, qd = [1.0, 0.5], [0.2, -0.4]
    np.testing.assert_allclose(reference_at(q, qd, 10.0, 10.025), [1.005, 0.49])
    np.testing.assert_allclose(reference_at(q, qd, 10.0, 9.9), q)  # newer than the state
    np.testing.assert_allclose(reference_at(q, qd, 10.0, 12.0, 0.1), [1.02, 0.46])  # capped


@given(
    poses=st.lists(
        st.lists(st.floats(-3, 3, allow_nan=False), min_size=2, max_size=2), min_size=1, max_size=4
    ),
    move=st.sampled_from([0.0, 0.3, 0.5]) | st.floats(0.01, 1.0),
    hold=st.floats(0.0, 2.0),
    loop=st.booleans(),
    t0=st.floats(0.0, 20.0),
)
@settings(max_examples=200, deadline=None)
def test_a_preview_is_the_trajectory_bit_for_bit(poses, move, hold, loop, t0):
    """The preview's samples (one pass of array arithmetic) are exactly the trajectory's values
    at those times: the controller following the preview and the reference it is scored on
    must not differ in the last bit (the node and the plain loop are compared bit for bit)."""
    assume(move + hold >= MIN_SEGMENT_S)
    w = Waypoints(poses, move=move, hold=hold, loop=loop)
    times, q, qd = preview_samples(w, t0, PREVIEW_S, PREVIEW_SPACING_S)
    for i, t in enumerate(times):
        a, b = w(float(t))
        np.testing.assert_array_equal(q[i], a)
        np.testing.assert_array_equal(qd[i], b)


def test_a_segment_without_length_is_refused():
    """move = hold = 0 divided by zero at the first sample, a node's tick included."""
    with pytest.raises(ValueError, match='segment'):
        Waypoints([[1.0, 0.1]], move=0.0, hold=0.0)


def _waypoints_on_arrays(w: Waypoints, t: float) -> tuple[np.ndarray, np.ndarray]:
    """The trajectory's law written on numpy arrays (its form before `Waypoints.at`)."""
    P = np.asarray(w.poses, float)
    seg, n = w.move + w.hold, len(P)
    k = int(t // seg)
    if n == 1 or (not w.loop and k >= n):
        return P[-1].copy(), np.zeros(P.shape[1])
    tau = t - k * seg
    if k == 0:
        return P[0].copy(), np.zeros(P.shape[1])
    a, b = P[(k - 1) % n], P[k % n]
    s, ds = min_jerk(min(max(tau / w.move, 0.0), 1.0)) if w.move > 0 else (1.0, 0.0)
    return a + s * (b - a), (ds / w.move if w.move > 0 and tau < w.move else 0.0) * (b - a)


@given(
    poses=st.lists(
        st.lists(st.floats(-3, 3, allow_nan=False), min_size=2, max_size=3), min_size=1, max_size=4
    ).filter(lambda p: len({len(r) for r in p}) == 1),
    move=st.sampled_from([0.0, 0.3, 0.5]) | st.floats(0.01, 1.0),
    hold=st.floats(0.0, 2.0),
    loop=st.booleans(),
    t=st.floats(0.0, 40.0),
)
@settings(max_examples=300, deadline=None)
def test_the_float_form_is_the_array_form_bit_for_bit(poses, move, hold, loop, t):
    """`Waypoints.at` (plain floats, the reference node's tick) gives the array law's values in
    every bit, signed zeros included; calling the trajectory gives the same as arrays."""
    assume(move + hold >= MIN_SEGMENT_S)
    w = Waypoints(poses, move=move, hold=hold, loop=loop)
    q, qd = w.at(t)
    a, b = _waypoints_on_arrays(w, t)
    assert all(isinstance(v, float) for v in q + qd)
    assert np.array(q).tobytes() == a.tobytes() and np.array(qd).tobytes() == b.tobytes()
    c, d = w(t)
    assert c.tobytes() == a.tobytes() and d.tobytes() == b.tobytes()
    assert float_sampler(w)(t) == (q, qd)
    s = Sinusoid()
    assert float_sampler(s)(t) == tuple([float(v) for v in x] for x in s(t))
