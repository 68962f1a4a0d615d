"""The policy taught by the LTV MPC (equimus_learning.imitate, `equimus train --algo dagger`):
what it observes of the reference's future, the expert and the learner taking turns, the
network fit, and the command's round trip on a small budget."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from equimus_control.controller import Estimate, Preview, Reference
from equimus_control.policy import (
    AHEAD_BLOCKS,
    MLP,
    PREVIEW_LAYOUT,
    PolicyController,
    PolicyCore,
    PolicyIO,
    load_policy,
    mlp_arrays,
    mlp_from_arrays,
)
from equimus_control.reference import PREVIEW_S, preview_samples
from equimus_description.leg import load_leg
from equimus_description.statics import StaticParams
from equimus_learning.env import EpisodeReference

IO = PolicyIO(PREVIEW_LAYOUT, min_regulated_kpa=6.0)
PARAMS = StaticParams.from_leg(load_leg())


def _picker(feature: str) -> MLP:
    """A linear network whose action is the named feature pair (hip, knee) as it is."""
    W = np.zeros((len(PREVIEW_LAYOUT), 2))
    i = PREVIEW_LAYOUT.index(f'{feature}_hip')
    W[i, 0] = W[i + 1, 1] = 1.0
    return MLP((W,), (np.zeros(2),), output='clip', io=IO)


@pytest.mark.parametrize('block', sorted(AHEAD_BLOCKS))
def test_the_policy_sees_the_reference_preview_ahead(block):
    """The controller hands the reference's own future (the /reference/preview the node sent)
    to the network: the feature is the previewed angle that far ahead minus the estimate."""
    h = AHEAD_BLOCKS[block]
    t = np.linspace(0.0, 0.45, 28)
    q_future = np.stack([1.4 + 0.2 * t, 0.8 - 0.3 * t**2], axis=1)
    preview = Preview(t + 3.0, q_future, np.gradient(q_future, t, axis=0))
    q = np.array([1.38, 0.79])
    ref = Reference(q_future[0], np.zeros(2), preview=preview, stamp=3.0)
    ctrl = PolicyController(_picker(block), PARAMS)
    out = ctrl.step(Estimate(q, np.zeros(2), 3.0), ref, 1 / 120, 50.0)
    want = preview.sample(3.0 + h)[0] - q
    assert np.allclose(out.info['action'], want, atol=1e-12)
    # without its own future the reference is carried along its velocity, at most 0.1 s
    flat = ctrl.step(
        Estimate(q, np.zeros(2), 3.0), Reference(q_future[0], np.zeros(2)), 1 / 120, 50
    )
    assert np.allclose(flat.info['action'], q_future[0] - q)


@given(
    move=st.floats(0.3, 0.8),
    hold=st.floats(0.4, 1.5),
    loop=st.booleans(),
    t0=st.floats(0.0, 10.0),
    t=st.floats(0.0, 20.0),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=100, deadline=None)
def test_an_episodes_preview_is_its_reference_bit_for_bit(move, hold, loop, t0, t, seed):
    """The preview an episode's expert and learner see, taken in one pass, is what calling the
    episode's reference at each of its times gives, to the last bit."""
    poses = np.random.default_rng(seed).uniform(0.2, 1.8, (4, 2))
    ref = EpisodeReference(poses, move, hold, loop, t0)
    times, q, qd = preview_samples(ref, t, PREVIEW_S, 1.0 / 120.0)
    for i, x in enumerate(times):
        a, b = ref(float(x))
        np.testing.assert_array_equal(q[i], a)
        np.testing.assert_array_equal(qd[i], b)


def test_a_layout_with_preview_needs_the_future_and_keeps_its_settings_in_the_file():
    core = PolicyCore(IO, PARAMS, 1)
    with pytest.raises(ValueError, match='ahead'):
        core.observe([1.4, 0.8], [0, 0], [1.4, 0.8], [0, 0], 1 / 120, 50.0)
    back = mlp_from_arrays(mlp_arrays(_picker('err_100ms')), 'test')
    assert back.io == IO and back.io.ahead == (0.05, 0.1, 0.2, 0.3)
    old = mlp_arrays(_picker('err'))
    del old['io_min_regulated_kpa']  # a file written before the setting existed
    assert mlp_from_arrays(old, 'test').io.min_regulated_kpa == 0.0


