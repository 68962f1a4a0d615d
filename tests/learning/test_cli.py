"""`equimus train`: the NumPy path writes a loadable policy; PPO without the rl extra says what to
do and exits 2 (no traceback)."""

import sys

from equimus_bringup.cli import main as equimus
from equimus_control.policy import load_policy


def test_distil_writes_a_policy_the_controller_loads(tmp_path, capsys):
    rc = equimus(['train', '--algo', 'distil', '--episodes', '2', '--out', str(tmp_path)])
    assert rc == 0
    mlp = load_policy(tmp_path / 'policy.npz')
    assert mlp.weights[0].shape[0] == 12
    assert 'controller:=policy policy_file:=' in capsys.readouterr().out


def test_ppo_without_the_rl_extra_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, 'stable_baselines3', None)  # import fails as if missing
    rc = equimus(['train', '--algo', 'ppo', '--steps', '100', '--out', str(tmp_path)])
    assert rc == 2
    err = capsys.readouterr().err
    assert 'scripts/setup.sh --rl' in err and 'Traceback' not in err
