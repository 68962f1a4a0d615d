"""The batched vector environment follows the single environment (the sim graph's objects)."""

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

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
    a = VectorTrackEnv(num_envs=4, episode_s=0.1, autoreset_mode=AutoresetMode.SAME_STEP)
    b = VectorTrackEnv(num_envs=4, episode_s=0.1, autoreset_mode=AutoresetMode.SAME_STEP)
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
            assert tra.all() and info['_final_obs'].all() and info['final_obs'][0].shape == (12,)
            assert np.array_equal(a.k, np.zeros(4))


def _run(vec, seed, actions):
    obs, _ = vec.reset(seed=seed)
    out = [np.column_stack([obs, np.zeros(len(obs))])]
    for act in actions:
        obs, r, term, trunc, _ = vec.step(act)
        out.append(np.column_stack([obs, r]))
    return np.stack(out)


def test_seed_lists_seed_each_env_on_its_own():
    """Env i with seed s runs the same episode whatever the other envs and their seeds are;
    an int seed s seeds env i with s + i (Gymnasium's convention)."""
    acts = np.random.default_rng(2).uniform(-1, 1, (20, 3, 2))
    three = _run(VectorTrackEnv(num_envs=3, drop_probability=0.1), [7, 8, 9], acts)
    alone = _run(VectorTrackEnv(num_envs=1, drop_probability=0.1), [8], acts[:, 1:2])
    assert np.array_equal(three[:, 1], alone[:, 0])
    as_int = _run(VectorTrackEnv(num_envs=3, drop_probability=0.1), 7, acts)
    assert np.array_equal(as_int, three)
    other = _run(VectorTrackEnv(num_envs=3, drop_probability=0.1), [7, 99, 9], acts)
    assert np.array_equal(other[:, [0, 2]], three[:, [0, 2]])
    assert not np.array_equal(other[:, 1], three[:, 1])
    with pytest.raises(ValueError, match='2 seeds for 3'):
        VectorTrackEnv(num_envs=3).reset(seed=[1, 2])


def test_reset_mask_resets_only_the_masked_envs():
    vec = VectorTrackEnv(num_envs=3)
    first, _ = vec.reset(seed=[1, 2, 3])
    for _ in range(30):
        moved, *_ = vec.step(np.zeros((3, 2)))
    mask = np.array([False, True, False])
    obs, info = vec.reset(seed=[None, 2, None], options={'reset_mask': mask})
    assert info == {}
    assert np.array_equal(obs[1], first[1])  # env 1 restarted with its seed
    assert np.array_equal(obs[[0, 2]], moved[[0, 2]])  # the others untouched
    assert np.array_equal(vec.k, [30, 0, 30])
    with pytest.raises(ValueError, match='reset_mask'):
        vec.reset(options={'reset_mask': np.zeros(3, bool)})
    with pytest.raises(ValueError, match="'reference' not supported"):
        vec.reset(options={'reference': 'steps'})


def test_info_has_the_single_envs_keys_with_masks():
    single = TrackEnv()
    single.reset(seed=0)
    keys = set(single.step(np.zeros(2))[4])
    vec = VectorTrackEnv(num_envs=3)
    vec.reset(seed=0)
    _, _, _, _, info = vec.step(np.zeros((3, 2)))
    assert {k for k in info if not k.startswith('_')} == keys
    for k in keys:
        assert info[k].shape[0] == 3 and info[f'_{k}'].all()
    assert np.allclose(info['q'], vec.state[:, 1:][:, vec.lm.qpos_idx])


@pytest.mark.parametrize('mode', [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_autoreset_is_stated_and_the_same_in_every_vectorisation_mode(mode):
    """The batched env and Gymnasium's sync vectorisation of TrackEnv: the same autoreset mode by
    default, and with either mode the same done/reset pattern and the same info layout."""
    import gymnasium as gym

    import equimus_learning  # noqa: F401  (registers the ids)

    default_sync = gym.make_vec('equimus/Track-v0', num_envs=2, vectorization_mode='sync')
    default_vec = gym.make_vec('equimus/Track-v0', num_envs=2)
    assert default_vec.metadata['autoreset_mode'] == default_sync.metadata['autoreset_mode']
    sync = gym.make_vec(
        'equimus/Track-v0',
        num_envs=2,
        vectorization_mode='sync',
        max_episode_steps=4,
        vector_kwargs={'autoreset_mode': mode},
    )
    vec = gym.make_vec('equimus/Track-v0', num_envs=2, max_episode_steps=4, autoreset_mode=mode)
    assert isinstance(vec.unwrapped, VectorTrackEnv)
    assert sync.metadata['autoreset_mode'] == vec.metadata['autoreset_mode'] == mode

    def layout(info):
        return {
            k: (v.dtype, v.shape) if hasattr(v, 'dtype') else sorted(v) for k, v in info.items()
        }

    sync.reset(seed=0)
    vec.reset(seed=0)
    for _ in range(9):
        a = sync.step(np.zeros((2, 2)))
        b = vec.step(np.zeros((2, 2)))
        assert np.array_equal(a[2], b[2]) and np.array_equal(a[3], b[3])
        assert np.array_equal(a[1] == 0, b[1] == 0)  # NEXT_STEP: the reset step pays 0
        assert layout(a[4]) == layout(b[4])
    sync.close()
    vec.close()


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
