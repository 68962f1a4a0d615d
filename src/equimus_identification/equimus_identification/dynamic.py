"""Dynamic identification: simulate the recorded pressure inputs in MuJoCo and fit the parameters.

The model is the one equimus_sim builds (mjcf_builder 3-2-1 actuators, LegModel for indices and
for restarting at measured joint angles). A candidate's parameters are written straight into one
compiled MjModel (no recompilation):
    k    -> stiffness 2k of both segment slides        c  -> damping 2c of both slides
    l0   -> spring reference (l0 − l_build)/2 of each slide
    area -> F = S·P fed to the segment motors           joint damping -> hinge dof_damping
    joint frictionloss, armature -> hinge dof_frictionloss, dof_armature
    joints.knee.range.0 (the knee's stop) -> jnt_range
    valve.* -> the description's valve model (equimus_description.valve.follow: dead time, fill
    and vent time constants; `valve.time_constant` alone is the authors' lag), per physics step
so every candidate costs only its physics steps. Rollouts go through `mujoco.rollout`.

Losses (both over experiments from `data`):
- 'whole' (the paper's, Eq. 12): each experiment simulated from its start;
  E = MSE(θ) + λ·MSE(sign θ̇), λ = 100; averaged over experiments.
- static equilibria (Experiment.is_static, from data.static_experiments) are held at their
  pressures from the measured pose and scored on the mean angle of their last STATIC_TAIL_S
  seconds; they add static_weight × mean squared equilibrium error to either loss, which is what
  separates stiffness, area and rest length (the releases all end at 0 kPa).
- 'shooting' (multiple shooting, seeds/003): every experiment cut into segments of `horizon`
  seconds, each restarted from the measured (smoothed) angles and velocities through
  LegModel.reset(q, qd) with the valve state carried by the lag model; MSE(θ) over all segments.
  Short horizons keep the loss smooth in the parameters and errors from compounding.

Force direction: on the rig a pressure LENGTHENS the actuator (more P1 raises θ1, more P2
straightens the knee; see equimus_description.statics and the static data), so the evaluator drives
the segment motors with positive gear whatever sign the builder uses (`PRESSURE_LENGTHENS`).
"""

from __future__ import annotations

import copy
import inspect
import math
import os
import pickle
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import mujoco
import mujoco.rollout
import numpy as np
from scipy.optimize import least_squares, minimize

from equimus_description.leg import LegDescription, load_leg
from equimus_description.valve import ACTUATORS, ValveParams, follow
from equimus_sim.leg_model import LegModel
from equimus_sim.mjcf_builder import friction_constraint, seg_names, slide_gain

from .data import Experiment

PRESSURE_LENGTHENS = True
DT = 0.005  # the authors' identification time step
SIGN_WEIGHT = 100.0  # λ of the paper's loss
FAIL_LOSS = 1e3  # loss of a diverged or non-finite rollout
STATIC_TAIL_S = 0.5  # a static hold is scored on the mean angle of its last half second
PRESSURE_SOURCES = ('command', 'measured')
# A parameter counts as determined by the data when its relative standard error is under 1 %.
# The error is a white-noise lower bound, hence the wide margin to the 5 % accuracy goal.
DETERMINED_RSE = 0.01

