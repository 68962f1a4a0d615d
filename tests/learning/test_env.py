"""The Gymnasium environments: the checker, exact seeding, and the sim graph's safety layer."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import equimus_learning
from equimus_hw.valve.config import DriverConfig


@pytest.mark.parametrize('env_id', equimus_learning.ENV_IDS)
def test_check_env_passes(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def _episode(env, seed, n=150):
    obs, _ = env.reset(seed=seed)
    actions = np.random.default_rng(99).uniform(-1, 1, (n, 2))
    out = [obs]
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        out.append(np.concatenate([obs, [r], env.sim.joint_state()[0]]))
        if term or trunc:
            break
    return np.concatenate(out)


@pytest.mark.parametrize('env_id', ['equimus/Track-v0', 'equimus/Kick-v0'])
def test_identical_seeds_give_identical_episodes(env_id):
    env = gym.make(env_id, drop_probability=0.05).unwrapped
    a = _episode(env, 11)
    b = _episode(env, 11)
    c = _episode(gym.make(env_id, drop_probability=0.05).unwrapped, 11)
    d = _episode(env, 12)
    assert np.array_equal(a, b)
    assert np.array_equal(a, c)
    assert a.shape != d.shape or not np.array_equal(a, d)  # another reference and noise


def test_valves_see_the_safety_filters_slew():
    """A full-range jump of the action reaches the valves at the driver's slew rate only."""
    env = gym.make('equimus/TrackTriangle-v0').unwrapped
    env.reset(seed=0)
    for _ in range(3):
        env.step(np.array([-1.0, -1.0]))
    start = env.sim.command.copy()
    env.step(np.array([1.0, 1.0]))
    slew = DriverConfig().slew_rate_kpa_s / 120.0
    assert np.all(env.sim.command - start <= slew + 0.05)  # + DAC quantisation
    assert np.all(env.sim.command - start > 0.5 * slew)


def test_privileged_observation_extends_the_controllers_view():
    env = gym.make('equimus/Track-v0', privileged=True).unwrapped
    obs, _ = env.reset(seed=1)
    base = gym.make('equimus/Track-v0').unwrapped.reset(seed=1)[0]
    assert obs.shape == (base.shape[0] + 6,)
    assert np.allclose(obs[: base.shape[0]], base)
    assert np.allclose(obs[base.shape[0] : base.shape[0] + 2], env.sim.joint_state()[0])


def test_kick_a_swing_through_the_ball_moves_it_and_pays():
    """Hip forward then back with the knee straight: the foot meets the ball and pushes it."""
    env = gym.make('equimus/Kick-v0', target=1.0).unwrapped
    env.reset(seed=0)
    total, touched = 0.0, False
    for k in range(240):
        a = np.array([1.0, -1.0]) if k < 60 else np.array([-1.0, 1.0])
        obs, r, term, trunc, info = env.step(a)
        total += r
        touched |= info['touched']
        if term or trunc:
            break
    assert touched
    assert obs[8] > 0.05  # the ball moved along +y (relative to the hip)
    assert info['ball_velocity'][0] > 0.05
    idle = gym.make('equimus/Kick-v0', target=1.0).unwrapped
    idle.reset(seed=0)
    rest = sum(idle.step(np.zeros(2))[1] for _ in range(240))
    assert total > rest + 10.0
