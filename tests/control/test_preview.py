"""The reference's own future (/reference/preview): `Reference.at` follows it instead of
extrapolating, `ControlStep` takes it only while it holds the estimate's time, and the PID's
`lead` follows the reference that far ahead. With the real MuJoCo leg: a lead paid with the
preview makes the triangle's tracking better."""

import dataclasses

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from equimus_control.closed_loop import run
from equimus_control.controller import Preview, Reference
from equimus_control.pid import PIDController, PIDGains
from equimus_control.reference import Waypoints, preview_samples
from equimus_control.step import PERIOD, ControlStep
from equimus_description.statics import holding_pressures


def _ramp(t: float):
    """Angles 1 + t and 0.5 − t rad (velocities 1 and −1 rad/s) until t = 0.2 s, then held."""
    a = min(max(t, 0.0), 0.2)
    v = 1.0 if 0.0 <= t < 0.2 else 0.0
    return np.array([1.0 + a, 0.5 - a]), np.array([v, -v])


def test_preview_samples_are_the_trajectory_and_at_interpolates_and_holds():
    times, q, qd = preview_samples(_ramp, 0.0, 0.3, 0.05)
    np.testing.assert_allclose(times, 0.05 * np.arange(7))
    np.testing.assert_allclose(q[:, 0], [1.0, 1.05, 1.1, 1.15, 1.2, 1.2, 1.2])
    ref = Reference(q[0], qd[0], preview=Preview(times, q, qd), stamp=0.0)
    np.testing.assert_allclose(ref.at(0.125), [1.125, 0.375])  # between samples: linear
    np.testing.assert_allclose(ref.at(0.25), [1.2, 0.3])  # the corner: no overshoot
    np.testing.assert_allclose(ref.at(5.0), [1.2, 0.3])  # past the last sample: held
    np.testing.assert_allclose(ref.velocity_at(np.array([0.1, 0.25])), [[1, -1], [0, 0]])
    # without a preview the same reference is carried along its velocity, at most 0.1 s
    plain = Reference(q[0], qd[0])
    np.testing.assert_allclose(plain.at(0.25), [1.1, 0.4])
    np.testing.assert_allclose(plain.velocity_at(0.25), [0.0, 0.0])


class _Echo:
    """A controller that answers with the reference it was given (kPa = rad, to see it)."""

    def reset(self):
        pass

    def step(self, state, ref, dt, p_max):
        from equimus_control.controller import ControlOutput

        return ControlOutput(np.asarray(ref.at(0.1), float), np.zeros(2, bool))


@pytest.mark.parametrize(
    'times, why',
    [
        ([0.0], 'one sample'),
        ([0.0, 0.0], 'not ascending'),
        ([0.0, np.nan], 'not finite'),
    ],
)
def test_a_bad_preview_is_ignored(times, why):
    step = ControlStep(_Echo())
    n = len(times)
    assert not step.set_preview(times, np.ones((n, 2)), np.zeros((n, 2))), why
    assert step.preview is None
    assert not step.set_preview([0.0, 0.1], np.ones((2, 3)), np.zeros((2, 3)))  # 3 joints
    assert not step.set_preview([0.0, 0.1], [[1.0, np.inf], [1.0, 1.0]], np.zeros((2, 2)))


def test_the_step_uses_the_preview_only_while_it_holds_the_estimates_time():
    step = ControlStep(_Echo())
    step.set_reference([1.0, 0.5], [1.0, -1.0], 0.0)
    assert step.set_preview(*preview_samples(_ramp, 0.0, 0.3, PERIOD))
    q = [1.0, 0.5]
    # 0.15 s + 0.1 s ahead: the corner at 0.2 s is in the preview (1.2), not 1.25 extrapolated
    np.testing.assert_allclose(step.step(q, [0, 0], 0.15, 0.15).pressures, [1.2, 0.3])
    # a preview that ended before the estimate's time is stale: the latest sample, carried
    # along its velocity (0.05 s late, then 0.1 s ahead)
    step.set_reference([1.3, 0.2], [0.5, 0.0], 0.45)
    np.testing.assert_allclose(step.step(q, [0, 0], 0.5, 0.5).pressures, [1.375, 0.2])
    assert step._preview_for(0.5) is None and step._preview_for(0.1) is not None
    assert step._preview_for(-1.0) is None  # a preview far ahead of the estimate


def test_a_lead_with_the_preview_is_the_reference_shifted_by_the_lead(
    triangle, sim_params, make_sim
):
    """PID with lead L on the preview gives exactly the commands of the PID without lead fed
    the reference L s ahead: the lead is the reference's future, not an extrapolation."""
    lead = 12 * PERIOD
    ref = Waypoints(triangle, move=0.5, hold=1.5)
    p0 = np.clip(holding_pressures(triangle[0], sim_params), 0, 50)
    runs = []
    for gains, reference, preview in (
        (dataclasses.replace(PIDGains(), lead=lead), ref, 0.3),
        (PIDGains(), lambda t: ref(t + lead), 0.0),
    ):
        sim, mocap = make_sim(triangle[0], p0, position_noise=0.0003, seed=2)
        runs.append(
            run(sim, mocap, PIDController(sim_params, gains), reference, 3.0, preview_s=preview)
        )
    np.testing.assert_allclose(runs[0].u, runs[1].u, atol=1e-9)


def test_a_lead_paid_with_the_preview_tracks_the_triangle_better(triangle, sim_params, make_sim):
    ref = Waypoints(triangle, move=0.5, hold=1.5)
    p0 = np.clip(holding_pressures(triangle[0], sim_params), 0, 50)
    total = {}
    for lead in (0.0, 0.15):
        sim, mocap = make_sim(triangle[0], p0, position_noise=0.0003, seed=2)
        c = PIDController(sim_params, dataclasses.replace(PIDGains(), lead=lead))
        r = run(sim, mocap, c, ref, 6.0, preview_s=0.3)
        assert not r.vented[1:].any()
        total[lead] = float(np.sum(r.rmse(skip=0.5)))
    assert total[0.15] < 0.85 * total[0.0], total


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(st.floats(1e-4, 0.2), min_size=1, max_size=12),
    start=st.floats(-1e3, 1e3),
    at=st.floats(-2.0, 3.0),
    seed=st.integers(0, 2**31),
)
def test_sampling_at_one_time_gives_the_array_paths_values_bit_for_bit(steps, start, at, seed):
    """The control cycle samples the preview at one time in plain floats; its answer is the
    array path's, bit for bit, between, before and after the samples."""
    times = start + np.concatenate([[0.0], np.cumsum(steps)])
    assume(np.all(np.diff(times) > 0))
    rng = np.random.default_rng(seed)
    q, qd = rng.normal(size=(len(times), 2)), rng.normal(size=(len(times), 2))
    preview = Preview(times, q, qd)
    when = float(times[0] + at * (times[-1] - times[0]))
    one_q, one_qd = preview.sample(when)
    arr_q, arr_qd = preview.sample(np.array([when]))
    assert one_q.shape == one_qd.shape == (2,)
    assert one_q.tobytes() == arr_q[0].tobytes() and one_qd.tobytes() == arr_qd[0].tobytes()
