"""The residual policy on the PID: what it observes and commands (PolicyIO, PolicyCore), its file,
the environments it trains in (randomised legs, starts at rest), and `equimus train`'s options
for it. The shipped policy's own tests are in tests/learning/test_shipped_policy.py."""

import pathlib

import numpy as np
import pytest

from equimus_control.controller import Estimate, Reference
from equimus_control.pid import PIDController, PIDGains
from equimus_control.policy import (
    MLP,
    RESIDUAL_LAYOUT,
    PolicyController,
    PolicyIO,
    load_policy,
    save_mlp,
)
from equimus_description.config import ConfigError
from equimus_description.leg import load_leg
from equimus_description.statics import StaticParams
from equimus_learning.env import TrackEnv
from equimus_learning.randomize import KEYS, identified
from equimus_learning.vector import VectorTrackEnv

# the checkout's root: `colcon test` runs each package's tests from its own folder
REPO = pathlib.Path(__file__).resolve().parents[2]

PARAMS = StaticParams.from_leg(load_leg())
GAINS = PIDGains(kp=(5.3, 20.0), ki=(3.6, 2.1), kd=(0.16, 0.027))
IO = PolicyIO(RESIDUAL_LAYOUT, 'pid', GAINS, residual_kpa=10.0)


def zero_mlp(io: PolicyIO, bias=(0.0, 0.0)) -> MLP:
    """A network whose action is `bias` whatever it sees."""
    n = len(io.layout)
    zeros = (np.zeros((n, 4)), np.zeros((4, 2)))
    return MLP(zeros, (np.zeros(4), np.asarray(bias, float)), output='clip', io=io)


def test_a_zero_residual_is_the_pid_and_a_residual_adds_its_kpa(tmp_path):
    save_mlp(tmp_path / 'r.npz', zero_mlp(IO, (0.0, 0.5)))
    back = load_policy(tmp_path / 'r.npz')
    assert back.io == IO  # gains, residual range and valve model come back from the file
    zero, half, pid = (
        PolicyController(zero_mlp(IO), PARAMS),
        PolicyController(back, PARAMS),
        PIDController(PARAMS, GAINS),
    )
    rng = np.random.default_rng(3)
    inside = 0
    for _ in range(50):
        est = Estimate(rng.uniform([1.2, 0.3], [1.7, 1.0]), rng.normal(0, 0.5, 2), 0.0)
        ref = Reference(est.q + rng.normal(0, 0.05, 2), rng.normal(0, 0.3, 2))
        p = pid.step(est, ref, 1 / 120, 45.0).pressures
        assert np.allclose(zero.step(est, ref, 1 / 120, 45.0).pressures, p, atol=1e-9)
        out = half.step(est, ref, 1 / 120, 45.0)
        assert np.allclose(out.pressures, np.clip(p + [0.0, 5.0], 0.0, 45.0), atol=1e-9)
        inside += int(p[1] + 5.0 < 45.0)
    assert inside > 10


def test_policy_files_refuse_what_they_cannot_run(tmp_path):
    with pytest.raises(ConfigError, match='need a base controller'):
        PolicyIO(RESIDUAL_LAYOUT, 'none')
    with pytest.raises(ConfigError, match='residual_kpa'):
        PolicyIO(RESIDUAL_LAYOUT, 'pid', residual_kpa=0.0)
    save_mlp(tmp_path / 'r.npz', zero_mlp(IO))
    data = dict(np.load(tmp_path / 'r.npz'))
    data['io_base'] = np.array('lqr')
    np.savez(tmp_path / 'bad.npz', **data)
    with pytest.raises(ConfigError, match='policy base'):
        load_policy(tmp_path / 'bad.npz')
    with pytest.raises(ConfigError, match='static model'):
        PolicyController(zero_mlp(IO), None)


def test_randomisation_spans_both_identified_legs():
    rand = identified(str(REPO / 'config/leg_fit.yaml'))
    ivs = {k: (min(a, b), max(a, b)) for k, a, b in rand.intervals}
    assert set(ivs) == set(KEYS)
    nominal = load_leg()
    fit = load_leg(overrides=str(REPO / 'config/leg_fit.yaml'))
    assert ivs['valve.dead_time'][0] <= nominal.valve.dead_time <= ivs['valve.dead_time'][1]
    assert ivs['valve.dead_time'][0] <= fit.valve.dead_time <= ivs['valve.dead_time'][1]
    assert fit.valve.dead_time > 0.05  # a real dead time (the fit's: 63 ms), inside
    for side in ('maa', 'baa'):
        k = f'actuators.{side}.k'
        for leg in (nominal, fit):
            assert ivs[k][0] <= leg.actuators[side].k <= ivs[k][1]
    rng = np.random.default_rng(0)
    draws = [rand.sample(rng) for _ in range(200)]
    for d in draws:
        assert all(ivs[k][0] - 1e-12 <= v <= ivs[k][1] + 1e-12 for k, v in d.items())
        # an actuator's stiffness, area and rest length move together along their intervals
        for side in ('maa', 'baa'):
            u = [
                (d[k] - a) / (b - a)
                for k, a, b in rand.intervals
                if k.startswith(f'actuators.{side}.') and k.split('.')[-1] in ('k', 'area', 'l0')
            ]
            assert np.ptp(u) < 1e-9
    # the BAA's damping and its growth with pressure move together: a leg never has neither
    c = np.array([d['actuators.baa.c'] for d in draws])
    c_p = np.array([d['actuators.baa.c_per_kpa'] for d in draws])
    assert np.corrcoef(c, c_p)[0, 1] < -0.999
    assert c_p.max() > 0.9 * fit.actuators['baa'].c_per_kpa
    assert c.max() > 0.9 * nominal.actuators['baa'].c  # Table V's constant damping
    dead = np.array([d['valve.dead_time'] for d in draws])
    assert dead.min() < 0.02 and dead.max() > 0.8 * fit.valve.dead_time  # both ends are drawn


