"""A learned policy as a controller (no ROS, no torch): a NumPy multilayer perceptron.

The policy sees what every controller sees (the estimate, the reference with its velocity) plus
the command it gave last cycle, in the fixed layout of `observation` that the Gymnasium
environment (equimus_learning) trains it on, and answers an action in [-1, 1]² that maps
linearly to [0, p_max] kPa. It runs inside `step.ControlStep` like PID and MPC, so the guards,
the clip and, downstream, the valve driver's safety filter apply to it unchanged.

Policy files:
- `.npz` (the deployable form, see `save_mlp`): weights `W0, b0, W1, b1, ...` (y = x W + b),
  `activation` (tanh | relu) of the hidden layers, `output` (tanh | clip) of the last,
  observation normalisation `obs_mean`, `obs_std`, `obs_clip`, and `obs_layout` (the names of
  `OBS_LAYOUT`, checked on load so a policy trained on another layout is refused rather than
  fed the wrong numbers).
- `.zip` from stable-baselines3 (PPO with an MLP actor): loaded only when the `rl` extra is
  installed, and converted to the same arrays (`sb3_to_arrays`); the observation normalisation
  comes from `vecnormalize.pkl` beside it when present.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from equimus_description.config import ConfigError, param

from .controller import ControlOutput, Estimate, Reference

#: What the policy sees, in order (angles rad, rates rad/s; `u_prev` is the last command scaled
#: to [-1, 1] over [0, p_max]).
OBS_LAYOUT = (
    'q_hip',
    'q_knee',
    'qd_hip',
    'qd_knee',
    'q_ref_hip',
    'q_ref_knee',
    'qd_ref_hip',
    'qd_ref_knee',
    'err_hip',
    'err_knee',
    'u_prev_maa',
    'u_prev_baa',
)
OBS_SIZE = len(OBS_LAYOUT)
#: how the last layer becomes an action in [-1, 1]: tanh, or clip (stable-baselines3's PPO takes
#: the Gaussian's mean as it is and the environment clips it to the action space)
OUTPUTS = ('tanh', 'clip')
#: stable-baselines3's VecNormalize statistics, saved beside a policy .zip by `equimus train`
VECNORMALIZE_FILE = 'vecnormalize.pkl'
ACTIVATIONS = ('tanh', 'relu')


def observation(q, qd, q_ref, qd_ref, u_prev_scaled) -> np.ndarray:
    """The policy's input (layout `OBS_LAYOUT`); arrays of shape (2,) or batched (n, 2)."""
    q, qd, q_ref, qd_ref, u = (np.asarray(v, float) for v in (q, qd, q_ref, qd_ref, u_prev_scaled))
    return np.concatenate([q, qd, q_ref, qd_ref, q_ref - q, u], axis=-1)


def action_to_kpa(action, p_max: float) -> np.ndarray:
    """[-1, 1] → [0, p_max] kPa (out-of-range actions are clipped first)."""
    return (np.clip(np.asarray(action, float), -1.0, 1.0) + 1.0) * (0.5 * p_max)


def kpa_to_action(p_kpa, p_max: float) -> np.ndarray:
    """Inverse of `action_to_kpa` (within the range)."""
    return np.asarray(p_kpa, float) / (0.5 * p_max) - 1.0