# name -> (lower, upper); names are leg_description override keys, so a fit IS an override file.
BOUNDS = {
    'actuators.maa.k': (50.0, 600.0),
    'actuators.baa.k': (30.0, 400.0),
    'actuators.maa.area': (1.5e-4, 8e-4),
    'actuators.baa.area': (1.5e-4, 8e-4),
    'actuators.maa.l0': (0.14, 0.21),
    'actuators.baa.l0': (0.22, 0.29),
    'actuators.maa.c': (0.5, 60.0),
    'actuators.baa.c': (0.5, 60.0),
    'joints.hip.damping': (0.001, 2.0),
    'joints.knee.damping': (0.001, 1.0),
    'valve.time_constant': (0.03, 0.6),
    # the valve model's dead time and its fill and vent constants (valve.time_constant is both)
    'valve.dead_time': (0.0, 0.3),
    'valve.fill_time_constant': (0.02, 1.0),  # both valves
    'valve.vent_time_constant': (0.02, 1.0),
    'valve.fill_time_constant.maa': (0.02, 1.0),  # one valve
    'valve.fill_time_constant.baa': (0.02, 1.0),
    'valve.vent_time_constant.maa': (0.02, 1.0),
    'valve.vent_time_constant.baa': (0.02, 1.0),
    'valve.fill_rate': (20.0, 2000.0),  # kPa/s
    # the regulator: the muscles' slack (kPa), the VPPE's integral gain and its leak (1/s)
    'valve.slack.maa': (0.0, 60.0),
    'valve.slack.baa': (0.0, 60.0),
    'valve.integral_gain.maa': (0.0, 20.0),
    'valve.integral_gain.baa': (0.0, 20.0),
    'valve.integral_leak.maa': (0.0, 5.0),
    'valve.integral_leak.baa': (0.0, 5.0),
    # kPa/s: the slack's least uptake rate (the VPPE open to the supply at any setpoint)
    'valve.slack_rate.maa': (0.0, 400.0),
    'valve.slack_rate.baa': (0.0, 400.0),
    # dry friction (N·m) and armature (kg·m²) of the hinges; the knee's stop (rad)
    'joints.hip.frictionloss': (0.0, 0.5),
    'joints.knee.frictionloss': (0.0, 0.5),
    'joints.hip.armature': (0.0, 0.02),
    'joints.knee.armature': (0.0, 0.02),
    'joints.knee.range.0': (-0.1, 0.05),
    # the muscles' area against length (1/m), S(l) = S·(1 + slope·(l − l0)): pressure stiffening
    'actuators.maa.area_slope': (-20.0, 20.0),
    'actuators.baa.area_slope': (-20.0, 20.0),
    # N·s/m per kPa: the muscles' damping c + c_per_kpa·P (braid friction grows with pressure)
    'actuators.maa.c_per_kpa': (0.0, 3.0),
    'actuators.baa.c_per_kpa': (0.0, 3.0),
    # s the valves' read-back is stamped after the pressure it reports acted, relative to the
    # motion capture's stamps (not a leg parameter: no override file holds it)
    'timing.pressure_lag': (-0.03, 0.03),
}
PAPER_PARAMS = tuple(list(BOUNDS)[:10])  # Table V's ten
VALVE_PARAMS = ('valve.dead_time', 'valve.fill_time_constant', 'valve.vent_time_constant')
VALVE_CHANNEL_PARAMS = (
    'valve.dead_time',
    'valve.fill_time_constant.maa',
    'valve.fill_time_constant.baa',
    'valve.vent_time_constant.maa',
    'valve.vent_time_constant.baa',
)
RATE_PARAMS = ('valve.fill_rate',)
REGULATOR_PARAMS = tuple(
    f'valve.{k}.{a}' for k in ('slack', 'integral_gain', 'integral_leak') for a in ACTUATORS
)
SLACK_RATE_PARAMS = tuple(f'valve.slack_rate.{a}' for a in ACTUATORS)
_REGULATOR_ATTRS = ('slack', 'integral_gain', 'integral_leak', 'slack_rate')
FRICTION_PARAMS = ('joints.hip.frictionloss', 'joints.knee.frictionloss')
ARMATURE_PARAMS = ('joints.hip.armature', 'joints.knee.armature')
AREA_SLOPE_PARAMS = ('actuators.maa.area_slope', 'actuators.baa.area_slope')
PRESSURE_DAMPING_PARAMS = ('actuators.maa.c_per_kpa', 'actuators.baa.c_per_kpa')
#: parameters of the recording, not of the plant
TIMING_PARAMS = ('timing.pressure_lag',)
_VALVE_KEYS = {
    'valve.time_constant': lambda leg: leg.valve_time_constant,
    'valve.dead_time': lambda leg: leg.valve.dead_time,
    'valve.fill_time_constant': lambda leg: leg.valve.channel(0).tau_fill,
    'valve.vent_time_constant': lambda leg: leg.valve.channel(0).tau_vent,
    'valve.fill_time_constant.maa': lambda leg: leg.valve.channel(0).tau_fill,
    'valve.fill_time_constant.baa': lambda leg: leg.valve.channel(1).tau_fill,
    'valve.vent_time_constant.maa': lambda leg: leg.valve.channel(0).tau_vent,
    'valve.vent_time_constant.baa': lambda leg: leg.valve.channel(1).tau_vent,
    'valve.fill_rate': lambda leg: leg.valve.fill_rate,
}


def _regulator_key(attr: str, i: int) -> Callable[[LegDescription], float]:
    return lambda leg: getattr(leg.valve.channel(i), attr)


_VALVE_KEYS.update(
    {
        f'valve.{attr}.{a}': _regulator_key(attr, i)
        for attr in _REGULATOR_ATTRS
        for i, a in enumerate(ACTUATORS)
    }
)


def leg_value(leg: LegDescription, name: str) -> float:
    """Current value of a parameter (override key) in a description."""
    parts = name.split('.')
    if name in TIMING_PARAMS:
        return 0.0  # a description's recordings are taken as stamped right
    if name in _VALVE_KEYS:
        return float(_VALVE_KEYS[name](leg))
    if parts[0] == 'actuators':
        return float(getattr(leg.actuators[parts[1]], parts[2]))
    if parts[0] == 'joints' and len(parts) == 4 and parts[2] == 'range':
        return float(leg.joints[parts[1]].range[int(parts[3])])
    if parts[0] == 'joints':
        return float(getattr(leg.joints[parts[1]], parts[2]))
    raise KeyError(f'unknown parameter {name!r} (known: {sorted(BOUNDS)})')


def valve_of(p: dict, free: Sequence[str] = ()) -> ValveParams:
    """The valve model of a full parameter dict. Free per-valve constants win over free
    constants of both valves, which win over a free valve.time_constant (both valves fill and
    vent with it); the rest comes from the description (per valve)."""
    tau = p['valve.time_constant']
    per_valve = any(n in free for n in VALVE_CHANNEL_PARAMS[1:])
    shared = any(n in free for n in VALVE_PARAMS[1:])

    def pair(kind):
        v = (p[f'valve.{kind}.maa'], p[f'valve.{kind}.baa'])
        return v[0] if v[0] == v[1] else v

    regulator = {k: pair(k) for k in _REGULATOR_ATTRS}
    if 'valve.time_constant' in free and not (per_valve or shared):
        return ValveParams(tau, tau, p['valve.dead_time'], p['valve.fill_rate'], **regulator)

    def per(kind):
        if shared and not per_valve and f'valve.{kind}_time_constant' in free:
            return p[f'valve.{kind}_time_constant']
        v = (p[f'valve.{kind}_time_constant.maa'], p[f'valve.{kind}_time_constant.baa'])
        return v[0] if v[0] == v[1] else v

    return ValveParams(
        per('fill'), per('vent'), p['valve.dead_time'], p['valve.fill_rate'], **regulator
    )


