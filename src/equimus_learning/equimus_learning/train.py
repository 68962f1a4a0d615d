"""Training policies for `controller:=policy` (`equimus train`).

Two ways, both ending in the NumPy `.npz` policy that `equimus_control.policy` loads:

- `ppo` (the `rl` extra: stable-baselines3 + torch): PPO on the batched tracking environment
  (`VectorTrackEnv` through `equimus_learning.sb3.SB3VecEnv`) with observation normalisation, a
  progress bar and TensorBoard logs; the trained zip is exported to `.npz`
  (`equimus_control.policy.sb3_to_arrays`). `PPOConfig` holds the run: `io` how the policy
  observes and acts (a residual on the tuned PID: `PolicyIO(base='pid')`), `minutes` a wall-clock
  budget, `env` the environment's `TrackConfig` overrides (references, noise, drops, weights,
  `randomize`: the legs drawn per episode, equimus_learning.randomize).
- `distil` (base install, NumPy only, seconds): behaviour cloning of the PID controller into a
  one-hidden-layer network. The hidden layer is a fixed random tanh layer and the output layer is
  the ridge-regression solution on atanh of the PID's actions (closed form, no gradient steps);
  states come from episodes driven by the PID with exploration noise on the executed action, so
  the network also sees states off the PID's own path. It makes a working policy file without
  the RL libraries (the tests use it) and a warm start to compare PPO with.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from equimus_control.controller import Estimate, Reference
from equimus_control.pid import PIDController, PIDGains
from equimus_control.policy import MLP, OBS_SIZE, PolicyIO, kpa_to_action, save_mlp

from .env import TrackEnv

Progress = Callable[[str], None]


class RLExtraMissing(RuntimeError):
    """stable-baselines3 / torch are not installed (the `rl` extra)."""


@dataclass(frozen=True)
class DistilConfig:
    episodes: int = 12
    hidden: int = 192
    ridge: float = 1e-3
    explore: float = 0.15  # σ of the executed action's noise (actions in [-1, 1])
    reference: str = 'random'
    seed: int = 0


def _pid_action(pid: PIDController, env: TrackEnv) -> np.ndarray:
    e = env.est
    est = Estimate(e.position, e.velocity, env.t)
    out = pid.step(est, Reference(env.q_ref, env.qd_ref), 1.0 / 120.0, env.cfg.p_max)
    return kpa_to_action(out.pressures, env.cfg.p_max)


def distil_pid(
    cfg: DistilConfig | None = None,
    gains: PIDGains | None = None,
    progress: Progress | None = None,
) -> MLP:
    """An MLP imitating the PID controller on the tracking environment (see module docstring)."""
    cfg = cfg or DistilConfig()
    rng = np.random.default_rng(cfg.seed)
    env = TrackEnv(reference=cfg.reference)
    X, Y = [], []
    for ep in range(cfg.episodes):
        obs, _ = env.reset(seed=cfg.seed * 1000 + ep)
        pid = PIDController(env.params, gains)
        noise = cfg.explore * (ep % 3) / 2  # a third of the episodes without noise
        while True:
            target = _pid_action(pid, env)
            X.append(obs)
            Y.append(target)
            act = np.clip(target + rng.normal(0.0, noise, 2), -1, 1) if noise else target
            obs, _, term, trunc, _ = env.step(act)
            if term or trunc:
                break
        if progress:
            progress(f'distil: episode {ep + 1}/{cfg.episodes}, {len(X)} samples')
    x, y = np.asarray(X), np.asarray(Y)
    mean, std = x.mean(axis=0), np.maximum(x.std(axis=0), 1e-3)
    xn = np.clip((x - mean) / std, -10, 10)
    W0 = rng.normal(0.0, 1.0 / np.sqrt(OBS_SIZE), (OBS_SIZE, cfg.hidden))
    b0 = rng.normal(0.0, 0.5, cfg.hidden)
    H = np.tanh(xn @ W0 + b0)
    Ha = np.hstack([H, np.ones((len(H), 1))])
    target = np.arctanh(np.clip(y, -0.995, 0.995))
    A = Ha.T @ Ha + cfg.ridge * len(Ha) * np.eye(Ha.shape[1])
    sol = np.linalg.solve(A, Ha.T @ target)
    return MLP((W0, sol[:-1]), (b0, sol[-1]), 'tanh', mean, std)


def evaluate(policy: Callable[[np.ndarray], np.ndarray], reference: str, seeds: range) -> float:
    """Mean episode return of a deterministic policy on the tracking environment (an `MLP`
    observes and acts as its `PolicyIO` says)."""
    env = TrackEnv(reference=reference, io=getattr(policy, 'io', PolicyIO()))
    returns = []
    for s in seeds:
        obs, _ = env.reset(seed=s)
        total = 0.0
        while True:
            obs, r, term, trunc, _ = env.step(policy(obs))
            total += r
            if term or trunc:
                break
        returns.append(total)
    return float(np.mean(returns))


@dataclass(frozen=True)
class PPOConfig:
    """A PPO run on the batched environment. The defaults are sized for 2 cores: many
    environments and short rollouts (n_envs × n_steps samples per update), few large minibatches,
    so that simulation, not the network update, sets the pace (docs/learning.md)."""

    steps: int = 2_000_000
    n_envs: int = 128
    n_steps: int = 64  # per environment and update
    batch_size: int = 1024
    n_epochs: int = 8
    learning_rate: float = 3e-4
    gamma: float = 0.98
    gae_lambda: float = 0.95
    ent_coef: float = 0.0
    net_arch: tuple[int, ...] = (64, 64)
    log_std_init: float = 0.0  # of the Gaussian's σ per action (actions in [-1, 1])
    nthread: int = 2  # MuJoCo rollout threads
    torch_threads: int = 1  # more: OpenMP's spinning threads take the cores from the rollout
    seed: int = 0
    reference: str = 'random'
    env: dict[str, Any] = field(default_factory=dict)  # TrackConfig overrides
    io: PolicyIO = field(default_factory=PolicyIO)  # how the policy observes and acts
    minutes: float = 0.0  # wall-clock budget of the training (0: none); stops after an update


def make_training_env(cfg: PPOConfig) -> Any:
    """The SB3 VecEnv PPO trains on: VectorTrackEnv (SAME_STEP) → SB3VecEnv → VecMonitor →
    VecNormalize (observations and rewards)."""
    from gymnasium.vector import AutoresetMode
    from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

    from .sb3 import SB3VecEnv
    from .vector import VectorTrackEnv

    vec = VectorTrackEnv(
        num_envs=cfg.n_envs,
        nthread=cfg.nthread,
        autoreset_mode=AutoresetMode.SAME_STEP,
        reference=cfg.reference,
        io=cfg.io,
        **cfg.env,
    )
    venv = SB3VecEnv(vec, info_keys=())
    venv.seed(cfg.seed)
    return VecNormalize(VecMonitor(venv), norm_reward=True, clip_obs=10.0, gamma=cfg.gamma)


@dataclass(frozen=True)
class KickTrainConfig:
    """PPO on `equimus/Kick-v0` (single environments in SB3's DummyVecEnv: the kick scene has
    contacts and a free ball, which the batched tracking environment does not model)."""

    steps: int = 300_000
    n_envs: int = 4
    n_steps: int = 512
    batch_size: int = 256
    n_epochs: int = 10
    learning_rate: float = 3e-4
    gamma: float = 0.98
    seed: int = 0
    reward: str = 'shaped'  # shaped | authors (equimus_learning.kick)


def train_kick(out_dir: str, cfg: KickTrainConfig | None = None, progress_bar: bool = True) -> str:
    """PPO on the kick task; writes policy.zip and vecnormalize.pkl, returns the zip's path."""
    cfg = cfg or KickTrainConfig()
    _import_sb3()
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from equimus_control.policy import VECNORMALIZE_FILE

    from .kick import KickEnv

    torch.set_num_threads(1)
    os.makedirs(out_dir, exist_ok=True)
    venv = VecNormalize(
        make_vec_env(KickEnv, n_envs=cfg.n_envs, seed=cfg.seed, env_kwargs={'reward': cfg.reward}),
        norm_reward=True,
        clip_obs=10.0,
        gamma=cfg.gamma,
    )
    n_steps = min(cfg.n_steps, max(16, cfg.steps // cfg.n_envs))  # a tiny budget: one update
    model = PPO(
        'MlpPolicy',
        venv,
        n_steps=n_steps,
        batch_size=min(cfg.batch_size, n_steps * cfg.n_envs),
        n_epochs=cfg.n_epochs,
        learning_rate=cfg.learning_rate,
        gamma=cfg.gamma,
        seed=cfg.seed,
        device='cpu',
        verbose=0,
    )
    model.learn(total_timesteps=cfg.steps, progress_bar=progress_bar)
    zip_path = os.path.join(out_dir, 'policy.zip')
    model.save(zip_path)
    venv.save(os.path.join(out_dir, VECNORMALIZE_FILE))
    venv.close()
    return zip_path


def _import_sb3() -> Any:
    try:
        import stable_baselines3
    except ImportError:
        raise RLExtraMissing(
            'equimus train --algo ppo needs the rl extra (stable-baselines3, torch): '
            'run scripts/setup.sh --rl, or use --algo distil'
        ) from None
    return stable_baselines3


def train_ppo(
    out_dir: str,
    cfg: PPOConfig | None = None,
    progress_bar: bool = True,
) -> tuple[str, str]:
    """PPO (stable-baselines3) on the tracking task; returns (zip path, exported .npz path).

    Also writes policy_untrained.npz (the initial network, for comparison)."""
    cfg = cfg or PPOConfig()
    _import_sb3()
    import torch
    from stable_baselines3 import PPO

    from equimus_control.policy import VECNORMALIZE_FILE, mlp_from_arrays, sb3_to_arrays

    torch.set_num_threads(cfg.torch_threads)
    os.makedirs(out_dir, exist_ok=True)
    t_start = time.perf_counter()
    venv = make_training_env(cfg)
    try:
        import tensorboard  # noqa: F401

        tb: str | None = os.path.join(out_dir, 'tb')
    except ImportError:
        tb = None
    model = PPO(
        'MlpPolicy',
        venv,
        n_steps=cfg.n_steps,
        batch_size=cfg.batch_size,
        n_epochs=cfg.n_epochs,
        learning_rate=cfg.learning_rate,
        gamma=cfg.gamma,
        gae_lambda=cfg.gae_lambda,
        ent_coef=cfg.ent_coef,
        seed=cfg.seed,
        tensorboard_log=tb,
        policy_kwargs={'net_arch': list(cfg.net_arch), 'log_std_init': cfg.log_std_init},
        device='cpu',
        verbose=0,
    )
    save_mlp(
        os.path.join(out_dir, 'policy_untrained.npz'),
        mlp_from_arrays(sb3_to_arrays(model, cfg.io), 'the untrained policy'),
        algo='ppo',
        steps=0,
    )
    t0 = time.perf_counter()
    callback = _WallClock(t_start + 60.0 * cfg.minutes) if cfg.minutes > 0 else None
    model.learn(total_timesteps=cfg.steps, progress_bar=progress_bar, callback=callback)
    seconds = time.perf_counter() - t0
    zip_path = os.path.join(out_dir, 'policy.zip')
    model.save(zip_path)
    venv.save(os.path.join(out_dir, VECNORMALIZE_FILE))
    venv.close()
    arrays = sb3_to_arrays(model, cfg.io)
    mlp = mlp_from_arrays(arrays, zip_path)
    npz_path = os.path.join(out_dir, 'policy.npz')
    save_mlp(
        npz_path,
        mlp,
        algo='ppo',
        steps=model.num_timesteps,
        seconds=seconds,
        wall_seconds=time.perf_counter() - t_start,
    )
    return zip_path, npz_path


def _WallClock(deadline: float) -> Any:
    """A stable-baselines3 callback that ends training once time.perf_counter() passes
    `deadline` (the budget includes building the environment): the rollout in progress is
    dropped, the model is the one of the last update."""
    from stable_baselines3.common.callbacks import BaseCallback

    class WallClock(BaseCallback):
        def _on_step(self) -> bool:
            return time.perf_counter() < deadline

    return WallClock()
