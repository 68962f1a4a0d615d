"""The batched vector environment follows the single environment (the sim graph's objects)."""

import numpy as np
import pytest

from equimus_control.policy import load_policy, save_mlp
from equimus_hw.valve.config import DriverConfig
from equimus_learning.env import TrackEnv
from equimus_learning.vector import VectorTrackEnv


@pytest.fixture(scope='module')
def policy(tmp_path_factory):
    from equimus_learning.train import DistilConfig, distil_pid

    path = tmp_path_factory.mktemp('vec') / 'p.npz'
    save_mlp(path, distil_pid(DistilConfig(episodes=6)))
    return load_policy(path)


def test_vector_env_tracks_like_the_single_env(policy):
    vec = VectorTrackEnv(num_envs=3, reference='triangle')
    obs, _ = vec.reset(seed=0)
    env = TrackEnv(reference='triangle')
    o, _ = env.reset(seed=0)
    qv, qs, rv, rs = [], [], 0.0, 0.0
    for _ in range(470):  # the episode is 480 periods (4 s)
        obs, r, term, trunc, _ = vec.step(policy(obs))
        o, r1, term1, trunc1, info = env.step(policy(o))
        assert not (term.any() or term1)
        qv.append(vec.state[:, 1:][:, vec.lm.qpos_idx])
        qs.append(info['q'])
        rv, rs = rv + r, rs + r1
    qv, qs = np.array(qv), np.array(qs)
    diff = np.sqrt(np.mean((qv - qs[:, None, :]) ** 2, axis=0))
    assert np.all(diff < 0.01), diff  # only the noise realisations differ
    assert np.ptp(qs, axis=0).max() > 0.1  # the leg really moved round the triangle
    assert np.allclose(rv, rs, rtol=0.15), (rv, rs)


def test_seeding_autoreset_and_slew():
    a = VectorTrackEnv(num_envs=4, episode_s=0.1)
    b = VectorTrackEnv(num_envs=4, episode_s=0.1)
    oa, _ = a.reset(seed=5)
    ob, _ = b.reset(seed=5)
    assert np.array_equal(oa, ob)
    slew = DriverConfig().slew_rate_kpa_s / 120.0
    actions = np.random.default_rng(1).uniform(-1, 1, (12, 4, 2))
    for k, act in enumerate(actions):
        before = a.out.copy()
        oa, ra, ta, tra, info = a.step(act)
        ob, rb, tb, trb, _ = b.step(act)
        assert np.array_equal(oa, ob) and np.array_equal(ra, rb)
        if k + 1 < 12 and not tra.any():
            assert np.all(np.abs(a.out - before) <= slew + 1e-9)
        if k == 11:  # 12 periods = 0.1 s: every env truncated, reset in the same step
            assert tra.all() and 'final_obs' in info
            assert np.array_equal(a.k, np.zeros(4))


def test_make_vec_builds_the_batched_env():
    import gymnasium as gym

    import equimus_learning  # noqa: F401  (registers the ids)

    vec = gym.make_vec('equimus/TrackSteps-v0', num_envs=3, vectorization_mode='vector_entry_point')
    assert isinstance(vec.unwrapped, VectorTrackEnv)
    assert vec.unwrapped.cfg.reference == 'steps'
    obs, _ = vec.reset(seed=0)
    assert obs.shape == (3, 12)
    vec.close()


@pytest.mark.parametrize('env_cls', [VectorTrackEnv, TrackEnv])
def test_environments_run_the_leg_override_valve_model(env_cls, tmp_path):
    """With a leg override file (TrackConfig.leg_overrides) the environments step its valve
    model: after a step of the action the valve pressure stays put for the dead time, then
    fills; with the default leg (the lag) it moves in the first period."""
    import yaml

    fit = tmp_path / 'fit.yaml'
    dead = 0.1  # s: 12 periods of 1/120 s
    fit.write_text(
        yaml.safe_dump({'parameters': {'valve.dead_time': dead, 'valve.fill_time_constant': 0.2}})
    )

    def valve_after_step(overrides):
        kw = {'num_envs': 3} if env_cls is VectorTrackEnv else {}
        env = env_cls(reference='steps', leg_overrides=str(overrides), **kw)
        env.reset(seed=0)
        pressures = []
        for _ in range(20):
            env.step(np.ones((3, 2)) if env_cls is VectorTrackEnv else np.ones(2))
            p = env.p_valve[0] if env_cls is VectorTrackEnv else env.sim.pressures
            pressures.append(p.copy())
        return np.array(pressures)

    p = valve_after_step(fit)
    still = int(dead * 120) - 1  # periods completely inside the dead time
    assert np.allclose(p[:still], p[0]), p[:still]
    assert np.all(p[-1] > p[0] + 1.0), p  # filling 8 periods after the dead time
    lag = valve_after_step('')
    assert np.all(lag[0] != lag[1])