@dataclass
class _Rollout:
    exp: int  # experiment index
    i0: int  # first sample
    n: int  # samples including the start


# token -> compiled state, one per process (workers build it once)
_MODEL_CACHE: dict[str, dict] = {}


class Evaluator:
    """Loss of parameter vectors on a set of experiments; picklable for process pools.

    `names` are the free parameters (override keys), everything else comes from `leg`.
    """

    def __init__(
        self,
        experiments: Sequence[Experiment],
        names: Sequence[str],
        leg: LegDescription | None = None,
        loss: str = 'whole',
        horizon: float = 0.3,
        dt: float = DT,
        sign_weight: float | None = None,
        bounds: dict | None = None,
        aggregate: str = 'mean',
        static_weight: float = 1.0,
        pressure: str = 'command',
    ):
        if pressure not in PRESSURE_SOURCES:
            raise ValueError(f'pressure must be one of {PRESSURE_SOURCES}, got {pressure!r}')
        if pressure == 'measured':
            missing = [e.name for e in experiments if e.pressure_kpa is None and not e.is_static]
            if missing:
                raise ValueError(
                    f'no measured valve pressure in {missing[:3]}: replay the commanded '
                    "pressures (pressure='command') or record /valve/pressure"
                )
        self.pressure = pressure
        self.static_weight = float(static_weight)
        if aggregate not in ('mean', 'max'):
            raise ValueError(f"aggregate must be 'mean' or 'max', got {aggregate!r}")
        self.aggregate = aggregate
        if loss not in ('whole', 'shooting'):
            raise ValueError(f"loss must be 'whole' or 'shooting', got {loss!r}")
        unknown = [n for n in names if n not in BOUNDS]
        if unknown:
            raise ValueError(f'unknown parameters {unknown}; identifiable: {sorted(BOUNDS)}')
        kinds = [
            'valve.time_constant' in names,
            any(n in names for n in VALVE_PARAMS[1:]),
            any(n in names for n in VALVE_CHANNEL_PARAMS[1:]),
        ]
        if sum(kinds) > 1 and set(names) != set(BOUNDS):  # all: a replay of a complete set
            raise ValueError(
                'free parameters: one kind of valve time constant: valve.time_constant (the '
                'lag), the fill and vent constants of both valves, or those of each valve'
            )
        if not experiments:
            raise ValueError('no experiments to identify from')
        self.experiments = list(experiments)
        self.names = list(names)
        self.leg_raw = copy.deepcopy((leg or load_leg()).raw)
        self.loss_kind = loss
        self.horizon = float(horizon)
        self.dt = float(dt)
        self.sign_weight = (
            SIGN_WEIGHT if sign_weight is None and loss == 'whole' else float(sign_weight or 0.0)
        )
        b = dict(BOUNDS)
        b.update(bounds or {})
        self.lower = np.array([b[n][0] for n in self.names], float)
        self.upper = np.array([b[n][1] for n in self.names], float)
        self.sps = []
        for e in self.experiments:
            s = e.dt / self.dt
            if abs(s - round(s)) > 1e-6 or round(s) < 1:
                raise ValueError(
                    f'{e.name}: sample period {e.dt} s is not a multiple of dt {self.dt} s'
                )
            self.sps.append(int(round(s)))
        self.rollouts = self._plan()
        self.token = uuid.uuid4().hex
        self.n_evals = 0

    # ----- set-up (once per process) -----
    def _plan(self) -> list[_Rollout]:
        out = []
        for k, e in enumerate(self.experiments):
            if self.loss_kind == 'whole' or e.is_static:
                out.append(_Rollout(k, 0, len(e)))
            else:
                h = max(2, int(round(self.horizon / e.dt)))
                for i0 in range(0, len(e) - 1, h):
                    n = min(h, len(e) - 1 - i0) + 1
                    if n >= 3:
                        out.append(_Rollout(k, i0, n))
        return out

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != '_state'}

    def _compiled(self):
        st = getattr(self, '_state', None) or _MODEL_CACHE.get(self.token)
        if st is None:
            st = self._compile()
            _MODEL_CACHE.clear()
            _MODEL_CACHE[self.token] = st
        self._state = st
        return st

    def _compile(self) -> dict:
        from equimus_description.leg import from_dict

        leg = from_dict(self.leg_raw).with_timestep(self.dt)
        lm = LegModel(leg)
        m = lm.model
        if PRESSURE_LENGTHENS:
            m.actuator_gear[:, 0] = np.abs(m.actuator_gear[:, 0])
        m.actuator_ctrllimited[:] = 0  # candidate areas may exceed the build's force range
        for j in leg.joints:  # dry friction of any candidate as the simulation builds it
            dof = m.jnt_dofadr[m.joint(j).id]
            fc = friction_constraint(leg, self.dt)
            m.dof_solref[dof] = fc['solreffriction']
            m.dof_solimp[dof] = fc['solimpfriction']
        d = mujoco.MjData(m)
        acts = list(leg.actuators)
        seg_j = np.array([[m.joint(s).id for s in seg_names(a)] for a in acts])
        st = dict(
            leg=leg,
            lm=lm,
            model=m,
            data=d,
            acts=acts,
            seg_qadr=m.jnt_qposadr[seg_j],
            seg_dof=m.jnt_dofadr[seg_j],
            seg_jnt=seg_j,
            build_len=lm._build_len.copy(),
            joint_dof={j: m.jnt_dofadr[m.joint(j).id] for j in leg.joints},
            joint_id={j: m.joint(j).id for j in leg.joints},
            spec=mujoco.mjtState.mjSTATE_FULLPHYSICS,
        )
        nstate = mujoco.mj_stateSize(m, st['spec'])
        st['qpos_cols'] = 1 + lm.qpos_idx  # FULLPHYSICS state = [time, qpos, qvel, act, ...]
        init = np.zeros((len(self.rollouts), nstate))
        for r, ro in enumerate(self.rollouts):
            e = self.experiments[ro.exp]
            lm.reset(d, e.start_q[ro.i0], e.qd[ro.i0])
            mujoco.mj_getState(m, d, init[r], st['spec'])
        # one mujoco.rollout call per rollout length, so a few long rollouts (static holds,
        # whole trajectories) do not make every short shooting segment run as long
        lengths = [(ro.n - 1) * self.sps[ro.exp] for ro in self.rollouts]
        st['batches'] = []
        st['where'] = [(0, 0)] * len(self.rollouts)
        for nstep in sorted(set(lengths)):
            idx = [r for r, n in enumerate(lengths) if n == nstep]
            for row, r in enumerate(idx):
                st['where'][r] = (len(st['batches']), row)
            st['batches'].append(
                dict(
                    nstep=nstep,
                    init=init[idx],
                    ctrl=np.zeros((len(idx), nstep, m.nu)),
                    out=np.zeros((len(idx), nstep, nstate)),
                )
            )
        st['base'] = {n: leg_value(leg, n) for n in BOUNDS}
        return st

    # ----- the rollouts' start states -----
    def start_states(self) -> np.ndarray:
        """(rollouts, 4): the measured state each rollout starts from, [q_hip, q_knee, qd_hip,
        qd_knee] (rad, rad/s)."""
        return np.array(
            [
                np.concatenate(
                    [self.experiments[ro.exp].start_q[ro.i0], self.experiments[ro.exp].qd[ro.i0]]
                )
                for ro in self.rollouts
            ]
        )

    def set_starts(self, rows: Sequence[int], states: np.ndarray) -> None:
        """Start rollouts `rows` from `states` ((len(rows), 4) as `start_states`) instead of
        the measured ones: multiple shooting with the window starts as free variables, so the
        motion capture's noise at a start is estimated, not inherited (a leg that forgets an
        initial error faster fitted the noisy starts better)."""
        st = self._compiled()
        m, d, lm = st['model'], st['data'], st['lm']
        starts = st.setdefault('starts', {})
        for r, x in zip(rows, np.asarray(states, float), strict=True):
            if r in starts and np.array_equal(starts[r], x):
                continue
            lm.reset(d, x[:2], x[2:])
            b, row = st['where'][r]
            mujoco.mj_getState(m, d, st['batches'][b]['init'][row], st['spec'])
            starts[r] = x.copy()

    # ----- parameters -----
    def to_unit(self, x) -> np.ndarray:
        return (np.asarray(x, float) - self.lower) / (self.upper - self.lower)

    def from_unit(self, u) -> np.ndarray:
        return self.lower + np.clip(np.asarray(u, float), 0.0, 1.0) * (self.upper - self.lower)

    def full_params(self, x) -> dict:
        """Every identifiable parameter: the free ones from x, the rest from the leg."""
        p = dict(self._compiled()['base'])
        p.update(zip(self.names, map(float, x), strict=True))
        return p

    def _apply(self, p: dict):
        st = self._compiled()
        m = st['model']
        for i, a in enumerate(st['acts']):
            m.jnt_stiffness[st['seg_jnt'][i]] = 2.0 * p[f'actuators.{a}.k']
            m.dof_damping[st['seg_dof'][i]] = 2.0 * p[f'actuators.{a}.c']
            m.qpos_spring[st['seg_qadr'][i]] = (p[f'actuators.{a}.l0'] - st['build_len'][i]) / 2.0
            slope, c_p = p[f'actuators.{a}.area_slope'], p[f'actuators.{a}.c_per_kpa']
            motors = st['lm'].ctrl_idx[i]
            affine = m.actuator_gaintype[motors[0]] == mujoco.mjtGain.mjGAIN_AFFINE
            if slope != 0.0 or c_p != 0.0 or affine:
                m.actuator_gaintype[motors] = mujoco.mjtGain.mjGAIN_AFFINE
                m.actuator_gainprm[motors, :3] = slide_gain(
                    slope, st['build_len'][i], p[f'actuators.{a}.l0'], c_p,
                    p[f'actuators.{a}.area'],
                )  # fmt: skip
        for j, dof in st['joint_dof'].items():
            m.dof_damping[dof] = p[f'joints.{j}.damping']
            for attr in ('frictionloss', 'armature'):
                key = f'joints.{j}.{attr}'
                if key in p:
                    getattr(m, f'dof_{attr}')[dof] = p[key]
            key = f'joints.{j}.range.0'
            if key in p:
                m.jnt_range[st['joint_id'][j], 0] = p[key]

    def _valve(self, e: Experiment, sps: int, valve: ValveParams, lag: float | None) -> np.ndarray:
        """Valve pressure (kPa) at every physics step of an experiment, (n_steps, 2): the
        description's valve model from the experiment's start pressure (settled there), or the
        measured one; with a read-back `lag` (s, free), the read-back series interpolated at
        each step's time + lag."""
        if self.pressure == 'measured' and e.pressure_kpa is not None:
            if lag is not None and e.pressure_series is not None:
                t_src, p_src = e.pressure_series
                t = np.arange((len(e) - 1) * sps) * self.dt + lag
                return np.stack([np.interp(t, t_src, p_src[:, j]) for j in range(2)], axis=1)
            return np.repeat(e.pressure_kpa[:-1], sps, axis=0)  # the valve state as measured
        u = np.repeat(e.command_kpa[:-1], sps, axis=0)
        p, _ = follow(valve, u, e.p0_kpa, self.dt)
        return p

    # ----- simulation -----
    def simulate(self, x) -> list[np.ndarray]:
        """Simulated joint angles of every rollout on the experiments' sample grid, (n, 2) each."""
        st = self._compiled()
        p = self.full_params(x)
        self._apply(p)
        m, batches = st['model'], st['batches']
        areas = np.array([p[f'actuators.{a}.area'] for a in st['acts']])
        ctrl_idx = st['lm'].ctrl_idx
        valve = valve_of(p, self.names)
        lag = p['timing.pressure_lag'] if 'timing.pressure_lag' in self.names else None
        valves = {}
        for r, ro in enumerate(self.rollouts):
            if ro.exp not in valves:
                e = self.experiments[ro.exp]
                valves[ro.exp] = self._valve(e, self.sps[ro.exp], valve, lag)
            sps = self.sps[ro.exp]
            pv = valves[ro.exp][ro.i0 * sps : (ro.i0 + ro.n - 1) * sps]
            F = pv * areas * 1e3
            b, row = st['where'][r]
            ctrl = batches[b]['ctrl']
            ctrl[row, :] = 0.0
            for i in range(len(st['acts'])):
                ctrl[row, :, ctrl_idx[i][0]] = F[:, i]
                ctrl[row, :, ctrl_idx[i][-1]] = F[:, i]
        for bt in batches:
            mujoco.rollout.rollout(
                [m] * len(bt['init']),
                [st['data']],
                bt['init'],
                bt['ctrl'],
                nstep=bt['nstep'],
                state=bt['out'],
                skip_checks=True,
            )
        out = []
        starts = st.get('starts', {})
        for r, ro in enumerate(self.rollouts):
            sps = self.sps[ro.exp]
            b, row = st['where'][r]
            state = batches[b]['out']
            qs = state[row, sps - 1 : (ro.n - 1) * sps : sps][:, st['qpos_cols']]
            q0 = starts[r][:2] if r in starts else self.experiments[ro.exp].start_q[ro.i0]
            out.append(np.vstack([q0[None, :], qs]))
        return out

    def residual_rows(self) -> list[slice]:
        """The slice of `residuals` each rollout fills (for a Jacobian's sparsity)."""
        out, i = [], 0
        for ro in self.rollouts:
            n = 2 if self.experiments[ro.exp].is_static else 2 * ro.n
            out.append(slice(i, i + n))
            i += n
        return out

    def _tail(self, ro: _Rollout) -> int:
        e = self.experiments[ro.exp]
        return max(1, int(round(STATIC_TAIL_S / e.dt)))

    def static_error(self, ro: _Rollout, q_sim) -> np.ndarray:
        """Rest angle of a static hold minus the measured equilibrium (rad, per joint)."""
        return np.mean(q_sim[-self._tail(ro) :], axis=0) - self.experiments[ro.exp].q[0]

    @property
    def n_static(self) -> int:
        return sum(1 for ro in self.rollouts if self.experiments[ro.exp].is_static)

    @property
    def n_dynamic_residuals(self) -> int:
        return 2 * sum(ro.n for ro in self.rollouts if not self.experiments[ro.exp].is_static)

    def loss_of_sims(self, sims) -> float:
        per, stat = [], []
        for ro, q_sim in zip(self.rollouts, sims, strict=True):
            q_meas = self.experiments[ro.exp].q[ro.i0 : ro.i0 + ro.n]
            bad = not np.all(np.isfinite(q_sim)) or np.max(np.abs(q_sim)) > 1e3
            if self.experiments[ro.exp].is_static:
                stat.append(FAIL_LOSS if bad else float(np.mean(self.static_error(ro, q_sim) ** 2)))
                continue
            if bad:
                per.append(FAIL_LOSS)
                continue
            e = np.mean((q_sim - q_meas) ** 2)
            if self.sign_weight:
                e += self.sign_weight * np.mean(
                    (np.sign(np.diff(q_sim, axis=0)) - np.sign(np.diff(q_meas, axis=0))) ** 2
                )
            per.append(e)
        # 'max' targets the worst rollout (the paper's 'RMSE under 0.0325 for all experiments')
        dyn = (np.max(per) if self.aggregate == 'max' else np.mean(per)) if per else 0.0
        if not stat:
            return float(dyn)
        return float(dyn + (self.static_weight if per else 1.0) * np.mean(stat))

    def residuals_of_sims(self, sims) -> np.ndarray:
        """Simulated minus measured angles of every rollout sample, one vector (rad).

        A static hold contributes its rest-angle error, scaled so that the sum of squares is
        n_dyn × (pooled dynamic MSE + static_weight × static MSE), the loss the weights state.
        """
        out = []
        n_dyn, n_stat = self.n_dynamic_residuals, 2 * self.n_static
        w_stat = math.sqrt(self.static_weight * n_dyn / n_stat) if n_dyn and n_stat else 1.0
        for ro, q_sim in zip(self.rollouts, sims, strict=True):
            q_meas = self.experiments[ro.exp].q[ro.i0 : ro.i0 + ro.n]
            if self.experiments[ro.exp].is_static:
                r = w_stat * self.static_error(ro, q_sim)
            else:
                r = (q_sim - q_meas).ravel()
            if not np.all(np.isfinite(r)) or np.max(np.abs(q_sim)) > 1e3:
                r = np.full(r.shape, math.sqrt(FAIL_LOSS))
            out.append(r)
        return np.concatenate(out)

    def residuals(self, x) -> np.ndarray:
        """Residual vector of physical parameters x (what least squares and the Jacobian see)."""
        self.n_evals += 1
        try:
            return self.residuals_of_sims(self.simulate(x))
        except Exception:
            return np.full(self.n_residuals, math.sqrt(FAIL_LOSS))

    @property
    def n_residuals(self) -> int:
        return self.n_dynamic_residuals + 2 * self.n_static

    def __call__(self, u) -> float:
        """Loss of a point in the unit cube (what the optimisers see)."""
        self.n_evals += 1
        try:
            return self.loss_of_sims(self.simulate(self.from_unit(u)))
        except Exception:  # a candidate that breaks the simulator is just a bad candidate
            return FAIL_LOSS

    @property
    def steps_per_eval(self) -> int:
        return int(sum((ro.n - 1) * self.sps[ro.exp] for ro in self.rollouts))