@dataclass(frozen=True)
class MLP:
    """Hidden layers with `activation`, a linear last layer, then `output` (tanh or clip) to
    [-1, 1]; deterministic (the mean action)."""

    weights: tuple[np.ndarray, ...]
    biases: tuple[np.ndarray, ...]
    activation: str = 'tanh'
    obs_mean: np.ndarray | None = None
    obs_std: np.ndarray | None = None
    obs_clip: float = 10.0
    output: str = 'tanh'

    def __post_init__(self) -> None:
        if self.output not in OUTPUTS:
            raise ConfigError(f'policy output {self.output!r}: use one of {", ".join(OUTPUTS)}')
        if self.activation not in ACTIVATIONS:
            raise ConfigError(
                f'policy activation {self.activation!r}: use one of {", ".join(ACTIVATIONS)}'
            )
        if not self.weights or len(self.weights) != len(self.biases):
            raise ConfigError('policy: need as many bias vectors as weight matrices (at least 1)')
        n_in = OBS_SIZE
        for i, (W, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            if W.ndim != 2 or W.shape[0] != n_in or b.shape != (W.shape[1],):
                raise ConfigError(
                    f'policy layer {i}: weights {W.shape} and bias {b.shape} do not chain '
                    f'from {n_in} inputs'
                )
            if not (np.all(np.isfinite(W)) and np.all(np.isfinite(b))):
                raise ConfigError(f'policy layer {i}: non-finite weights')
            n_in = W.shape[1]
        if n_in != 2:
            raise ConfigError(f'policy: {n_in} outputs, expected 2 (one per valve)')

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, float)
        if self.obs_mean is not None and self.obs_std is not None:
            x = np.clip((x - self.obs_mean) / self.obs_std, -self.obs_clip, self.obs_clip)
        last = len(self.weights) - 1
        for i, (W, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = x @ W + b
            if i < last:
                x = np.tanh(x) if self.activation == 'tanh' else np.maximum(x, 0.0)
        return np.tanh(x) if self.output == 'tanh' else np.clip(x, -1.0, 1.0)


def save_mlp(path: str | os.PathLike, mlp: MLP, **meta: Any) -> None:
    """Write `mlp` as the .npz policy format (`meta`: extra scalar/string facts, e.g. task)."""
    arrays: dict[str, Any] = {f'W{i}': W for i, W in enumerate(mlp.weights)}
    arrays.update({f'b{i}': b for i, b in enumerate(mlp.biases)})
    arrays['activation'] = np.array(mlp.activation)
    arrays['obs_layout'] = np.array(OBS_LAYOUT)
    arrays['obs_clip'] = np.array(mlp.obs_clip)
    arrays['output'] = np.array(mlp.output)
    if mlp.obs_mean is not None and mlp.obs_std is not None:
        arrays['obs_mean'], arrays['obs_std'] = mlp.obs_mean, mlp.obs_std
    for k, v in meta.items():
        arrays[f'meta_{k}'] = np.array(v)
    with open(path, 'wb') as f:
        np.savez(f, **arrays)


def mlp_from_arrays(a: Mapping[str, np.ndarray], where: str) -> MLP:
    layout = tuple(str(s) for s in a.get('obs_layout', np.array([])).tolist())
    if layout != OBS_LAYOUT:
        raise ConfigError(
            f"{where}: observation layout {list(layout)} is not the controller's "
            f'{list(OBS_LAYOUT)}; retrain or re-export the policy with this version'
        )
    n = sum(1 for k in a if k.startswith('W') and k[1:].isdigit())
    mean = a.get('obs_mean')
    std = a.get('obs_std')
    return MLP(
        tuple(np.asarray(a[f'W{i}'], float) for i in range(n)),
        tuple(np.asarray(a[f'b{i}'], float) for i in range(n)),
        str(a.get('activation', 'tanh')),
        None if mean is None else np.asarray(mean, float),
        None if std is None else np.maximum(np.asarray(std, float), 1e-8),
        float(a.get('obs_clip', 10.0)),
        str(a.get('output', 'tanh')),
    )


def sb3_to_arrays(model: Any) -> dict[str, np.ndarray]:
    """The .npz arrays of a stable-baselines3 model with an MLP actor (deterministic action)."""
    import torch.nn as nn  # only with the rl extra

    policy = model.policy
    layers = [m for m in policy.mlp_extractor.policy_net if isinstance(m, nn.Linear)]
    acts = [m for m in policy.mlp_extractor.policy_net if not isinstance(m, nn.Linear)]
    activation = 'relu' if acts and isinstance(acts[0], nn.ReLU) else 'tanh'
    layers.append(policy.action_net)
    out: dict[str, np.ndarray] = {'activation': np.array(activation), 'output': np.array('clip')}
    for i, lin in enumerate(layers):
        out[f'W{i}'] = lin.weight.detach().cpu().numpy().T.astype(float)
        out[f'b{i}'] = lin.bias.detach().cpu().numpy().astype(float)
    out['obs_layout'] = np.array(OBS_LAYOUT)
    env = model.get_env()
    norm = getattr(env, 'obs_rms', None)
    if norm is not None:
        out['obs_mean'] = np.asarray(norm.mean, float)
        out['obs_std'] = np.sqrt(np.asarray(norm.var, float) + getattr(env, 'epsilon', 1e-8))
        out['obs_clip'] = np.array(float(getattr(env, 'clip_obs', 10.0)))
    return out


def load_policy(path: str | os.PathLike) -> MLP:
    """An MLP from a policy file (.npz, or a stable-baselines3 .zip with the rl extra)."""
    path = os.fspath(path)
    if not path:
        raise ConfigError(
            'controller:=policy needs policy_file:=<file.npz> (e.g. from equimus train)'
        )
    if not os.path.isfile(path):
        raise ConfigError(f'policy_file {path!r} does not exist')
    if path.endswith('.zip'):
        try:
            from stable_baselines3 import PPO
        except ImportError:
            raise ConfigError(
                f'{path} is a stable-baselines3 file and stable-baselines3 is not installed: '
                'install the rl extra (scripts/setup.sh --rl), or use the .npz that '
                '`equimus train` writes beside it'
            ) from None
        arrays = sb3_to_arrays(PPO.load(path, device='cpu'))
        stats = os.path.join(os.path.dirname(path), VECNORMALIZE_FILE)
        if os.path.isfile(stats):  # the observation normalisation saved beside the zip
            import pickle

            with open(stats, 'rb') as f:
                norm = pickle.load(f)
            arrays['obs_mean'] = np.asarray(norm.obs_rms.mean, float)
            arrays['obs_std'] = np.sqrt(np.asarray(norm.obs_rms.var, float) + norm.epsilon)
            arrays['obs_clip'] = np.array(float(norm.clip_obs))
        return mlp_from_arrays(arrays, path)
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError) as exc:
        raise ConfigError(f'policy_file {path!r} is not a .npz policy: {exc}') from None
    return mlp_from_arrays(arrays, path)


@dataclass(frozen=True)
class PolicyConfig:
    """Where the policy comes from; fixed for the node's life."""

    policy_file: str = param(
        '',
        'policy network: .npz (equimus train) or a stable-baselines3 .zip (needs the rl extra)',
    )


class PolicyController:
    """Runs an `MLP` on the `observation` of each estimate (see the module docstring)."""

    def __init__(self, mlp: MLP) -> None:
        self.mlp = mlp
        self.reset()

    def reset(self) -> None:
        self.u_prev: np.ndarray | None = None  # last command, kPa

    def step(self, state: Estimate, ref: Reference, dt: float, p_max: float) -> ControlOutput:
        u_prev = np.zeros(2) if self.u_prev is None else self.u_prev
        obs = observation(state.q, state.qd, ref.q, ref.qd, kpa_to_action(u_prev, p_max))
        a = self.mlp(obs)
        if not np.all(np.isfinite(a)):
            return ControlOutput(np.full(2, math.nan), np.zeros(2, bool), {'action': a})
        kpa = action_to_kpa(a, p_max)
        self.u_prev = kpa
        return ControlOutput(kpa, (kpa <= 0.0) | (kpa >= p_max), {'action': a})
