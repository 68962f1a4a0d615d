"""A Gymnasium vector environment as a stable-baselines3 VecEnv (the `rl` extra).

SB3's own vectorisation (`make_vec_env`: DummyVecEnv / SubprocVecEnv) steps one Python
environment after another; `SB3VecEnv` instead hands SB3 one batched environment
(`VectorTrackEnv`: one `mujoco.rollout` call per period for all environments) and converts the
calling conventions:

- autoreset: SB3 resets a finished environment within `step` and returns its last observation as
  `infos[i]['terminal_observation']`, i.e. Gymnasium's SAME_STEP mode: the vector environment
  must run in it (`VectorTrackEnv(autoreset_mode='SameStep')`);
- `infos[i]['TimeLimit.truncated']` for an environment cut by the time limit (SB3 bootstraps
  its value), `dones = terminated | truncated`;
- the per-environment info dicts SB3 expects, from Gymnasium's dict of arrays with `_key` masks
  (only the keys in `info_keys`: training passes none, for speed);
- `seed()` / `set_options()` apply at the next `reset()`, as in SB3's VecEnvs;
- `get_images()` / `render()` from the vector environment's `rgb_array` frames.

Only this module imports stable-baselines3; it is imported by training code only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env.base_vec_env import (
    VecEnv,
    VecEnvIndices,
    VecEnvObs,
    VecEnvStepReturn,
)


class SB3VecEnv(VecEnv):
    """See the module docstring."""

    def __init__(self, venv: gym.vector.VectorEnv, info_keys: Iterable[str] | None = None):
        mode = venv.metadata.get('autoreset_mode')
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(
                f'SB3VecEnv needs a vector env in SAME_STEP autoreset mode (SB3 resets within '
                f'step), this one is {mode}: make it with autoreset_mode=AutoresetMode.SAME_STEP'
            )
        self.venv = venv
        self.info_keys = None if info_keys is None else tuple(info_keys)
        self._actions: np.ndarray | None = None
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)

    # ----- stepping ----------------------------------------------------------------------------
    def reset(self) -> VecEnvObs:
        seeds = None if all(s is None for s in self._seeds) else list(self._seeds)
        opts = [o for o in self._options if o]
        if opts and any(o != opts[0] for o in opts) or 0 < len(opts) < self.num_envs:
            raise ValueError('SB3VecEnv: the vector env takes one options dict for all envs')
        obs, infos = self.venv.reset(seed=seeds, options=opts[0] if opts else None)  # type: ignore[arg-type]
        self.reset_infos = self._per_env(infos, np.ones(self.num_envs, bool))
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, terminated, truncated, infos = self.venv.step(self._actions)
        dones = terminated | truncated
        out = self._per_env(infos, ~dones)
        if dones.any():
            final_obs, final_info = infos['final_obs'], infos.get('final_info', {})
            for i in np.flatnonzero(dones):
                info = out[i]
                info.update(self._one(final_info, int(i)))
                info['terminal_observation'] = final_obs[i]
                info['TimeLimit.truncated'] = bool(truncated[i] and not terminated[i])
        return obs, rewards.astype(np.float32), dones, out

    def _one(self, infos: dict[str, Any], i: int) -> dict[str, Any]:
        """Environment i's entries of a Gymnasium vector info dict (those its masks select)."""
        out = {}
        for key, value in infos.items():
            if key.startswith('_') or key in ('final_obs', 'final_info'):
                continue
            if self.info_keys is not None and key not in self.info_keys:
                continue
            mask = infos.get(f'_{key}')
            if mask is None or mask[i]:
                out[key] = value[i]
        return out

    def _per_env(self, infos: dict[str, Any], rows: np.ndarray) -> list[dict[str, Any]]:
        if self.info_keys == () or not infos:
            return [{} for _ in range(self.num_envs)]
        return [self._one(infos, i) if rows[i] else {} for i in range(self.num_envs)]

    def close(self) -> None:
        self.venv.close()

    # ----- rendering ---------------------------------------------------------------------------
    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != 'rgb_array':
            return [None] * self.num_envs
        frames: Any = self.venv.render()
        return list(frames) if frames is not None else [None] * self.num_envs

    # ----- attributes: one batched env holds them for all ------------------------------------
    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        value = getattr(self.venv, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        if len(list(self._get_indices(indices))) != self.num_envs:
            raise ValueError('SB3VecEnv: attributes are shared by all environments')
        setattr(self.venv, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **kw: Any
    ) -> list[Any]:
        result = getattr(self.venv, method_name)(*method_args, **kw)
        return [result for _ in self._get_indices(indices)]

    def env_is_wrapped(
        self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
    ) -> list[bool]:
        return [False for _ in self._get_indices(indices)]