BOUND_TOL = 1e-3  # a parameter within this fraction of its range from a bound is on it


def at_bounds(ev: Evaluator, x) -> list[str]:
    """The free parameters of x that sit on a bound of ev's search range, as
    'name (lower 0.14)' entries: a sign that the data push beyond the range (model error, or a
    range too narrow for the physics)."""
    u = ev.to_unit(x)
    out = []
    for n, ui, lo, hi in zip(ev.names, u, ev.lower, ev.upper, strict=True):
        if ui <= BOUND_TOL:
            out.append(f'{n} (lower {lo:g})')
        elif ui >= 1.0 - BOUND_TOL:
            out.append(f'{n} (upper {hi:g})')
    return out


def _errors(err: np.ndarray) -> dict:
    ok = err.size > 0 and bool(np.all(np.isfinite(err)))
    return {
        'rmse': np.sqrt(np.mean(err**2, axis=0)) if ok else np.full(2, np.nan),
        'maxae': np.max(np.abs(err), axis=0) if ok else np.full(2, np.nan),
        'rmse_all': float(np.sqrt(np.mean(err**2))) if ok else float('nan'),
    }


def metrics(
    experiments: Sequence[Experiment],
    x,
    names,
    leg=None,
    dt: float = DT,
    pressure: str = 'command',
) -> list[dict]:
    """Per-experiment RMSE and MaxAE per joint of the whole-trajectory simulation.

    A static hold is scored on its rest angles (RMSE = MaxAE = the equilibrium error); an
    experiment with meta['segments'] (segment start times, s) also gets per-segment figures, one
    with meta['phases'] ((phase, t0, t1[, segment]) intervals) per-phase figures pooled over its
    segments (`phases`: {phase: errors}).
    """
    ev = Evaluator(experiments, names, leg=leg, loss='whole', dt=dt, pressure=pressure)
    sims = ev.simulate(x)
    out = []
    for ro, e, q_sim in zip(ev.rollouts, experiments, sims, strict=True):  # one rollout each
        err = ev.static_error(ro, q_sim)[None, :] if e.is_static else q_sim - e.q
        m = {'name': e.name, **_errors(err), 't': e.t, 'q': e.q, 'q_sim': q_sim}
        m['static'] = e.is_static
        if e.is_static:
            m['q_rest'] = e.q[0] + err[0]
        if e.pressure_kpa is not None:
            m['pressure'] = e.pressure_kpa
        m['command'] = e.command_kpa
        bounds = list(e.meta.get('segments', ())) + [float(e.t[-1]) + e.dt]
        labels = e.meta.get('segment_names') or [f'{e.name}@{a:.2f}s' for a in bounds[:-1]]
        m['segments'] = [
            {'name': lbl, 't0': a, **_errors(err[(e.t >= a) & (e.t < b)])}
            for lbl, a, b in zip(labels, bounds[:-1], bounds[1:], strict=True)
            if np.any((e.t >= a) & (e.t < b))
        ]
        m['phases'] = phase_errors(e, err) if not e.is_static else {}
        out.append(m)
    return out


