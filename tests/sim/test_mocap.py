"""Virtual motion capture: frame conversion, noise, drops, occlusion and latency statistics."""

import math

import numpy as np
import pytest

from equimus_sim.mocap import (
    Q_MW,
    R_MW,
    MocapConfig,
    VirtualMocap,
    quat_from_rotvec,
    quat_mul,
    quat_to_mat,
    world_to_motive,
)

RNG = np.random.default_rng(1234)


def _random_quat(rng):
    q = rng.normal(size=4)
    return q / np.linalg.norm(q)


def _rotvec_of(q):
    """Rotation vector of a unit wxyz quaternion (shortest)."""
    q = np.asarray(q, float)
    if q[0] < 0:
        q = -q
    s = np.linalg.norm(q[1:])
    angle = 2 * math.atan2(s, q[0])
    return np.zeros(3) if s < 1e-15 else q[1:] / s * angle


def _quat_conj(q):
    return np.array([q[0], -q[1], -q[2], -q[3]])


def test_world_to_motive_is_a_proper_rotation_with_y_up():
    assert np.allclose(R_MW @ R_MW.T, np.eye(3))
    assert np.isclose(np.linalg.det(R_MW), 1.0)
    assert np.allclose(quat_to_mat(Q_MW), R_MW)
    # MuJoCo up (+z) is Motive up (+y); positions are (x_w, z_w, -y_w)
    assert np.allclose(R_MW @ [0, 0, 1], [0, 1, 0])
    p, _ = world_to_motive([0.1, 0.2, 0.3], [1, 0, 0, 0])
    assert np.allclose(p, [0.1, 0.3, -0.2])


def test_orientation_conversion_matches_position_conversion():
    """Rotating a body-frame point then converting == converting the pose then rotating."""
    for _ in range(50):
        q_w = _random_quat(RNG)
        pos_w = RNG.normal(size=3)
        body_pt = RNG.normal(size=3)
        world_pt = pos_w + quat_to_mat(q_w) @ body_pt
        p_m, q_m = world_to_motive(pos_w, q_w)
        assert np.isclose(np.linalg.norm(q_m), 1.0)
        assert np.allclose(p_m + quat_to_mat(q_m) @ body_pt, R_MW @ world_pt, atol=1e-12)


def _poses(z_base=0.7):
    return {
        'base': (np.array([0.0, 0.0, z_base]), np.array([1.0, 0, 0, 0])),
        'thigh': (np.array([0.1245, -0.235, z_base - 0.105]), np.array([1.0, 0, 0, 0])),
        'calf': (np.array([0.1245, -0.235, z_base - 0.355]), quat_from_rotvec([-0.3, 0, 0])),
    }


def test_base_is_placed_in_the_capture_volume_and_geometry_is_kept():
    m = VirtualMocap(MocapConfig(base_position=(0.2, 0.7, -0.1)))
    f = m.capture(0.0, _poses(z_base=0.0))
    assert np.allclose(f.bodies['base'].position, [0.2, 0.7, -0.1])
    assert np.allclose(f.bodies['calf'].orientation, world_to_motive(*_poses()['calf'])[1])
    # the thigh hangs 0.105 m below the base origin: lower in Motive Y
    assert np.isclose(f.bodies['base'].position[1] - f.bodies['thigh'].position[1], 0.105)
    assert np.isclose(f.bodies['thigh'].position[1] - f.bodies['calf'].position[1], 0.25)
    # world -y is Motive +z
    assert np.isclose(f.bodies['thigh'].position[2] - f.bodies['base'].position[2], 0.235)
    assert all(b.tracked for b in f.bodies.values())


