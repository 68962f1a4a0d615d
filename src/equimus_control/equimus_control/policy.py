"""A learned policy as a controller (no ROS, no torch): a NumPy multilayer perceptron.

The policy sees what every controller sees (the estimate, the reference with its velocity) plus
what it keeps itself (the command it gave last cycle, and for the richer layouts a model of its
valves and a base controller), in a fixed layout of named features that the Gymnasium
environments (equimus_learning) train it on, and answers an action in [-1, 1]². Without a base
controller the action maps linearly to [0, p_max] kPa; with one (`PolicyIO.base = 'pid'`) it
is a residual of ±`residual_kpa` on the base controller's pressures. It runs inside
`step.ControlStep` like PID and MPC, so the guards, the clip and, downstream, the valve driver's
safety filter apply to it unchanged.

`PolicyCore` computes the observations and turns actions into pressures for n legs at once
(arrays (n, 2)); the controller runs it with n = 1 and the batched training environment with
n = its environments, so what the policy sees in training and on the rig is one piece of code.

Policy files:
- `.npz` (the deployable form, see `save_mlp`): weights `W0, b0, W1, b1, ...` (y = x W + b),
  `activation` (tanh | relu) of the hidden layers, `output` (tanh | clip) of the last,
  observation normalisation `obs_mean`, `obs_std`, `obs_clip`, and `obs_layout` (the feature
  names, checked on load so a policy trained on a layout this version cannot make is refused
  rather than fed the wrong numbers); the residual's base controller and valve model as
  `io_*` entries (`PolicyIO`).
- `.zip` from stable-baselines3 (PPO with an MLP actor): loaded only when the `rl` extra is
  installed, and converted to the same arrays (`sb3_to_arrays`); the observation normalisation
  comes from `vecnormalize.pkl` beside it when present.
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from equimus_description.config import ConfigError, param
from equimus_description.statics import StaticParams
from equimus_description.valve import VALVE_TAU_S, ValveParams, relax

from .batch import BatchPID, holding_pressures
from .controller import ControlOutput, Estimate, Reference
from .lowband import sigma_delta
from .pid import PIDGains
from .step import PERIOD

JOINT_SUFFIXES = ('hip', 'knee')
VALVE_SUFFIXES = ('maa', 'baa')
#: The features a policy may observe, in blocks of two (angles rad, rates rad/s; pressures
#: scaled to [-1, 1] over [0, p_max] by `kpa_to_action`):
#: q, qd (the estimate), q_ref, qd_ref (the reference), err (q_ref − q), u_prev (the last
#: command); err_rate (qd_ref − qd), qdd_ref (the change of qd_ref over the last cycle, rad/s²),
#: u_base (the base controller's pressures this cycle), i_base (the base PID's integral torque
#: over its clamp i_max), p_est, p_est_50ms, p_est_100ms (the valve pressures the controller's
#: own commands give through the valve model of `PolicyIO`, if the valves saw them at once,
#: 50 ms or 100 ms late: the dead time of the real valves is uncertain, docs/learning.md);
#: err_50ms … err_300ms (the reference's own future that far ahead minus q: its preview,
#: `controller.Reference.at`).
BLOCKS: dict[str, tuple[str, str]] = {
    'q': JOINT_SUFFIXES,
    'qd': JOINT_SUFFIXES,
    'q_ref': JOINT_SUFFIXES,
    'qd_ref': JOINT_SUFFIXES,
    'err': JOINT_SUFFIXES,
    'u_prev': VALVE_SUFFIXES,
    'err_rate': JOINT_SUFFIXES,
    'qdd_ref': JOINT_SUFFIXES,
    'u_base': VALVE_SUFFIXES,
    'i_base': JOINT_SUFFIXES,
    'p_est': VALVE_SUFFIXES,
    'p_est_50ms': VALVE_SUFFIXES,
    'p_est_100ms': VALVE_SUFFIXES,
    'err_50ms': JOINT_SUFFIXES,
    'err_100ms': JOINT_SUFFIXES,
    'err_200ms': JOINT_SUFFIXES,
    'err_300ms': JOINT_SUFFIXES,
}
#: s: the dead time each valve-estimate block assumes
P_EST_DELAYS = {'p_est': 0.0, 'p_est_50ms': 0.05, 'p_est_100ms': 0.1}
#: s: how far ahead each preview block looks
AHEAD_BLOCKS = {'err_50ms': 0.05, 'err_100ms': 0.1, 'err_200ms': 0.2, 'err_300ms': 0.3}
#: blocks only a policy with a base controller can observe
BASE_BLOCKS = ('u_base', 'i_base')


def layout_of(*blocks: str) -> tuple[str, ...]:
    """The feature names of `blocks` in order (`BLOCKS` names)."""
    return tuple(f'{b}_{s}' for b in blocks for s in BLOCKS[b])


def layout_blocks(layout: tuple[str, ...] | list[str]) -> list[str]:
    """The blocks a layout is made of; ConfigError for a layout this version cannot make."""
    names = list(layout)
    blocks: list[str] = []
    for i in range(0, len(names) - 1, 2):
        a, b = names[i], names[i + 1]
        block = next((k for k in BLOCKS if layout_of(k) == (a, b)), None)
        if block is None or block in blocks:
            break
        blocks.append(block)
    else:
        if len(names) % 2 == 0 and blocks:
            return blocks
    raise ConfigError(
        f'observation layout {names} is not one this controller can make (features in pairs '
        f'of {", ".join(BLOCKS)}); retrain or re-export the policy with this version'
    )


#: What the policy sees, in order, in the first layout (plain policies, `equimus train`'s
#: default): the estimate, the reference, the error and the last command.
OBS_BLOCKS = ('q', 'qd', 'q_ref', 'qd_ref', 'err', 'u_prev')
OBS_LAYOUT = layout_of(*OBS_BLOCKS)
OBS_SIZE = len(OBS_LAYOUT)
#: the first layout, the rate error and the reference's acceleration: how the richer layouts
#: begin
TRACKING_BLOCKS = (*OBS_BLOCKS, 'err_rate', 'qdd_ref')
#: The residual policy's layout: the tracking blocks, the base controller's pressures and
#: integral, and the valve estimates.
RESIDUAL_LAYOUT = layout_of(
    *TRACKING_BLOCKS, 'u_base', 'i_base', 'p_est', 'p_est_50ms', 'p_est_100ms'
)
#: The previewing layout (`equimus train --algo dagger`): what the LTV MPC decides from (the
#: estimate, the reference and its next 0.3 s, the last command and the chamber pressures it
#: gives), without a base controller.
PREVIEW_LAYOUT = layout_of(*TRACKING_BLOCKS, 'p_est', *AHEAD_BLOCKS)
#: how the last layer becomes an action in [-1, 1]: tanh, or clip (stable-baselines3's PPO takes
#: the Gaussian's mean as it is and the environment clips it to the action space)
OUTPUTS = ('tanh', 'clip')
#: stable-baselines3's VecNormalize statistics, saved beside a policy .zip by `equimus train`
VECNORMALIZE_FILE = 'vecnormalize.pkl'
ACTIVATIONS = ('tanh', 'relu')
#: base controllers of a residual policy: none (the action is the pressure) or pid
BASES = ('none', 'pid')


def observation(q, qd, q_ref, qd_ref, u_prev_scaled) -> np.ndarray:
    """The first layout's input (`OBS_LAYOUT`); arrays of shape (2,) or batched (n, 2)."""
    q, qd, q_ref, qd_ref, u = (np.asarray(v, float) for v in (q, qd, q_ref, qd_ref, u_prev_scaled))
    return np.concatenate([q, qd, q_ref, qd_ref, q_ref - q, u], axis=-1)