def test_low_commands_are_modulated_as_the_mpc_sends_them():
    """3 kPa asked: the valves get 0 or 6 kPa (below 6 they would vent), 3 on average."""
    core = PolicyCore(IO, PARAMS, 1)
    a = np.full((1, 2), 3.0 / 25.0 - 1.0)  # 3 kPa with p_max 50
    sent = np.array([core.command(a, 50.0)[0] for _ in range(120)])
    assert set(np.unique(sent)) == {0.0, 6.0}
    assert np.allclose(sent.mean(axis=0), 3.0, atol=0.06)


def test_the_teacher_labels_every_state_and_sends_the_learners_command():
    """With β = 0 the learner drives: its command goes out, the expert labels the state and is
    told what went out (its observer and ramp start from it)."""
    from equimus_control.ltv_mpc import LTVMPC, LTVMPCConfig
    from equimus_description.dynamics import DynamicParams, LegDynamics
    from equimus_learning.imitate import Teacher

    leg = load_leg()
    expert = LTVMPC(LegDynamics(DynamicParams.from_leg(leg)), LTVMPCConfig(), leg.valve)
    learner = MLP((np.zeros((len(PREVIEW_LAYOUT), 2)),), (np.zeros(2),), output='clip', io=IO)
    teacher = Teacher(expert, PolicyCore(IO, PARAMS, 1), learner, 0.0, np.random.default_rng(0))
    q = np.array([1.4, 0.8])
    ref = Reference(q + 0.1, np.zeros(2))
    for k in range(5):
        out = teacher.step(Estimate(q, np.zeros(2), k / 120), ref, 1 / 120, 50.0)
        assert np.array_equal(out.pressures, [25.0, 25.0])  # action 0 → p_max / 2
        assert np.array_equal(expert.u_last, [25.0, 25.0])
    labels = np.array(teacher.labels)
    assert labels.shape == (5, 2) and len(teacher.obs) == 5
    assert not np.allclose(labels, 0.0)  # the expert's own answer, not the learner's
    teacher.beta = 1.0  # the expert drives
    out = teacher.step(Estimate(q, np.zeros(2), 5 / 120), ref, 1 / 120, 50.0)
    assert np.array_equal(teacher.core.u_prev[0], out.pressures)


def test_validation_s_learner_sends_what_the_teacher_at_beta_0_sends():
    """Validation episodes run the learner alone, without the expert's labels: cycle by cycle
    its commands are the Teacher's at β = 0, bit for bit (the figures each iteration reports
    do not change), low commands modulated and a reset included."""
    from equimus_control.ltv_mpc import LTVMPC, LTVMPCConfig
    from equimus_description.dynamics import DynamicParams, LegDynamics
    from equimus_learning.imitate import Learner, Teacher

    leg = load_leg()
    rng = np.random.default_rng(4)
    W = rng.normal(0.0, 0.3, (len(PREVIEW_LAYOUT), 2))
    mlp = MLP((W,), (np.array([-0.8, -0.9]),), output='clip', io=IO)
    expert = LTVMPC(LegDynamics(DynamicParams.from_leg(leg)), LTVMPCConfig(), leg.valve)
    teacher = Teacher(expert, PolicyCore(IO, PARAMS, 1), mlp, 0.0, np.random.default_rng(0))
    learner = Learner(PolicyCore(IO, PARAMS, 1), mlp)
    sent = []
    for k in range(40):
        if k == 20:
            teacher.reset()
            learner.reset()
        t = k / 120
        q = np.array([1.4 + 0.1 * np.sin(3 * t), 0.8 + 0.05 * np.cos(5 * t)])
        preview = Preview(
            t + np.linspace(0.0, 0.45, 28), np.tile(q + 0.1, (28, 1)), np.zeros((28, 2))
        )
        ref = Reference(q + 0.1, np.zeros(2), preview=preview, stamp=t)
        a = teacher.step(Estimate(q, np.zeros(2), t), ref, 1 / 120, 50.0)
        b = learner.step(Estimate(q, np.zeros(2), t), ref, 1 / 120, 50.0)
        assert np.array_equal(a.pressures, b.pressures) and np.array_equal(a.saturated, b.saturated)
        sent.append(b.pressures)
    assert len({tuple(u) for u in sent}) > 5  # the network's answer moved with the state
    assert not learner.labels and len(teacher.labels) == 40