def test_vector_env_runs_a_different_leg_per_episode():
    rand = identified(str(REPO / 'config/leg_fit.yaml'), pool=4)
    vec = VectorTrackEnv(num_envs=6, reference='steps', io=IO, randomize=rand, physics_dt=1 / 600)
    obs, _ = vec.reset(seed=0)
    assert obs.shape == (6, len(RESIDUAL_LAYOUT))
    assert len(set(vec.variant.tolist())) > 1
    delays = {int(v.delay_steps) for v in vec._variants}
    assert len(delays) > 1  # the valve's dead time differs between the legs
    for _ in range(60):
        obs, r, term, trunc, _ = vec.step(np.zeros((6, 2)))
    assert np.all(np.isfinite(obs)) and not term.any()
    vec.close()


@pytest.mark.parametrize('env_cls', [VectorTrackEnv, TrackEnv])
def test_rest_start_is_the_sim_graphs_start(env_cls):
    """rest_start = 1: at rest at 0 kPa with the reference from its beginning, as the sim graph
    starts; 0: settled at the reference."""
    from equimus_sim.leg_model import LegModel

    kw = {'num_envs': 2} if env_cls is VectorTrackEnv else {}
    rest = LegModel(load_leg().with_timestep(1 / 1200)).static_equilibrium(np.zeros(2))
    for p, far in ((1.0, True), (0.0, False)):
        env = env_cls(reference='triangle', rest_start=p, random_start=True, **kw)
        env.reset(seed=1)
        if env_cls is VectorTrackEnv:
            q = env.state[0, env._qpos0 :][env.lm.qpos_idx]
            p_valve, ref = env.p_valve[0], env._reference(np.zeros(2))[0][0]
        else:
            q, p_valve, ref = env.sim.joint_state()[0], env.sim.pressures, env.ref(0.0)[0]
        if far:
            assert np.allclose(q, rest, atol=1e-6) and np.allclose(p_valve, 0.0)
            assert np.abs(ref - q).max() > 0.1
        else:
            assert np.abs(ref - q).max() < 1e-6 and p_valve.max() > 1.0
        env.close()
    with pytest.raises(ValueError, match='rest_start'):
        TrackEnv(rest_start=1.5)


def test_train_options_make_the_residual_randomised_run(tmp_path):
    """`equimus train --algo ppo` options → PPOConfig (no training here)."""
    from equimus_learning.cli import build_parser, ppo_config

    ns = build_parser().parse_args(
        [
            'train',
            '--residual',
            str(REPO / 'config/tuned_pid.yaml'),
            '--residual-kpa',
            '12',
            '--randomize',
            str(REPO / 'config/leg_fit.yaml'),
            '--reference',
            'mix',
            '--substeps',
            '5',
            '--rest-start',
            '0.25',
            '--minutes',
            '30',
        ]
    )
    cfg = ppo_config(ns)
    assert cfg.io.base == 'pid' and cfg.io.layout == RESIDUAL_LAYOUT
    assert cfg.io.residual_kpa == 12.0 and cfg.io.gains.kp == (5.302, 20.0)
    assert cfg.minutes == 30.0 and cfg.reference == 'mix'
    assert cfg.env['physics_dt'] == pytest.approx(1 / 600)
    assert cfg.env['rest_start'] == 0.25 and cfg.env['random_start']
    assert cfg.env['randomize'].intervals == identified(str(REPO / 'config/leg_fit.yaml')).intervals
    ns.randomize = str(tmp_path / 'missing.yaml')
    with pytest.raises(FileNotFoundError):
        ppo_config(ns)


def test_train_with_a_bad_residual_file_exits_2_in_one_line(tmp_path, capsys):
    from equimus_learning.cli import main

    bad = tmp_path / 'gains.yaml'
    bad.write_text('estimator: {}\n')
    rc = main(['train', '--residual', str(bad), '--out', str(tmp_path / 'out')])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and 'no controller gains' in err and len(err.splitlines()) == 1, err