def action_to_kpa(action, p_max: float) -> np.ndarray:
    """[-1, 1] → [0, p_max] kPa (out-of-range actions are clipped first)."""
    return (np.clip(np.asarray(action, float), -1.0, 1.0) + 1.0) * (0.5 * p_max)


def kpa_to_action(p_kpa, p_max: float) -> np.ndarray:
    """Inverse of `action_to_kpa` (within the range)."""
    return np.asarray(p_kpa, float) / (0.5 * p_max) - 1.0


@dataclass(frozen=True)
class PolicyIO:
    """How a policy's observations are made and its actions become pressures; saved in the
    policy file beside the network (`io_*` entries), so a policy runs as it was trained.

    base 'none': the action maps to [0, p_max]; 'pid': the pressures are the PID's (`gains`,
    on the controller's static model) plus `residual_kpa` × action, clipped to [0, p_max].
    `valve_tau_fill`, `valve_tau_vent`: the controller's valve model for the p_est features."""

    layout: tuple[str, ...] = OBS_LAYOUT
    base: str = 'none'
    gains: PIDGains = field(default_factory=PIDGains)
    residual_kpa: float = 25.0
    valve_tau_fill: tuple[float, float] = (VALVE_TAU_S, VALVE_TAU_S)
    valve_tau_vent: tuple[float, float] = (VALVE_TAU_S, VALVE_TAU_S)
    #: kPa: commands below it are sigma-delta modulated between 0 and it (`lowband`), as the
    #: LTV MPC sends them; 0 = sent as they are (and vented by the valve driver)
    min_regulated_kpa: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, 'layout', tuple(self.layout))
        blocks = layout_blocks(self.layout)
        if self.base not in BASES:
            raise ConfigError(f'policy base {self.base!r}: use one of {", ".join(BASES)}')
        if self.base == 'none' and any(b in blocks for b in BASE_BLOCKS):
            raise ConfigError(f'policy features {", ".join(BASE_BLOCKS)} need a base controller')
        if not (math.isfinite(self.residual_kpa) and self.residual_kpa > 0):
            raise ConfigError(f'policy residual_kpa {self.residual_kpa}: must be > 0 kPa')
        ValveParams(tuple(self.valve_tau_fill), tuple(self.valve_tau_vent))  # checks them
        if not (math.isfinite(self.min_regulated_kpa) and 0 <= self.min_regulated_kpa <= 50):
            raise ConfigError(f'policy min_regulated_kpa {self.min_regulated_kpa}: 0 to 50 kPa')

    @property
    def ahead(self) -> tuple[float, ...]:
        """s: the times ahead whose reference the layout observes (its preview blocks)."""
        return tuple(AHEAD_BLOCKS[b] for b in layout_blocks(self.layout) if b in AHEAD_BLOCKS)

    def arrays(self) -> dict[str, np.ndarray]:
        """The `io_*` entries of a policy file (the layout is `obs_layout`)."""
        g = self.gains
        return {
            'io_base': np.array(self.base),
            'io_kp': np.array(g.kp, float),
            'io_ki': np.array(g.ki, float),
            'io_kd': np.array(g.kd, float),
            'io_i_max': np.array(g.i_max, float),
            'io_k_aw': np.array(g.k_aw, float),
            'io_residual_kpa': np.array(self.residual_kpa, float),
            'io_valve_tau_fill': np.array(self.valve_tau_fill, float),
            'io_valve_tau_vent': np.array(self.valve_tau_vent, float),
            'io_min_regulated_kpa': np.array(self.min_regulated_kpa, float),
        }

    @classmethod
    def from_arrays(cls, a: Mapping[str, np.ndarray], layout: tuple[str, ...]) -> PolicyIO:
        """From a policy file's entries (a file without `io_*` entries: a plain policy)."""
        if 'io_base' not in a:
            return cls(layout)

        def pair(key: str) -> tuple[float, float]:
            v = np.asarray(a[key], float).ravel()
            return (float(v[0]), float(v[1]))

        gains = PIDGains(
            kp=pair('io_kp'),
            ki=pair('io_ki'),
            kd=pair('io_kd'),
            i_max=pair('io_i_max'),
            k_aw=float(a['io_k_aw']),
        )
        return cls(
            layout,
            str(a['io_base']),
            gains,
            float(a['io_residual_kpa']),
            pair('io_valve_tau_fill'),
            pair('io_valve_tau_vent'),
            float(a.get('io_min_regulated_kpa', 0.0)),
        )