def test_the_fit_learns_a_smooth_map():
    from equimus_learning.imitate import fit_mlp

    rng = np.random.default_rng(1)
    X = rng.normal(0.0, 1.0, (4000, len(PREVIEW_LAYOUT)))
    A = rng.normal(0.0, 0.5, (len(PREVIEW_LAYOUT), 2))
    Y = np.tanh(X @ A) * 0.9
    mlp, loss = fit_mlp(X, Y, IO, (32,), 30, 256, 3e-3, rng)
    assert loss < 0.05 * np.mean(np.var(Y, axis=0)), loss
    Xt = rng.normal(0.0, 1.0, (500, len(PREVIEW_LAYOUT)))
    held_out = np.mean((mlp(Xt) - np.tanh(Xt @ A) * 0.9) ** 2)
    assert held_out < 0.1 * np.mean(np.var(Y, axis=0)), held_out


def test_equimus_train_dagger_round_trip(tmp_path):
    """Two iterations of two short episodes: the file loads as a controller's policy, the second
    iteration let the learner drive half the time, and the network explains the expert's
    labels far better than their mean does."""
    from equimus_learning.cli import main

    rc = main(
        ['train', '--algo', 'dagger', '--iterations', '2', '--episodes', '2', '--workers', '1']
        + ['--seed', '3', '--out', str(tmp_path)]
    )
    assert rc == 0
    mlp = load_policy(tmp_path / 'policy.npz')
    assert mlp.io.layout == PREVIEW_LAYOUT and mlp.io.min_regulated_kpa == 6.0
    with np.load(tmp_path / 'policy.npz') as f:
        assert str(f['meta_algo']) == 'dagger' and str(f['meta_expert']) == 'ltv_mpc'
    log = json.loads((tmp_path / 'dagger.json').read_text())
    its = log['iterations']
    assert [it['beta'] for it in its] == [1.0, 0.5]
    assert its[1]['samples'] == 2 * its[0]['samples'] > 0
    for it in its:
        assert it['loss'] < 0.5 * it['label_variance'], it
        assert set(it['validation_rmse']) == {'triangle', 'steps'}


def test_bad_options_are_refused_without_a_traceback(tmp_path, capsys):
    from equimus_learning.cli import main

    rc = main(['train', '--algo', 'dagger', '--randomize', str(tmp_path / 'none.yaml')])
    assert rc == 2
    assert 'no such file' in capsys.readouterr().err
    assert main(['train', '--algo', 'dagger', '--iterations', '0', '--out', str(tmp_path)]) == 2


@pytest.mark.parametrize('which', ['vector', 'single'])
def test_the_environments_show_a_previewing_policy_the_references_future(which):
    """A policy of this layout can also be run (and trained further) in the Gymnasium
    environments: their err_300ms is the episode reference 0.3 s on minus the estimate."""
    from equimus_learning.env import TrackEnv
    from equimus_learning.vector import VectorTrackEnv

    env: object
    if which == 'vector':
        env = VectorTrackEnv(num_envs=3, reference='triangle', io=IO)
    else:
        env = TrackEnv(reference='triangle', io=IO)
    obs, _ = env.reset(seed=4)
    i = PREVIEW_LAYOUT.index('err_300ms_hip')
    j = PREVIEW_LAYOUT.index('q_hip')
    for _ in range(30):
        action = np.zeros((3, 2)) if which == 'vector' else np.zeros(2)
        obs, *_ = env.step(action)
    obs = np.atleast_2d(obs)
    if which == 'vector':
        t = env.k * (1 / 120)
        future = env._reference(t + 0.3)[0]
    else:
        future = np.atleast_2d(env.ref(env.t + 0.3)[0])
    assert np.allclose(obs[:, i : i + 2], future - obs[:, j : j + 2], atol=1e-9)
    env.close()


def test_a_negative_loop_delay_is_refused():
    import pytest

    from equimus_learning.imitate import ImitateConfig

    with pytest.raises(ValueError, match='delay_frames'):
        ImitateConfig(delay_frames=-1)
