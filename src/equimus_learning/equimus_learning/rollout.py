"""Running a trained policy in its environment: figures and a video (`equimus rollout`).

- kick: a stable-baselines3 policy (`policy.zip` + the `vecnormalize.pkl` beside it, from
  `equimus train --task kick`) on `equimus/Kick-v0`, deterministic actions; per episode the
  ball's peak speed and how far it ended along the target; the success rate is the share of
  episodes whose ball ended at least `kick.SUCCESS_DISTANCE` along the target.
- track: a tracking policy (`.npz`, or an SB3 `.zip`) on the tracking task; RMSE per joint.

Episodes use seeds seed, seed + 1, …; the video shows the first `video_episodes` of them at
`equimus_sim.render.RENDER_FPS` (one frame every 4 control periods).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from equimus_sim.render import RENDER_FPS, write_video

FRAME_EVERY = max(1, round(120 / RENDER_FPS))


@dataclass
class RolloutResult:
    episodes: int
    returns: list[float] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)
    video: str | None = None


def kick_policy(path: str | os.PathLike) -> Callable[[np.ndarray], np.ndarray]:
    """A deterministic action function from an SB3 zip and its observation normalisation."""
    from stable_baselines3 import PPO

    from equimus_control.policy import VECNORMALIZE_FILE

    path = os.fspath(path)
    model = PPO.load(path, device='cpu')
    stats = Path(path).with_name(VECNORMALIZE_FILE)
    norm = None
    if stats.is_file():
        with open(stats, 'rb') as f:
            norm = pickle.load(f)

    def act(obs: np.ndarray) -> np.ndarray:
        x = obs
        if norm is not None:
            x = np.clip(
                (obs - norm.obs_rms.mean) / np.sqrt(norm.obs_rms.var + norm.epsilon),
                -norm.clip_obs,
                norm.clip_obs,
            )
        action, _ = model.predict(x.astype(np.float32), deterministic=True)
        return np.asarray(action, float)

    return act


def run(
    task: str,
    policy: Callable[[np.ndarray], np.ndarray],
    episodes: int = 10,
    seed: int = 0,
    video: str | os.PathLike | None = None,
    video_episodes: int = 2,
    env_kwargs: dict[str, Any] | None = None,
) -> RolloutResult:
    """Run `episodes` episodes of `policy` on the task (kick | triangle | steps | random)."""
    from .env import TrackEnv
    from .kick import SUCCESS_DISTANCE, KickEnv

    kw = dict(env_kwargs or {})
    render = 'rgb_array' if video else None
    env: Any = (
        KickEnv(render_mode=render, **kw)
        if task == 'kick'
        else TrackEnv(reference=task, render_mode=render, **kw)
    )
    result = RolloutResult(episodes)
    frames: list[np.ndarray] = []
    peak, progress, success, sq_err, n_err = [], [], [], np.zeros(2), 0
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        filming = video is not None and ep < video_episodes
        total, best = 0.0, 0.0
        info: dict[str, Any] = {}
        k = 0
        while True:
            if filming and k % FRAME_EVERY == 0:
                frames.append(env.render())
            obs, r, term, trunc, info = env.step(policy(obs))
            total += r
            k += 1
            if task == 'kick':
                best = max(best, info['ball_speed'])
            else:
                err = info['q'] - info['q_ref']
                sq_err += err**2
                n_err += 1
            if term or trunc:
                break
        result.returns.append(total)
        if task == 'kick':
            peak.append(best)
            progress.append(info['ball_progress'])
            success.append(info['ball_progress'] >= SUCCESS_DISTANCE)
    env.close()
    result.figures['mean_return'] = float(np.mean(result.returns))
    if task == 'kick':
        result.figures['success_rate'] = float(np.mean(success))
        result.figures['peak_ball_speed_m_s'] = float(np.mean(peak))
        result.figures['ball_progress_m'] = float(np.mean(progress))
    else:
        rmse = np.sqrt(sq_err / max(n_err, 1))
        result.figures['rmse_hip_rad'], result.figures['rmse_knee_rad'] = map(float, rmse)
    if video is not None and frames:
        result.video = str(write_video(video, frames, RENDER_FPS))
    return result
