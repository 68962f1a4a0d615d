"""The batched environment as a stable-baselines3 VecEnv (equimus_learning.sb3), checked the way
SB3 checks and uses a VecEnv, next to SB3's own DummyVecEnv of the single environment; and the
kick train → evaluate round trip on a tiny budget. Needs the rl extra."""

import numpy as np
import pytest

pytest.importorskip(
    'stable_baselines3',
    reason='the rl extra is not installed (scripts/setup.sh --rl: stable-baselines3, torch)',
)

from gymnasium.vector import AutoresetMode  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.utils import check_for_correct_spaces  # noqa: E402
from stable_baselines3.common.vec_env import VecCheckNan, VecMonitor, VecNormalize  # noqa: E402

from equimus_learning.env import TrackEnv  # noqa: E402
from equimus_learning.sb3 import SB3VecEnv  # noqa: E402
from equimus_learning.vector import VectorTrackEnv  # noqa: E402

STEPS = 12  # episode length of these tests (0.1 s)


def _adapter(n=3, **kw):
    vec = VectorTrackEnv(
        num_envs=n, autoreset_mode=AutoresetMode.SAME_STEP, episode_s=STEPS / 120, **kw
    )
    return SB3VecEnv(vec)


def _dummy(n=3):
    return make_vec_env(TrackEnv, n_envs=n, env_kwargs={'episode_s': STEPS / 120})


@pytest.mark.parametrize('make', [_adapter, _dummy], ids=['SB3VecEnv', 'DummyVecEnv'])
def test_vecenv_contract(make):
    """What SB3's algorithms rely on, for the adapter and for SB3's own DummyVecEnv alike."""
    venv = VecCheckNan(make(), raise_exception=True)  # SB3's NaN/inf check on every step
    check_for_correct_spaces(venv, TrackEnv().observation_space, TrackEnv().action_space)
    assert venv.num_envs == 3
    venv.seed(4)
    first = venv.reset()
    venv.seed(4)
    assert np.array_equal(venv.reset(), first)  # seed() applies at the next reset
    assert first.shape == (3, 12)
    for k in range(STEPS):
        obs, rew, dones, infos = venv.step(np.zeros((3, 2), np.float32))
        assert rew.shape == (3,) and dones.dtype == bool and len(infos) == 3
        if k < STEPS - 1:
            assert not dones.any()
            assert all('terminal_observation' not in i for i in infos)
    assert dones.all()  # every env cut by the time limit, reset in the same step
    for i in range(3):
        assert infos[i]['TimeLimit.truncated'] is True
        assert infos[i]['terminal_observation'].shape == (12,)
        assert not np.array_equal(infos[i]['terminal_observation'], obs[i])  # obs is the reset
    assert venv.get_attr('render_mode') == [None] * 3
    assert venv.env_is_wrapped(VecMonitor) == [False] * 3
    venv.close()


def test_adapter_info_and_wrappers_train_ppo():
    """Per-env infos carry the single env's keys; VecMonitor / VecNormalize / PPO run on it."""
    from stable_baselines3 import PPO

    venv = _adapter(4)
    venv.reset()
    _, _, _, infos = venv.step(np.zeros((4, 2), np.float32))
    single = TrackEnv()
    single.reset(seed=0)
    assert set(infos[0]) == set(single.step(np.zeros(2))[4])
    wrapped = VecNormalize(VecMonitor(_adapter(4)))
    model = PPO('MlpPolicy', wrapped, n_steps=16, batch_size=32, n_epochs=1, device='cpu')
    model.learn(3 * 16 * 4)
    assert model.num_timesteps >= 3 * 16 * 4
    assert len(model.ep_info_buffer) >= 4  # VecMonitor saw the 12-step episodes end


def test_adapter_renders_and_refuses_next_step_mode():
    venv = _adapter(2, render_mode='rgb_array')
    venv.reset()
    (a, b) = venv.get_images()
    assert a.shape == (480, 640, 3) and a.std() > 5
    with pytest.raises(ValueError, match='SAME_STEP'):
        SB3VecEnv(VectorTrackEnv(num_envs=2))


def test_ppo_cli_trains_on_the_batched_env(tmp_path):
    from equimus_bringup.cli import main as equimus
    from equimus_control.policy import load_policy

    rc = equimus(
        ['train', '--algo', 'ppo', '--steps', '2048', '--envs', '32', '--no-progress',
         '--out', str(tmp_path)]
    )  # fmt: skip
    assert rc == 0
    assert load_policy(tmp_path / 'policy.npz')(np.zeros((1, 12))).shape == (1, 2)


def test_kick_train_then_rollout_round_trip(tmp_path, capsys):
    """equimus train --task kick on a tiny budget, then equimus rollout: figures and a video."""
    from equimus_bringup.cli import main as equimus

    rc = equimus(
        ['train', '--task', 'kick', '--steps', '256', '--no-progress', '--out', str(tmp_path)]
    )
    assert rc == 0 and (tmp_path / 'policy.zip').is_file()
    assert (tmp_path / 'vecnormalize.pkl').is_file()
    video = tmp_path / 'kick.mp4'
    rc = equimus(
        ['rollout', '--task', 'kick', '--policy', str(tmp_path / 'policy.zip'), '--episodes',
         '2', '--video-episodes', '1', '--video', str(video)]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    for figure in ('success_rate', 'peak_ball_speed_m_s', 'ball_progress_m'):
        assert figure in out
    assert video.stat().st_size > 1000
    rc = equimus(['rollout', '--task', 'kick', '--policy', str(tmp_path / 'missing.zip')])
    assert rc == 2 and 'does not exist' in capsys.readouterr().err
