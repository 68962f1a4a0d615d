"""`equimus train --algo ppo`: a CI-sized PPO run improves on the untrained policy, and its export
runs as the policy controller. Needs the rl extra (stable-baselines3, torch)."""

import numpy as np
import pytest

pytest.importorskip(
    'stable_baselines3',
    reason='the rl extra is not installed (scripts/setup.sh --rl: stable-baselines3, torch)',
)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_short_ppo_run_improves_the_mean_episode_reward(tmp_path):
    from equimus_bringup.cli import main as equimus
    from equimus_control.policy import load_policy
    from equimus_learning.train import evaluate

    rc = equimus(
        [
            'train',
            '--algo',
            'ppo',
            '--steps',
            '20000',
            '--reference',
            'triangle',
            '--out',
            str(tmp_path),
        ]
    )
    assert rc == 0
    trained = load_policy(tmp_path / 'policy.npz')
    untrained = load_policy(tmp_path / 'policy_untrained.npz')
    from_zip = load_policy(tmp_path / 'policy.zip')  # the sb3 file loads as the same network
    x = np.random.default_rng(0).normal(size=(4, 12))
    assert np.allclose(from_zip(x), trained(x))
    seeds = range(3)
    before = evaluate(untrained, 'triangle', seeds)
    after = evaluate(trained, 'triangle', seeds)
    print(f'mean episode return: untrained {before:.1f}, after 20k PPO steps {after:.1f}')
    assert after > before