def phase_masks(e: Experiment) -> dict:
    """{phase: boolean mask over e.t} from meta['phases'] (empty without phases)."""
    masks: dict = {}
    for ph in e.meta.get('phases', ()):
        name, a, b = ph[0], ph[1], ph[2]
        mask = (e.t >= a - 1e-9) & (e.t < b - 1e-9)
        masks[name] = masks.get(name, np.zeros(len(e.t), bool)) | mask
    return masks


def phase_errors(e: Experiment, err: np.ndarray) -> dict:
    """RMSE and MaxAE per joint of each phase (fill, hold, release), pooled over segments."""
    return {
        name: {**_errors(err[mask]), 'n': int(mask.sum())}
        for name, mask in phase_masks(e).items()
        if mask.any()
    }


def identifiability(ev: Evaluator, x, rel_step: float = 1e-3) -> dict:
    """How well the data determine each parameter at x: relative standard errors from the
    Gauss-Newton covariance σ²(JᵀJ)⁻¹ in log-parameter coordinates.

    σ² is the residual variance at x. Residuals of neighbouring samples are correlated, so the
    errors are lower bounds; a parameter whose error is a sizeable fraction of its value is not
    identifiable from these experiments (richer excitation is needed, not a longer search).
    Costs one simulation per parameter plus one.
    """
    x = np.asarray(x, float)
    r0 = ev.residuals(x)
    J = np.empty((r0.size, len(x)))
    for i in range(len(x)):
        xi = x.copy()
        xi[i] *= 1.0 + rel_step
        J[:, i] = (ev.residuals(xi) - r0) / rel_step
    return covariance_summary(ev.names, x, J, r0)