def test_position_and_orientation_noise_statistics():
    sp, so = 0.002, 0.01
    m = VirtualMocap(MocapConfig(position_noise=sp, orientation_noise=so, seed=7))
    clean = VirtualMocap(MocapConfig())
    dp, dr = [], []
    for k in range(3000):
        t = k / 120
        f, c = m.capture(t, _poses()), clean.capture(t, _poses())
        b, cb = f.bodies['calf'], c.bodies['calf']
        dp.append(np.subtract(b.position, cb.position))
        dr.append(_rotvec_of(quat_mul(_quat_conj(cb.orientation), b.orientation)))
    dp, dr = np.array(dp), np.array(dr)
    assert np.allclose(dp.mean(axis=0), 0, atol=4 * sp / math.sqrt(3000))
    assert np.allclose(dp.std(axis=0), sp, rtol=0.08)
    assert np.allclose(dr.std(axis=0), so, rtol=0.08)


@pytest.mark.parametrize('p,burst', [(0.05, 1.0), (0.02, 4.0)])
def test_drop_rate_and_burst_length(p, burst):
    m = VirtualMocap(MocapConfig(drop_probability=p, drop_burst_mean=burst, seed=3))
    n = 40000
    lost = np.array([m.capture(k / 120, _poses()) is None for k in range(n)])
    expected = p * burst / (p * burst + 1 - p)
    assert m.dropped == lost.sum()
    assert abs(lost.mean() - expected) < 5 * math.sqrt(expected * burst / n)
    edges = np.flatnonzero(np.diff(np.r_[0, lost.astype(int), 0]))
    lengths = edges[1::2] - edges[::2]
    # consecutive loss events can merge into one run, so runs are at least `burst` long on average
    assert lengths.mean() == pytest.approx(burst / (1 - p), rel=0.15)


def test_latency_releases_late_but_stamps_capture_time():
    lat = 0.025  # 3 frames at 120 Hz
    m = VirtualMocap(MocapConfig(latency=lat))
    released = []
    for k in range(20):
        t = k / 120
        m.capture(t, _poses())
        for f in m.release(t):
            released.append((t, f))
    assert released, 'no frame was released'
    for t_rel, f in released:
        assert t_rel >= f.capture_time + lat - 1e-9
        assert t_rel - f.capture_time < lat + 1 / 120
    assert [f.frame_number for _, f in released] == list(range(1, len(released) + 1))
    assert m.pending == 20 - len(released) == 3


def test_occlusion_publishes_nan_poses():
    m = VirtualMocap(MocapConfig(occlusion_probability=0.3, seed=11))
    frames = [m.capture(k / 120, _poses()) for k in range(2000)]
    untracked = [b for f in frames for b in f.bodies.values() if not b.tracked]
    assert all(np.isnan(b.position).all() and np.isnan(b.orientation).all() for b in untracked)
    assert len(untracked) == m.occluded
    assert abs(len(untracked) / 6000 - 0.3) < 0.03


def test_seeded_generator_is_reproducible():
    cfg = dict(position_noise=0.001, orientation_noise=0.005, drop_probability=0.1)
    a = VirtualMocap(MocapConfig(seed=5, **cfg))
    b = VirtualMocap(MocapConfig(seed=5, **cfg))
    c = VirtualMocap(MocapConfig(seed=6, **cfg))
    fa = [a.capture(k / 120, _poses()) for k in range(50)]
    fb = [b.capture(k / 120, _poses()) for k in range(50)]
    fc = [c.capture(k / 120, _poses()) for k in range(50)]
    key = lambda fs: [None if f is None else f.bodies['calf'].position for f in fs]  # noqa: E731
    assert key(fa) == key(fb)
    assert key(fa) != key(fc)


@pytest.mark.parametrize(
    'bad',
    [
        dict(rate=0),
        dict(position_noise=-1),
        dict(latency=math.inf),
        dict(drop_probability=1.0),
        dict(drop_burst_mean=0.5),
        dict(base_position=(0, 1)),
    ],
)
def test_invalid_configuration_is_refused(bad):
    with pytest.raises(ValueError, match='virtual mocap'):
        VirtualMocap(MocapConfig(**bad))
