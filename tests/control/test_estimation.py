"""Estimator: joint angles from simulated mocap vs MuJoCo's joints; velocity filter; lost frames."""

import math

import numpy as np

from equimus_control.closed_loop import PERIOD, frame_poses
from equimus_control.estimation import EstimatorConfig, JointStateEstimator, Status


def drive(sim, mocap, n, u_fn):
    est = JointStateEstimator(EstimatorConfig())
    rows = []
    for k in range(n):
        sim.set_command(u_fn(k * PERIOD))
        sim.advance(PERIOD)
        t = (k + 1) * PERIOD
        fr = mocap.capture(t, sim.body_poses())
        e = est.update(t, frame_poses(fr)) if fr else est.update_gap(t)
        q, qd = sim.joint_state()
        rows.append((e, q, qd, est.measure(frame_poses(fr))))
    return rows


def test_angles_match_mujoco_exactly_without_noise(make_sim):
    sim, mocap = make_sim([1.39, 0.85], (6.15, 2.73))
    rows = drive(sim, mocap, 120, lambda t: (20.0 * (t > 0.1), 10.0))
    err = max(np.max(np.abs(e.position - q)) for e, q, *_ in rows[:1])
    assert err < 1e-9
    moved = rows[-1][1] - rows[0][1]
    assert np.max(np.abs(moved)) > 0.05  # the leg really moved


def test_angles_match_mujoco_within_noise(make_sim):
    sim, mocap = make_sim(
        [1.39, 0.85], (6.15, 2.73), position_noise=0.0005, orientation_noise=0.003, seed=3
    )
    rows = drive(sim, mocap, 360, lambda t: (6.15 + 10 * math.sin(3 * t), 2.73 + 5 * (t > 1)))
    err = np.array([e.position - q for e, q, *_ in rows[30:]])
    rms = np.sqrt(np.mean(err**2, axis=0))
    # relative angle noise ≈ √2 × 0.003 rad per axis projected; the filter must not add lag error
    assert np.all(rms < 0.004), rms
    assert np.all(rms > 1e-5)  # noise is really there


def test_velocity_filter_tracks_and_beats_raw_difference(make_sim):
    sim, mocap = make_sim([1.39, 0.85], (6.15, 2.73), orientation_noise=0.002, seed=5)
    rows = drive(sim, mocap, 480, lambda t: (15 + 12 * math.sin(4 * t), 6 + 5 * math.sin(3 * t)))
    est_v = np.array([r[0].velocity for r in rows[60:]])
    true_v = np.array([r[2] for r in rows[60:]])
    meas = np.unwrap(np.array([r[3] for r in rows]), axis=0)  # raw per-frame angles
    raw_v = np.diff(meas, axis=0)[59:] / PERIOD
    e_f = np.sqrt(np.mean((est_v - true_v) ** 2, axis=0))
    e_raw = np.sqrt(np.mean((raw_v - true_v) ** 2, axis=0))
    assert np.all(np.std(true_v, axis=0) > 0.2)  # real motion
    assert np.all(e_f < 0.6 * e_raw), (e_f, e_raw)
    assert np.all(e_f < 0.6 * np.std(true_v, axis=0)), e_f


def poses_at(q1, q2):
    """Motive-like poses of three bodies for angles (θ1, θ2) with hinge −x, offset π/2."""

    def rx(a):  # quaternion (x, y, z, w) of a rotation by a about −x
        return (-math.sin(a / 2), 0.0, 0.0, math.cos(a / 2))

    return [
        ((0, 0, 0), (0, 0, 0, 1)),
        ((0, 0, 0), rx(q1 - math.pi / 2)),
        ((0, 0, 0), rx(q1 + q2 - math.pi)),
    ]


def test_nan_pose_holds_then_invalidates_and_recovers():
    est = JointStateEstimator(EstimatorConfig(max_hold=0.05))
    t = 0.0
    for _ in range(10):
        t += PERIOD
        e = est.update(t, poses_at(1.0, 0.5))
    assert e.status == Status.VALID and np.allclose(e.position, [1.0, 0.5])
    lost = poses_at(1.0, 0.5)
    lost[1] = ((math.nan,) * 3, (math.nan,) * 4)
    statuses = []
    for _ in range(10):
        t += PERIOD
        e = est.update(t, lost)
        statuses.append(e.status)
        if e.status == Status.HELD:
            assert np.allclose(e.position, [1.0, 0.5]) and np.allclose(e.velocity, 0)
        else:
            assert np.all(np.isnan(e.position))
    assert statuses[0] == Status.HELD and statuses[-1] == Status.INVALID
    assert statuses.count(Status.HELD) == 6  # 6 × 8.3 ms ≤ 50 ms
    t += PERIOD
    e = est.update(t, poses_at(1.1, 0.4))  # re-initialised, no bridging of the gap
    assert e.status == Status.VALID and np.allclose(e.position, [1.1, 0.4])
    assert np.allclose(e.velocity, 0)