def covariance_summary(names: Sequence[str], x, J: np.ndarray, r0: np.ndarray) -> dict:
    """Standard errors, correlations and singular values from the residual Jacobian J in
    log-parameter coordinates (columns ∂r/∂log xᵢ) and the residuals r0 at the optimum."""
    x = np.asarray(x, float)
    dof = max(1, r0.size - len(x))
    sigma2 = float(r0 @ r0) / dof
    jtj = J.T @ J
    cov = np.linalg.pinv(jtj) * sigma2
    rse = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    with np.errstate(divide='ignore', invalid='ignore'):
        corr = cov / np.outer(rse, rse)
    corr = np.nan_to_num(corr)
    _, sv, vt = np.linalg.svd(J, full_matrices=False)
    weakest = {n: float(v) for n, v in zip(names, vt[-1], strict=True) if abs(v) > 0.2}
    return {
        'relative_std_error': dict(zip(names, map(float, rse), strict=True)),
        'std_error': dict(zip(names, map(float, rse * np.abs(x)), strict=True)),
        'correlation': corr.tolist(),
        'singular_values': (sv / sv[0]).tolist() if sv[0] > 0 else sv.tolist(),
        'singular_vectors': vt.tolist(),
        'names': list(names),
        'value': list(map(float, x)),
        'residual_rms_rad': math.sqrt(float(r0 @ r0) / r0.size),
        'condition_number': float(sv[0] / sv[-1]) if sv[-1] > 0 else float('inf'),
        'weakest_direction': weakest,
    }