class PolicyCore:
    """Observations and commands of a policy for n legs at once (see the module docstring).

    Per cycle: `observe` (the estimate and the reference → the features of `io.layout`; runs
    the base controller), then `command` (the action → pressures in [0, p_max]; remembered for
    the next observation). `params` is the controller's static model of the leg: the base PID
    runs on it, and a fresh valve estimate starts at the pressures that hold the reference."""

    def __init__(self, io: PolicyIO, params: StaticParams | None = None, n: int = 1) -> None:
        if io.base == 'pid' and params is None:
            raise ConfigError('a residual policy on the PID needs the static model of the leg')
        self.io, self.params, self.n = io, params, int(n)
        self.blocks = layout_blocks(io.layout)
        self.base = BatchPID(params, io.gains, self.n) if io.base == 'pid' and params else None
        self.valve = ValveParams(tuple(io.valve_tau_fill), tuple(io.valve_tau_vent))
        delays = [P_EST_DELAYS[b] for b in self.blocks if b in P_EST_DELAYS]
        self.delays = {d: int(round(d / PERIOD)) for d in delays}
        depth = max(self.delays.values(), default=0) + 1
        n = self.n
        self.u_prev = np.zeros((n, 2))  # kPa, the last command (0 before the first)
        self.history = np.zeros((n, depth, 2))  # kPa, commands, the latest first
        self.p_est = {d: np.zeros((n, 2)) for d in self.delays}
        self.qd_ref_prev = np.zeros((n, 2))
        self.u_base = np.zeros((n, 2))
        self.sd = np.zeros((n, 2))  # kPa, the low-band modulation's residual
        self.fresh = np.ones(n, bool)  # no cycle since the reset
        self.ahead = io.ahead

    def reset(self, ids: Any = None) -> None:
        """Forget the commands, the valve estimate and the base controller's integral (of the
        legs `ids`; all by default)."""
        sel = slice(None) if ids is None else ids
        self.u_prev[sel] = 0.0
        self.sd[sel] = 0.0
        self.fresh[sel] = True
        if self.base is not None:
            self.base.reset(sel)

    def vent(self, mask: np.ndarray) -> None:
        """The guard sent 0 kPa instead of the command of the legs in `mask`."""
        self.u_prev[mask] = 0.0
        self.history[mask, 0] = 0.0

    def observe(
        self, q, qd, q_ref, qd_ref, dt, p_max: float, rows: Any = None, q_ahead: Any = None
    ) -> np.ndarray:
        """The features (m, len(layout)) of this cycle from arrays (m, 2), dt s since the last;
        `rows`: the m legs they are of (default: all n; the others keep their state);
        `q_ahead` (m, len(self.ahead), 2): the reference's angles at the times `self.ahead`
        (a layout with preview blocks needs them)."""
        r = np.arange(self.n) if rows is None else np.asarray(rows, int).reshape(-1)
        m = len(r)
        if self.ahead:
            if q_ahead is None:
                raise ValueError(f'this layout observes the reference {self.ahead} s ahead')
            future = np.asarray(q_ahead, float).reshape(m, len(self.ahead), 2)
        q, qd, q_ref, qd_ref = (np.asarray(v, float).reshape(m, 2) for v in (q, qd, q_ref, qd_ref))
        dt_col = np.broadcast_to(np.reshape(np.asarray(dt, float), (-1, 1)), (m, 1))
        fresh = self.fresh[r]
        history = self.history[r]
        qd_ref_prev = self.qd_ref_prev[r]
        if fresh.any():
            guess = (
                np.clip(holding_pressures(q_ref[fresh], self.params), 0.0, p_max)
                if self.params is not None
                else np.zeros((int(fresh.sum()), 2))
            )
            history[fresh] = guess[:, None, :]
            self.history[r] = history
            qd_ref_prev[fresh] = qd_ref[fresh]
        features: dict[str, np.ndarray] = {}
        for b, d in P_EST_DELAYS.items():
            if d in self.delays:
                p = relax(self.valve, self.p_est[d][r], history[:, self.delays[d]], dt_col)
                p = np.where(fresh[:, None], history[:, self.delays[d]], p)
                self.p_est[d][r] = p
                features[b] = kpa_to_action(p, p_max)
        qdd_ref = (qd_ref - qd_ref_prev) / dt_col
        self.qd_ref_prev[r] = qd_ref
        self.fresh[r] = False
        if self.base is not None:
            u_base, _ = self.base.step(q, qd, q_ref, qd_ref, dt_col, p_max, rows=r)
            self.u_base[r] = u_base
            features['u_base'] = kpa_to_action(u_base, p_max)
            features['i_base'] = self.base.integral[r] / np.maximum(self.base.i_max, 1e-9)
        features.update(
            q=q,
            qd=qd,
            q_ref=q_ref,
            qd_ref=qd_ref,
            err=q_ref - q,
            u_prev=kpa_to_action(self.u_prev[r], p_max),
            err_rate=qd_ref - qd,
            qdd_ref=qdd_ref,
        )
        for i, h in enumerate(self.ahead):
            features[next(b for b, v in AHEAD_BLOCKS.items() if v == h)] = future[:, i] - q
        return np.concatenate([features[b] for b in self.blocks], axis=1)

    def command(self, action, p_max: float) -> np.ndarray:
        """The pressures (n, 2) kPa in [0, p_max] of the actions (n, 2) in [-1, 1]."""
        a = np.clip(np.asarray(action, float).reshape(self.n, 2), -1.0, 1.0)
        if self.base is not None:
            u = np.clip(self.u_base + self.io.residual_kpa * a, 0.0, p_max)
        else:
            u = action_to_kpa(a, p_max)
        if self.io.min_regulated_kpa > 0:
            u, self.sd = sigma_delta(u, self.sd, self.io.min_regulated_kpa)
        self.sent(u)
        return u

    def sent(self, u) -> None:
        """The pressures (n, 2) kPa that went to the valves this cycle (the policy's own, or
        another controller's while a learner is taught, equimus_learning.imitate)."""
        u = np.asarray(u, float).reshape(self.n, 2)
        self.u_prev = u
        self.history = np.roll(self.history, 1, axis=1)
        self.history[:, 0] = u