def test_dropped_frames_counted_and_bridged_by_prediction():
    est = JointStateEstimator(EstimatorConfig())
    t = 0.0
    for _ in range(60):
        t += PERIOD
        e = est.update(t, poses_at(1.0 + 0.5 * t, 0.5))
    t += 4 * PERIOD  # three frames missing
    e = est.update(t, poses_at(1.0 + 0.5 * t, 0.5))
    assert e.gap_frames == 3 and est.dropped_frames == 3
    assert abs(e.velocity[0] - 0.5) < 0.05 and e.status == Status.VALID
    assert est.update_gap(t + 0.2).status == Status.INVALID


def test_angle_unwraps_across_pi():
    est = JointStateEstimator(EstimatorConfig())
    t, out = 0.0, []
    for a in np.linspace(2.5, 4.0, 40):  # θ1 − π/2 crosses π → wraps
        t += PERIOD
        out.append(est.update(t, poses_at(a + math.pi / 2 - math.pi / 2, 0.3)).position[0])
    assert np.all(np.diff(out) > 0) and out[-1] > 3.9


def test_backwards_stamp_rejected():
    est = JointStateEstimator()
    est.update(1.0, poses_at(1.0, 0.5))
    try:
        est.update(1.0, poses_at(1.0, 0.5))
    except ValueError as exc:
        assert 'backwards' in str(exc)
    else:
        raise AssertionError('repeated stamp accepted')


def test_filter_equals_the_matrix_kalman_equations_on_irregular_steps():
    """The per-joint scalar filter is the textbook x = Fx, P = FPFᵀ + Q, K = PHᵀ/S update."""
    cfg = EstimatorConfig()
    est = JointStateEstimator(cfg)
    rng = np.random.default_rng(3)
    t, x, P = 0.0, None, None
    for k in range(200):
        t += PERIOD * (1 + 3 * (k % 37 == 0)) * rng.uniform(0.8, 1.2)
        q = np.array([1.2 + 0.3 * math.sin(2 * t), 0.6 + 0.2 * math.cos(3 * t)])
        q = q + rng.normal(0, 0.002, 2)
        e = est.update(t, poses_at(q[0], q[1]))
        z = est.measure(poses_at(q[0], q[1]))
        if x is None:
            t_prev = t
            x = [np.array([z[j], 0.0]) for j in range(2)]
            P = [np.diag([cfg.sigma_meas**2, 100.0]) for _ in range(2)]
        else:
            dt = t - t_prev
            F = np.array([[1, dt], [0, 1]])
            Q = cfg.sigma_acc**2 * np.array([[dt**4 / 4, dt**3 / 2], [dt**3 / 2, dt**2]])
            H = np.array([[1.0, 0.0]])
            for j in range(2):
                xp, Pp = F @ x[j], F @ P[j] @ F.T + Q
                K = Pp @ H.T / (H @ Pp @ H.T + cfg.sigma_meas**2)
                x[j] = xp + (K * (z[j] - xp[0])).ravel()
                P[j] = (np.eye(2) - K @ H) @ Pp
        t_prev = t
        assert np.allclose(e.position, [x[0][0], x[1][0]], atol=1e-12)
        assert np.allclose(e.velocity, [x[0][1], x[1][1]], rtol=1e-9, atol=1e-9)


def test_joint_angles_are_the_same_in_the_z_up_mocap_frame():
    """REP-103: the bridge's Y-up -> Z-up conversion (equimus_description.motive) leaves the
    estimated angles unchanged, for random hinge rotations about the bodies' x axis and random
    body attitudes in the capture volume."""
    from equimus_control.estimation import HingeSpec
    from equimus_description.motive import motive_to_ros

    rng = np.random.default_rng(4)
    hinge = HingeSpec()

    def quat(axis, angle):  # x, y, z, w
        s = math.sin(angle / 2)
        return (axis[0] * s, axis[1] * s, axis[2] * s, math.cos(angle / 2))

    def mul(a, b):
        ax, ay, az, aw = a
        bx, by, bz, bw = b
        return (
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
            aw * bw - ax * bx - ay * by - az * bz,
        )

    for _ in range(200):
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        parent = quat(axis, rng.uniform(-math.pi, math.pi))
        child = mul(parent, quat((1.0, 0.0, 0.0), rng.uniform(-2.0, 2.0)))
        y_up = hinge.angle(parent, child)
        zp = motive_to_ros((0.0, 0.0, 0.0), parent, 'y_up')[1]
        zc = motive_to_ros((0.0, 0.0, 0.0), child, 'y_up')[1]
        assert abs(hinge.angle(zp, zc) - y_up) < 1e-12