# ---------------------------------------------------------------- optimisation driver


@dataclass
class FitResult:
    names: list
    x: np.ndarray
    loss: float
    x_de: np.ndarray
    loss_de: float
    generations: int
    evaluations: int
    wall_s: float
    interrupted: bool = False
    history: list = field(default_factory=list)

    def parameters(self) -> dict:
        return {n: float(v) for n, v in zip(self.names, self.x, strict=True)}


def _save_checkpoint(path, payload):
    tmp = f'{path}.tmp'
    with open(tmp, 'wb') as f:
        pickle.dump(payload, f)
    os.replace(tmp, path)


def load_checkpoint(path) -> dict | None:
    try:
        with open(path, 'rb') as f:
            return pickle.load(f)
    except FileNotFoundError:
        return None


class UnitResiduals:
    """ev's residual vector at a point of the unit cube: picklable, for the workers of the
    refinement's finite differences; `count` (not sent to them) hears every call made here."""

    def __init__(self, ev: Evaluator, count: Callable[[], None] | None = None) -> None:
        self.ev, self.count = ev, count

    def __call__(self, u: np.ndarray) -> np.ndarray:
        if self.count is not None:
            self.count()
        return self.ev.residuals(self.ev.from_unit(u))

    def __getstate__(self) -> dict:
        return {'ev': self.ev, 'count': None}


#: least_squares takes a map-like `workers` for its finite differences (scipy 1.16 on), which
#: then equal the serial ones
LSQ_WORKERS = 'workers' in inspect.signature(least_squares).parameters