@dataclass(frozen=True)
class MLP:
    """Hidden layers with `activation`, a linear last layer, then `output` (tanh or clip) to
    [-1, 1]; deterministic (the mean action). `io`: how it observes and acts (`PolicyIO`)."""

    weights: tuple[np.ndarray, ...]
    biases: tuple[np.ndarray, ...]
    activation: str = 'tanh'
    obs_mean: np.ndarray | None = None
    obs_std: np.ndarray | None = None
    obs_clip: float = 10.0
    output: str = 'tanh'
    io: PolicyIO = field(default_factory=PolicyIO)

    def __post_init__(self) -> None:
        if self.output not in OUTPUTS:
            raise ConfigError(f'policy output {self.output!r}: use one of {", ".join(OUTPUTS)}')
        if self.activation not in ACTIVATIONS:
            raise ConfigError(
                f'policy activation {self.activation!r}: use one of {", ".join(ACTIVATIONS)}'
            )
        if not self.weights or len(self.weights) != len(self.biases):
            raise ConfigError('policy: need as many bias vectors as weight matrices (at least 1)')
        n_in = len(self.io.layout)
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
    with open(path, 'wb') as f:
        np.savez(f, **mlp_arrays(mlp, **meta))


def mlp_arrays(mlp: MLP, **meta: Any) -> dict[str, Any]:
    """The arrays of `mlp`'s policy file (`mlp_from_arrays` reads them back)."""
    arrays: dict[str, Any] = {f'W{i}': W for i, W in enumerate(mlp.weights)}
    arrays.update({f'b{i}': b for i, b in enumerate(mlp.biases)})
    arrays['activation'] = np.array(mlp.activation)
    arrays['obs_layout'] = np.array(mlp.io.layout)
    arrays['obs_clip'] = np.array(mlp.obs_clip)
    arrays['output'] = np.array(mlp.output)
    if mlp.io != PolicyIO():
        arrays.update(mlp.io.arrays())
    if mlp.obs_mean is not None and mlp.obs_std is not None:
        arrays['obs_mean'], arrays['obs_std'] = mlp.obs_mean, mlp.obs_std
    for k, v in meta.items():
        arrays[f'meta_{k}'] = np.array(v)
    return arrays


