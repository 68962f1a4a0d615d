"""The Gymnasium environments: the checker, exact seeding, and the sim graph's safety layer."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import equimus_learning
from equimus_hw.valve.config import DriverConfig


@pytest.mark.parametrize('env_id', equimus_learning.ENV_IDS)
def test_check_env_passes_with_every_render_mode(env_id):
    """The checker also makes the env in each of metadata['render_modes'] and renders it:
    'rgb_array' always (offscreen), 'human' where a display exists."""
    env = gym.make(env_id)
    assert 'rgb_array' in env.metadata['render_modes']
    check_env(env.unwrapped, skip_render_check=False)
    env.close()
    env = gym.make(env_id, render_mode='rgb_array')
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (480, 640, 3) and frame.dtype == np.uint8
    assert frame.std() > 5  # the leg is drawn, not a blank picture
    env.close()


def test_record_video_writes_an_mp4(tmp_path):
    from gymnasium.wrappers import RecordVideo

    env = RecordVideo(
        gym.make('equimus/TrackTriangle-v0', render_mode='rgb_array', max_episode_steps=20),
        str(tmp_path),
        episode_trigger=lambda ep: True,
        disable_logger=True,
    )
    env.reset(seed=0)
    done = False
    while not done:
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        done = term or trunc
    env.close()
    (video,) = tmp_path.glob('*.mp4')
    assert video.stat().st_size > 1000


def test_human_mode_without_a_display_says_what_to_do(monkeypatch):
    from equimus_sim.render import RenderError

    monkeypatch.delenv('DISPLAY', raising=False)
    monkeypatch.delenv('WAYLAND_DISPLAY', raising=False)
    from equimus_learning.env import TrackEnv

    with pytest.raises(RenderError, match="render_mode='rgb_array'"):
        TrackEnv(render_mode='human')


def test_time_limit_is_in_the_spec_and_agrees_with_the_episode():
    env = gym.make('equimus/Track-v0')
    assert env.spec.max_episode_steps == 480
    env.reset(seed=0)
    steps, trunc = 0, False
    while not trunc:
        _, _, term, trunc, _ = env.step(np.zeros(2))
        assert not term
        steps += 1
    assert steps == 480
    long = gym.make('equimus/Track-v0', max_episode_steps=500)
    long.reset(seed=0)
    for _ in range(499):
        assert not long.step(np.zeros(2))[3]  # the env does not cut it short at its 480
    assert long.step(np.zeros(2))[3]
    clash = gym.make('equimus/Track-v0', episode_s=1.0)
    with pytest.raises(ValueError, match='pass max_episode_steps=120 instead of episode_s'):
        clash.reset(seed=0)


def test_reset_options_are_honoured_or_refused():
    env = gym.make('equimus/Track-v0').unwrapped
    env.reset(seed=3, options={'reference': 'triangle'})
    tri = gym.make('equimus/TrackTriangle-v0').unwrapped
    tri.reset(seed=3)
    assert np.allclose(env.q_ref, tri.q_ref)
    with pytest.raises(ValueError, match="'speed' not supported.*'reference'"):
        env.reset(options={'speed': 2})
    kick = gym.make('equimus/Kick-v0').unwrapped
    kick.reset(seed=0, options={'target': -1.0})
    assert kick.target == -1.0
    with pytest.raises(ValueError, match='not supported'):
        kick.reset(options={'reference': 'triangle'})


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
    assert obs[8] > 0.05  # the ball moves along +y, as the mocap saw it
    assert abs(obs[6] - env.ball_state()[0][0]) < 0.005  # its position: mocap noise 0.3 mm
    assert info['ball_velocity'][0] > 0.05 and info['ball_progress'] > 0.05
    idle = gym.make('equimus/Kick-v0', target=1.0).unwrapped
    idle.reset(seed=0)
    rest = sum(idle.step(np.zeros(2))[1] for _ in range(240))
    assert total > rest + 10.0


def test_kick_ball_is_a_mocap_rigid_body_held_through_drops():
    env = gym.make('equimus/Kick-v0', target=1.0, drop_probability=0.5).unwrapped
    env.reset(seed=1)
    assert 'ball' in env.rig.mocap.bodies
    seen = []
    for _ in range(60):
        obs, *_ = env.step(np.array([1.0, -1.0]))
        seen.append((env.rig.frame is None, obs[6:8].copy()))
    held = [i for i in range(1, 60) if seen[i][0]]
    assert held  # some frames dropped ...
    assert all(np.array_equal(seen[i][1], seen[i - 1][1]) for i in held)  # ... and held


def test_authors_reward_is_an_option():
    from equimus_learning.kick import authors_reward

    env = gym.make('equimus/Kick-v0', target=1.0, reward='authors').unwrapped
    env.reset(seed=0)
    _, r, *_ = env.step(np.zeros(2))
    dist = env._foot_ball_distance()[0]
    vel = env.ball_state()[1]
    assert r == pytest.approx(authors_reward(dist, False, vel, 1.0, env.u_prev), abs=1e-9)
    assert authors_reward(0.0, True, np.array([1.0, 0.0]), 1.0, np.zeros(2)) == pytest.approx(10.0)
    with pytest.raises(ValueError, match='shaped, authors'):
        gym.make('equimus/Kick-v0', reward='mine')