def fit(
    ev: Evaluator,
    popsize: int = 15,
    maxiter: int = 100,
    workers: Callable = map,
    seed: int | None = 0,
    checkpoint: str | None = None,
    refine: str = 'nelder-mead',
    refine_maxfev: int = 300,
    refine_evaluator: Evaluator | None = None,
    tol: float = 1e-6,
    x0: Sequence[float] | np.ndarray | None = None,
    log: Callable = print,
    progress: bool = False,
) -> FitResult:
    """Differential evolution over the unit cube, one generation at a time, then a local refinement.

    popsize: individuals = popsize × number of parameters (scipy's convention).
    workers: a map-like callable (parallel.Mapper, builtins.map, ...).
    checkpoint: a file rewritten after every generation (population, energies, best); if it
    exists and matches the parameter names, the run resumes from it. Ctrl-C stops after saving.
    refine_evaluator: loss for a scalar refinement (default: ev).
    progress: a tqdm bar over the generations (with the remaining-time estimate) on stderr.
    refine: 'lm' = trust-region least squares on ev's residual vector (Gauss-Newton steps, far
    fewer evaluations than a simplex for many parameters; needs a sum-of-squares loss, i.e.
    ev without the sign term), 'nelder-mead' or 'lbfgsb' on the scalar loss, '' = none.
    """
    from scipy.optimize._differentialevolution import DifferentialEvolutionSolver

    n = len(ev.names)
    t0 = time.monotonic()
    init: str | np.ndarray = 'latinhypercube'  # scipy's init: a method name or a population
    start_gen, history = 0, []
    ck = load_checkpoint(checkpoint) if checkpoint else None
    if ck is not None:
        if ck.get('names') != ev.names:
            raise ValueError(
                f'checkpoint {checkpoint} was written for parameters {ck.get("names")}, '
                f'not {ev.names}: delete it or pass another --checkpoint'
            )
        init = np.asarray(ck['population'])
        start_gen, history = int(ck['generation']), list(ck.get('history', []))
        log(f'resuming from {checkpoint}: generation {start_gen}, best loss {ck["best_loss"]:.6g}')
    elif x0 is not None:
        rng = np.random.default_rng(seed)
        pop = rng.random((popsize * n, n))
        pop[0] = np.clip(ev.to_unit(x0), 0, 1)
        init = pop
    solver = DifferentialEvolutionSolver(
        ev,
        [(0.0, 1.0)] * n,
        popsize=popsize,
        maxiter=maxiter,
        init=init,
        rng=seed,
        workers=workers,
        updating='deferred',
        polish=False,
        tol=tol,
    )
    interrupted = False
    gen = start_gen
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=maxiter, initial=start_gen, desc='DE', unit='gen', leave=False)
    try:
        while gen < maxiter:
            tg = time.monotonic()
            next(solver)
            gen += 1
            best = float(solver.population_energies[0])
            if bar is not None:
                bar.update(1)
                bar.set_postfix(best=f'{best:.4g}')
            spread = float(np.std(solver.population_energies))
            history.append((gen, best, time.monotonic() - t0))
            log(
                f'gen {gen:4d}/{maxiter}  best {best:.6g}  spread {spread:.3g}  '
                f'{time.monotonic() - tg:.2f} s/gen  '
                + ' '.join(f'{v:.4g}' for v in ev.from_unit(solver.x))
            )
            if checkpoint:
                _save_checkpoint(
                    checkpoint,
                    dict(
                        names=ev.names,
                        generation=gen,
                        population=solver.population.copy(),
                        energies=solver.population_energies.copy(),
                        best_x=ev.from_unit(solver.x),
                        best_loss=best,
                        history=history,
                    ),
                )
            if solver.converged():
                log(f'converged at generation {gen} (population spread {spread:.3g})')
                break
    except (KeyboardInterrupt, StopIteration) as exc:
        interrupted = isinstance(exc, KeyboardInterrupt)
        if interrupted:
            log(
                f'interrupted at generation {gen}; '
                + (
                    f'resume with the same command (checkpoint {checkpoint})'
                    if checkpoint
                    else 'no checkpoint file was given'
                )
            )
    finally:
        if bar is not None:
            bar.close()
    u_de = np.array(solver.x, float)
    loss_de = float(ev(u_de))
    u, loss = u_de, loss_de
    rev = ev if refine == 'lm' else (refine_evaluator or ev)
    if refine and not interrupted:
        loss_start = float(rev(u_de)) if rev is not ev else loss_de
        log(
            f'local refinement ({refine}, ≤ {refine_maxfev} evaluations) from loss {loss_start:.6g}'
        )
        evals0 = ev.n_evals + (rev.n_evals if rev is not ev else 0)
        rbar = None
        if progress:
            from tqdm import tqdm

            rbar = tqdm(total=refine_maxfev, desc=f'refine ({refine})', unit='sim', leave=False)

        def counted(fn):
            def call(v):
                if rbar is not None:
                    rbar.update(1)
                return fn(v)

            return call

        try:
            if refine == 'nelder-mead':
                simplex = np.clip(u_de + np.vstack([np.zeros(n), 0.03 * np.eye(n)]), 0, 1)
                r = minimize(
                    counted(rev),
                    u_de,
                    method='Nelder-Mead',
                    bounds=[(0, 1)] * n,
                    options={
                        'maxfev': refine_maxfev,
                        'xatol': 1e-5,
                        'fatol': 1e-10,
                        'initial_simplex': simplex,
                    },
                )
            elif refine == 'lm':
                if ev.sign_weight:
                    raise ValueError(
                        "refine 'lm' needs a sum-of-squares loss: use the shooting "
                        'loss or sign_weight 0'
                    )
                # the Jacobian's points on the differential evolution's workers, where they
                # are not this process (builtins.map) and scipy takes them
                parallel = LSQ_WORKERS and workers is not map
                mapped = [0]

                def counted_map(fn, points):
                    points = list(points)
                    mapped[0] += len(points)
                    if rbar is not None:
                        rbar.update(len(points))
                    return workers(fn, points)

                here = UnitResiduals(ev, (lambda: rbar.update(1)) if rbar is not None else None)
                r = least_squares(
                    here,
                    u_de,
                    bounds=(0.0, 1.0),
                    method='trf',
                    x_scale='jac',
                    diff_step=1e-4,
                    max_nfev=max(1, refine_maxfev // (n + 1)),
                    **({'workers': counted_map} if parallel else {}),
                )
                r.fun = float(ev(r.x))
                ev.n_evals += mapped[0]  # the workers' simulations, in this process's count
            elif refine == 'lbfgsb':
                r = minimize(
                    counted(rev),
                    u_de,
                    method='L-BFGS-B',
                    bounds=[(0, 1)] * n,
                    options={'maxfun': refine_maxfev, 'eps': 1e-4},
                )
            else:
                raise ValueError(
                    f"refine must be 'lm', 'nelder-mead', 'lbfgsb' or '', got {refine!r}"
                )
            if r.fun <= loss_start:
                u = np.clip(r.x, 0, 1)
                loss = float(r.fun) if rev is ev else float(ev(u))
            used = ev.n_evals + (rev.n_evals if rev is not ev else 0) - evals0
            log(f'refined loss {r.fun:.6g} after {used} evaluations')
        except KeyboardInterrupt:
            interrupted = True
            log('refinement interrupted; keeping the differential-evolution result')
        finally:
            if rbar is not None:
                rbar.close()
    return FitResult(
        list(ev.names),
        ev.from_unit(u),
        loss,
        ev.from_unit(u_de),
        loss_de,
        gen,
        int(solver._nfev) + ev.n_evals,
        time.monotonic() - t0,
        interrupted,
        history,
    )
