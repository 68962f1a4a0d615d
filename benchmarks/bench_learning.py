"""Learning benchmark (equimus_learning), two parts measured in one run:

1. Throughput: a bare mj_step loop of the leg model (physics steps/s, and the env steps/s they
   would allow at 10 physics steps per 120 Hz period) next to the single Gymnasium environment
   (`TrackEnv`: the sim graph's objects) and the batched vector environment (`VectorTrackEnv`:
   arrays + one mujoco.rollout per period) with 1 and 2 rollout threads. Goal: >= 20,000 env
   steps/s vectorised on 2 cores. Then PPO training itself (stable-baselines3 on the batched
   env through `equimus_learning.sb3`, `PPOConfig` defaults: collection and network updates
   together, timed after a warm-up update), beside the bare loop. Goal: >= 10,000 env steps/s.
2. PID auto-tuning: `equimus tune pid` on the triangle (fixed noise seed), then the hand-set
   gains (config/control.yaml) and the tuned ones side by side on the triangle, 18 s, in the
   plain-code sim graph loop (closed_loop.run + SimulatedDriver) with the tuning's noise seed and
   an unseen one, and in the real sim graph (main job: DDS nodes, lockstep sim, valve driver)
   with the tuned gains passed as params_file:=.

    python benchmarks/bench_learning.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np


def throughput(quick: bool) -> dict:
    import mujoco

    from equimus_control.step import PERIOD
    from equimus_learning.env import PHYSICS_DT, TrackEnv
    from equimus_learning.vector import VectorTrackEnv

    substeps = round(PERIOD / PHYSICS_DT)

    out: dict = {}
    env = TrackEnv(reference='triangle')
    env.reset(seed=0)
    m, d = env.sim.model, env.sim.data
    n = 20_000 if quick else 100_000
    t0 = time.perf_counter()
    for _ in range(n):
        mujoco.mj_step(m, d)
    rate = n / (time.perf_counter() - t0)
    out['bare_mj_step_per_s'] = rate
    out['bare_mj_step_env_equivalent_per_s'] = rate / substeps
    hold = np.zeros(2)
    steps = 1000 if quick else 4000
    t0 = time.perf_counter()
    for _ in range(steps):
        _, _, term, trunc, _ = env.step(hold)
        if term or trunc:
            env.reset()
    out['single_env_steps_per_s'] = steps / (time.perf_counter() - t0)
    for nthread in (1, 2):
        for num in (64, 256):
            vec = VectorTrackEnv(num_envs=num, nthread=nthread)
            vec.reset(seed=0)
            act = np.zeros((num, 2))
            vec.step(act)
            reps = max(20, (8000 if quick else 40000) // num)
            t0 = time.perf_counter()
            for _ in range(reps):
                vec.step(act)
            out[f'vector_{num}envs_{nthread}thread_steps_per_s'] = (
                reps * num / (time.perf_counter() - t0)
            )
            vec.close()
    out.update(ppo_throughput(quick))
    best = max(v for k, v in out.items() if k.startswith('vector_'))
    out['vector_best_over_single'] = best / out['single_env_steps_per_s']
    out['vector_best_over_bare_env_equivalent'] = best / out['bare_mj_step_env_equivalent_per_s']
    if 'ppo_train_env_steps_per_s' in out:
        out['ppo_train_over_bare_env_equivalent'] = (
            out['ppo_train_env_steps_per_s'] / out['bare_mj_step_env_equivalent_per_s']
        )
    return out


def ppo_throughput(quick: bool) -> dict:
    """Env steps/s of `equimus train --algo ppo` (PPOConfig defaults), warm-up update excluded."""
    try:
        import torch
        from stable_baselines3 import PPO
    except ImportError:
        return {}
    from equimus_learning.train import PPOConfig, make_training_env

    cfg = PPOConfig()
    torch.set_num_threads(cfg.torch_threads)
    venv = make_training_env(cfg)
    model = PPO(
        'MlpPolicy',
        venv,
        n_steps=cfg.n_steps,
        batch_size=cfg.batch_size,
        n_epochs=cfg.n_epochs,
        gamma=cfg.gamma,
        policy_kwargs={'net_arch': list(cfg.net_arch)},
        device='cpu',
    )
    per_update = cfg.n_envs * cfg.n_steps
    model.learn(per_update)
    updates = 3 if quick else 12
    t0 = time.perf_counter()
    model.learn(per_update * updates, reset_num_timesteps=False)
    rate = per_update * updates / (time.perf_counter() - t0)
    venv.close()
    return {'ppo_train_env_steps_per_s': rate, 'ppo_train_envs': cfg.n_envs}


def graph_rmse(params_file: str | None, duration: float) -> tuple[float, float]:
    """RMSE (hip, knee) of the real sim graph (main job) with the PID, optionally a params file."""
    from equimus_bringup import main_job

    with tempfile.TemporaryDirectory() as tmp:
        argv = ['--out', tmp, '--mode', 'sim', '--controller', 'pid', '--duration', str(duration)]
        if params_file:
            argv += ['--set', f'params_file:={params_file}']
        if main_job.main(argv) != 0:
            return math.nan, math.nan
        (run_dir,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        s = json.loads((run_dir / 'summary.json').read_text())
        return float(s['rmse']['hip']), float(s['rmse']['knee'])


def tuning(quick: bool) -> dict:
    from equimus_control.pid import PIDGains
    from equimus_learning.tune import TuneConfig, closed_loop_rmse, tune_pid, write_params

    cfg = (
        TuneConfig(local_evals=12, global_generations=1)
        if quick
        else TuneConfig()  # the `equimus tune pid` defaults
    )
    res = tune_pid(cfg)
    g = res.gains
    out: dict = {
        'tune_evaluations': res.evaluations,
        'tune_seconds': res.seconds,
        'tune_objective_rmse_start': math.sqrt(res.start_cost),
        'tune_objective_rmse_tuned': math.sqrt(res.cost),
        'tuned_kp': f'[{g.kp[0]:.4g}, {g.kp[1]:.4g}]',
        'tuned_ki': f'[{g.ki[0]:.4g}, {g.ki[1]:.4g}]',
        'tuned_kd': f'[{g.kd[0]:.4g}, {g.kd[1]:.4g}]',
    }
    duration = 8.0 if quick else 18.0
    for seed in (cfg.noise_seed, 11):
        for name, gains in (('hand', PIDGains()), ('tuned', g)):
            rmse, vented = closed_loop_rmse(gains, 'triangle', duration, seed)
            out[f'loop_seed{seed}_{name}_rmse_hip'] = float(rmse[0])
            out[f'loop_seed{seed}_{name}_rmse_knee'] = float(rmse[1])
            out[f'loop_seed{seed}_{name}_vented'] = vented
    try:
        import rclpy  # noqa: F401
    except ImportError:
        return out
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'tuned_pid.yaml')
        write_params(path, res, cfg)
        for name, pf in (('hand', None), ('tuned', path)):
            hip, knee = graph_rmse(pf, 8.0 if quick else 15.0)
            out[f'sim_graph_{name}_rmse_hip'] = hip
            out[f'sim_graph_{name}_rmse_knee'] = knee
    return out


def run(quick: bool = True, tune: bool = True) -> dict:
    warnings.simplefilter('ignore')
    out = throughput(quick)
    if tune:
        out.update(tuning(quick))
    with contextlib.suppress(OSError):
        out['load_average_1min'] = os.getloadavg()[0]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--quick', action='store_true', help='short loops and a small tuning budget')
    ap.add_argument(
        '--throughput-only', action='store_true', help='env steps/s only (no tuning, ~15 s)'
    )
    a = ap.parse_args(argv)
    for k, v in run(a.quick, tune=not a.throughput_only).items():
        print(f'{k:48s} {v:.4g}' if isinstance(v, float) else f'{k:48s} {v}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