def mlp_from_arrays(a: Mapping[str, np.ndarray], where: str) -> MLP:
    layout = tuple(str(s) for s in a.get('obs_layout', np.array([])).tolist())
    try:
        io = PolicyIO.from_arrays(a, layout)
    except ConfigError as exc:
        raise ConfigError(f'{where}: {exc}') from None
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
        io,
    )


def sb3_to_arrays(model: Any, io: PolicyIO | None = None) -> dict[str, np.ndarray]:
    """The .npz arrays of a stable-baselines3 model with an MLP actor (deterministic action);
    `io`: how it was trained to observe and act (default: the plain first layout)."""
    import torch.nn as nn  # only with the rl extra

    io = io or PolicyIO()
    policy = model.policy
    layers = [m for m in policy.mlp_extractor.policy_net if isinstance(m, nn.Linear)]
    acts = [m for m in policy.mlp_extractor.policy_net if not isinstance(m, nn.Linear)]
    activation = 'relu' if acts and isinstance(acts[0], nn.ReLU) else 'tanh'
    layers.append(policy.action_net)
    out: dict[str, np.ndarray] = {'activation': np.array(activation), 'output': np.array('clip')}
    for i, lin in enumerate(layers):
        out[f'W{i}'] = lin.weight.detach().cpu().numpy().T.astype(float)
        out[f'b{i}'] = lin.bias.detach().cpu().numpy().astype(float)
    out['obs_layout'] = np.array(io.layout)
    if io != PolicyIO():
        out.update(io.arrays())
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
        model = PPO.load(path, device='cpu')
        shape = tuple(model.observation_space.shape or ())
        if shape != (OBS_SIZE,):
            raise ConfigError(
                f'{path} observes {shape[0] if shape else 0} features, not the plain '
                f'layout of {OBS_SIZE}: use the policy.npz that `equimus train` wrote beside it '
                '(it holds the layout and the base controller)'
            )
        arrays = sb3_to_arrays(model)
        stats = os.path.join(os.path.dirname(path), VECNORMALIZE_FILE)
        if os.path.isfile(stats):  # the observation normalisation saved beside the zip
            import pickle

            with open(stats, 'rb') as f:
                norm = pickle.load(f)
            arrays['obs_mean'] = np.asarray(norm.obs_rms.mean, float)
            arrays['obs_std'] = np.sqrt(np.asarray(norm.obs_rms.var, float) + norm.epsilon)
            arrays['obs_clip'] = np.array(float(norm.clip_obs))
        return mlp_from_arrays(arrays, path)
    if not zipfile.is_zipfile(path):  # np.load would try it as a pickle and talk of trust
        raise ConfigError(
            f'policy_file {path!r} is not a .npz policy (not a NumPy archive): use the '
            'policy.npz that `equimus train` writes'
        )
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
    """Runs an `MLP` through a one-leg `PolicyCore` (see the module docstring); `params`: the
    controller's static model of the leg (needed by a residual policy's base PID)."""

    def __init__(self, mlp: MLP, params: StaticParams | None = None) -> None:
        self.mlp = mlp
        self.core = PolicyCore(mlp.io, params, 1)
        self.reset()

    def reset(self) -> None:
        self.core.reset()
        self.u_prev: np.ndarray | None = None  # last command, kPa

    def step(self, state: Estimate, ref: Reference, dt: float, p_max: float) -> ControlOutput:
        ahead = ref.at(np.asarray(self.core.ahead)) if self.core.ahead else None
        obs = self.core.observe(state.q, state.qd, ref.q, ref.qd, dt, p_max, q_ahead=ahead)[0]
        a = self.mlp(obs)
        if not np.all(np.isfinite(a)):
            return ControlOutput(np.full(2, math.nan), np.zeros(2, bool), {'action': a})
        kpa = self.core.command(a, p_max)[0]
        self.u_prev = kpa
        return ControlOutput(kpa, (kpa <= 0.0) | (kpa >= p_max), {'action': a})
