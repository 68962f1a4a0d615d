"""Gradient-based identification (seeds/003): Gauss-Newton steps on multiple-shooting windows.

The residuals are `dynamic.Evaluator`'s (simulated minus measured angles of every window sample,
each window restarted from the measured state, the valve state carried over the whole
experiment; static holds as their rest-angle error), so both methods minimise the same loss.
What differs from the search (`dynamic.fit`: differential evolution, then a local refinement) is
that there is no population: a trust-region Gauss-Newton iteration (scipy's `least_squares`,
'trf', in the unit cube of the bounds) starts from the start set and takes one residual Jacobian
per step. Two ways to get that Jacobian:

- 'mjx': exact derivatives through the differentiable simulator MuJoCo XLA (the `mjx` extra,
  `bash scripts/setup.sh --mjx`; `jax` on the CPU). The valve/chamber model (dead time, fill
  and vent constants) runs in JAX beside MJX (`valve_pressures`), every window is one
  `jax.lax.scan` of `mjx.step`, all windows one `jax.vmap`, and the Jacobian is forward mode
  (`jax.jacfwd`): reverse mode fails on MJX's constraint solver, a `lax.while_loop` (the loop
  closures, the joint limits and the dry friction are constraints in this model).
- 'fd' (default): forward differences of the same residuals through `mujoco.rollout` (the C
  simulator), one column per parameter, the columns spread over the process pool. No extra.

On a CPU the MJX Jacobian costs more than the finite differences (docs/identification.md), so
`auto` takes 'mjx' only where jax has an accelerator. Not ported to JAX: the fill rate limit
(`valve.fill_rate`) and replaying measured pressures; both are refused with one line.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import math
import os
import pathlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np
from scipy.optimize import least_squares

from . import dynamic as D

JACOBIANS = ('fd', 'mjx', 'auto')
FD_STEP = 1e-4  # forward-difference step in the unit cube (the search's refinement uses the same)


class MethodError(ValueError):
    """A request the gradient method cannot serve (one line for the user)."""


def _jax() -> tuple[Any, Any, Any]:
    """(jax, jax.numpy, mujoco.mjx), imported at run time: the optional extra. x64 on (float32
    loses the millirad residuals), and a persistent compilation cache, because compiling the
    Jacobian of a rollout takes minutes on a loaded two-core machine."""
    jax = importlib.import_module('jax')
    jax.config.update('jax_enable_x64', True)
    cache = os.environ.get('EQUIMUS_JAX_CACHE') or str(
        pathlib.Path(os.environ.get('XDG_CACHE_HOME') or pathlib.Path.home() / '.cache')
        / 'equimus'
        / 'jax'
    )
    jax.config.update('jax_compilation_cache_dir', cache)
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 2.0)
    with contextlib.redirect_stdout(io.StringIO()):  # MJX prints that its optional warp is absent
        mjx = importlib.import_module('mujoco.mjx')
    return jax, importlib.import_module('jax.numpy'), mjx


def mjx_available() -> str | None:
    """None when the MJX Jacobian can run here, else why not (one line). Looks the packages up
    without importing them: JAX's threads would make the process pool's fork unsafe."""
    for name in ('jax', 'mujoco.mjx'):
        if importlib.util.find_spec(name) is None:
            return f'the mjx extra is not installed (no {name}): bash scripts/setup.sh --mjx'
    return None


# jax's accelerator plugins; `auto` takes MJX only where one is installed
ACCELERATOR_PLUGINS = ('jax_cuda12_plugin', 'jax_cuda13_plugin', 'jax_rocm7_plugin')


def resolve_jacobian(kind: str) -> str:
    """'fd' or 'mjx' for a request; 'auto' takes MJX only where jax has an accelerator plugin:
    on a CPU its Jacobian is slower than the finite differences (docs/identification.md)."""
    if kind not in JACOBIANS:
        raise MethodError(f'jacobian must be one of {JACOBIANS}, got {kind!r}')
    if kind == 'auto':
        if mjx_available():
            return 'fd'
        gpu = any(importlib.util.find_spec(n) is not None for n in ACCELERATOR_PLUGINS)
        return 'mjx' if gpu else 'fd'
    if kind == 'mjx':
        why = mjx_available()
        if why:
            raise MethodError(f'--jacobian mjx: {why}; or use --jacobian fd (no extra)')
    return kind


# ---------------------------------------------------------------- finite differences (no extra)


class _Residuals:
    """Picklable residual function of a unit-cube point (for the process pool)."""

    def __init__(self, ev: D.Evaluator):
        self.ev = ev

    def __call__(self, u) -> np.ndarray:
        return self.ev.residuals(self.ev.from_unit(u))


def fd_jacobian(ev: D.Evaluator, u, r0: np.ndarray, mapper: Callable = map) -> np.ndarray:
    """Forward-difference Jacobian of ev's residuals in the unit cube, one simulation per
    column, the columns through `mapper` (a step that would leave the cube goes backwards)."""
    u = np.asarray(u, float)
    steps = np.where(u + FD_STEP <= 1.0, FD_STEP, -FD_STEP)
    points = [u + s * e for s, e in zip(steps, np.eye(len(u)), strict=True)]
    cols = list(mapper(_Residuals(ev), points))
    return np.column_stack([(c - r0) / s for c, s in zip(cols, steps, strict=True)])


# ---------------------------------------------------------------- MJX (the optional extra)


def valve_pressures(jnp: Any, u, p0, dt: float, tau_fill, tau_vent, dead_time, max_delay: int):
    """The description's valve/chamber model (equimus_description.valve.follow) in JAX: pressure
    at the end of every step for per-step commands u (S, 2) from settled p0 (2,).

    Over step k the chamber sees u[k − D − 1] for f·dt, then u[k − D] (dead time (D + f)·dt, so
    the dead time is a continuous parameter); each part relaxes exactly towards its input with
    τ_fill while filling and τ_vent while venting. max_delay: the most whole steps D can be.
    """
    jax = importlib.import_module('jax')
    r = dead_time / dt
    d = jax.lax.stop_gradient(jnp.floor(r))
    f = r - d
    hist = jnp.broadcast_to(p0, (max_delay + 1, u.shape[-1]))
    ext = jnp.concatenate([hist, u], axis=0)
    k = jnp.arange(u.shape[0])
    second = ext[max_delay + 1 + k - d.astype(int)]
    first = ext[max_delay + k - d.astype(int)]

    def relax(p, v, h):
        tau = jnp.where(v > p, tau_fill, tau_vent)
        return v + (p - v) * jnp.exp(-h / tau)

    def step(p, io):
        a, b = io
        p = relax(relax(p, a, f * dt), b, (1.0 - f) * dt)
        return p, p

    return jax.lax.scan(step, jnp.asarray(p0, float), (first, second))[1]


class MjxResiduals:
    """ev's residual vector and its exact Jacobian in the unit cube, through MJX."""

    def __init__(self, ev: D.Evaluator, u_start):
        jax, jnp, mjx = _jax()
        self.ev = ev
        names = list(ev.names)
        if 'valve.fill_rate' in names:
            raise MethodError(
                '--jacobian mjx: the fill rate limit (valve.fill_rate) is not modelled in JAX; '
                'use --jacobian fd'
            )
        if ev.pressure != 'command':
            raise MethodError('--jacobian mjx replays commanded pressures only; use --jacobian fd')
        st = ev._compiled()
        p_start = ev.full_params(ev.from_unit(u_start))
        if any(n in names or p_start[n] != 0.0 for n in D.AREA_SLOPE_PARAMS):
            raise MethodError(
                "--jacobian mjx: the muscles' area against length (actuators.*.area_slope) is "
                'not modelled in JAX; use --jacobian fd'
            )
        if any(n in names or p_start[n] != 0.0 for n in D.PRESSURE_DAMPING_PARAMS):
            raise MethodError(
                "--jacobian mjx: the muscles' damping per kPa (actuators.*.c_per_kpa) is not "
                'modelled in JAX; use --jacobian fd'
            )
        valve = D.valve_of(p_start, names)
        if valve.has_regulator or any(n in names for n in D.REGULATOR_PARAMS + D.SLACK_RATE_PARAMS):
            raise MethodError(
                "--jacobian mjx: the valve's regulator (valve.slack, valve.integral_*) is a "
                'recursion not modelled in JAX; use --jacobian fd'
            )
        if not np.all(np.isinf(valve.fill_rate)):
            raise MethodError(
                '--jacobian mjx: the valve has a fill rate limit, not modelled in JAX; '
                'use --jacobian fd'
            )
        ev._apply(p_start)
        m = st['model']
        for n in names:  # MJX sizes its constraints once: keep a friction row for a free friction
            if n.endswith('.frictionloss'):
                m.dof_frictionloss[st['joint_dof'][n.split('.')[1]]] = max(p_start[n], 1e-6)
        self.mx = mjx.put_model(m)
        self.dt = ev.dt
        lm = st['lm']
        qi = np.asarray(lm.qpos_idx)
        ctrl_idx = np.asarray(lm.ctrl_idx)
        acts = st['acts']
        lower, span = jnp.asarray(ev.lower), jnp.asarray(ev.upper - ev.lower)
        base = {k: float(v) for k, v in p_start.items()}
        max_delay = (
            int(math.ceil(ev.upper[names.index('valve.dead_time')] / ev.dt) + 1)
            if ('valve.dead_time' in names)
            else int(math.ceil(base['valve.dead_time'] / ev.dt) + 1)
        )

        # per-experiment commands on the physics grid, padded to one length
        exps = ev.experiments
        steps = [(len(e) - 1) * s for e, s in zip(exps, ev.sps, strict=True)]
        s_max = max(steps)
        u_all = np.zeros((len(exps), s_max, 2))
        for k, (e, s) in enumerate(zip(exps, ev.sps, strict=True)):
            cmd = np.repeat(e.command_kpa[:-1], s, axis=0)
            u_all[k, : len(cmd)] = cmd
            u_all[k, len(cmd) :] = cmd[-1]
        p0_all = np.array([e.p0_kpa for e in exps], float)

        # rollouts grouped into dynamic windows and static holds, each group padded to one length
        d = mujoco.MjData(m)
        groups = []
        n_dyn, n_stat = ev.n_dynamic_residuals, 2 * ev.n_static
        w_stat = math.sqrt(ev.static_weight * n_dyn / n_stat) if n_dyn and n_stat else 1.0
        offsets, pos = [], 0
        for ro in ev.rollouts:
            offsets.append(pos)
            pos += 2 if exps[ro.exp].is_static else 2 * ro.n
        n_res = pos
        for static in (False, True):
            idx = [r for r, ro in enumerate(ev.rollouts) if exps[ro.exp].is_static == static]
            if not idx:
                continue
            ros = [ev.rollouts[r] for r in idx]
            sps = np.array([ev.sps[ro.exp] for ro in ros])
            n_max = max(ro.n for ro in ros)
            if len(set(sps.tolist())) != 1:
                raise MethodError(
                    '--jacobian mjx: experiments with different sample periods; use --jacobian fd'
                )
            sp = int(sps[0])
            length = (n_max - 1) * sp
            q0 = np.zeros((len(ros), m.nq))
            v0 = np.zeros((len(ros), m.nv))
            meas = np.zeros((len(ros), n_max, 2))
            first = np.zeros((len(ros), 2))
            gather = np.zeros((len(ros), length), int)
            weights = np.zeros((len(ros), n_max))
            out_idx = []
            for i, ro in enumerate(ros):
                e = exps[ro.exp]
                lm.reset(d, e.start_q[ro.i0], e.qd[ro.i0])
                q0[i], v0[i] = d.qpos, d.qvel
                first[i] = e.start_q[ro.i0]
                meas[i, : ro.n] = e.q[ro.i0 : ro.i0 + ro.n]
                start = ro.i0 * sp
                gather[i] = np.minimum(start + np.arange(length), steps[ro.exp] - 1)
                if static:
                    tail = ev._tail(ro)
                    weights[i, ro.n - tail : ro.n] = w_stat / tail
                    meas[i, 0] = e.q[0]
                    out_idx.append(offsets[idx[i]] + np.arange(2))
                else:
                    out_idx.append(offsets[idx[i]] + np.arange(2 * ro.n))
            groups.append(
                dict(
                    static=static,
                    sp=sp,
                    length=length,
                    n_max=n_max,
                    exp=jnp.asarray([ro.exp for ro in ros]),
                    q0=jnp.asarray(q0),
                    v0=jnp.asarray(v0),
                    meas=jnp.asarray(meas),
                    first=jnp.asarray(first),
                    gather=jnp.asarray(gather),
                    weights=jnp.asarray(weights),
                    valid=np.concatenate(
                        [np.arange(ro.n * 2) + i * n_max * 2 for i, ro in enumerate(ros)]
                    )
                    if not static
                    else None,
                    dest=np.concatenate(out_idx),
                )
            )
        order = np.concatenate([g['dest'] for g in groups])
        self.n_residuals = n_res
        inverse = np.empty(n_res, int)
        inverse[order] = np.arange(n_res)
        d0 = mjx.put_data(m, d)
        seg_jnt, seg_dof, seg_qadr = st['seg_jnt'], st['seg_dof'], st['seg_qadr']
        build_len, joint_dof, joint_id = st['build_len'], st['joint_dof'], st['joint_id']
        u_all_j, p0_all_j = jnp.asarray(u_all), jnp.asarray(p0_all)
        fail = math.sqrt(D.FAIL_LOSS)

        def params_of(u) -> dict:
            x = lower + u * span
            p: dict[str, Any] = dict(base)
            p.update({n: x[i] for i, n in enumerate(names)})
            return p

        def model_of(p: dict):
            mx = self.mx
            stiff, damp, spring = mx.jnt_stiffness, mx.dof_damping, mx.qpos_spring
            fric, arm, rng = mx.dof_frictionloss, mx.dof_armature, mx.jnt_range
            for i, a in enumerate(acts):
                if f'actuators.{a}.k' in names:
                    stiff = stiff.at[seg_jnt[i]].set(2.0 * p[f'actuators.{a}.k'])
                if f'actuators.{a}.c' in names:
                    damp = damp.at[seg_dof[i]].set(2.0 * p[f'actuators.{a}.c'])
                if f'actuators.{a}.l0' in names:
                    spring = spring.at[seg_qadr[i]].set((p[f'actuators.{a}.l0'] - build_len[i]) / 2)
            for j, dof in joint_dof.items():
                if f'joints.{j}.damping' in names:
                    damp = damp.at[dof].set(p[f'joints.{j}.damping'])
                if f'joints.{j}.frictionloss' in names:
                    fric = fric.at[dof].set(p[f'joints.{j}.frictionloss'])
                if f'joints.{j}.armature' in names:
                    arm = arm.at[dof].set(p[f'joints.{j}.armature'])
                if f'joints.{j}.range.0' in names:
                    rng = rng.at[joint_id[j], 0].set(p[f'joints.{j}.range.0'])
            return mx.replace(
                jnt_stiffness=stiff,
                dof_damping=damp,
                qpos_spring=spring,
                dof_frictionloss=fric,
                dof_armature=arm,
                jnt_range=rng,
            )

        def valve_fields(p: dict):
            """valve_of's mapping of parameters onto (τ_fill, τ_vent) per valve, JAX-traceable."""
            per_valve = any(n in names for n in D.VALVE_CHANNEL_PARAMS[1:])
            shared = any(n in names for n in D.VALVE_PARAMS[1:])
            if 'valve.time_constant' in names and not (per_valve or shared):
                tau = jnp.stack([p['valve.time_constant']] * 2)
                return tau, tau

            def per(kind):
                key = f'valve.{kind}_time_constant'
                if shared and not per_valve and key in names:
                    return jnp.stack([p[key]] * 2)
                return jnp.stack([jnp.asarray(p[f'{key}.maa']), jnp.asarray(p[f'{key}.baa'])])

            return per('fill'), per('vent')

        def window(mx, q, v, forces):
            dx = d0.replace(qpos=q, qvel=v)

            def body(dx, f):
                ctrl = jnp.zeros(m.nu)
                for i in range(len(acts)):
                    for c in ctrl_idx[i]:
                        ctrl = ctrl.at[c].set(f[i])
                dx = mjx.step(mx, dx.replace(ctrl=ctrl))
                return dx, dx.qpos[qi]

            return jax.lax.scan(body, dx, forces)[1]

        def residuals(u):
            p = params_of(u)
            mx = model_of(p)
            tf, tv = valve_fields(p)
            pres = jax.vmap(
                lambda uu, pp: valve_pressures(
                    jnp, uu, pp, self.dt, tf, tv, p['valve.dead_time'], max_delay
                )
            )(u_all_j, p0_all_j)
            areas = jnp.stack([jnp.asarray(p[f'actuators.{a}.area']) for a in acts])
            forces = pres * areas * 1e3
            parts = []
            for g in groups:
                fw = forces[g['exp'][:, None], g['gather']]
                q = jax.vmap(window, in_axes=(None, 0, 0, 0))(mx, g['q0'], g['v0'], fw)
                qs = q[:, g['sp'] - 1 :: g['sp']]
                sim = jnp.concatenate([g['first'][:, None], qs], axis=1)
                if g['static']:
                    rest = jnp.einsum('rn,rnc->rc', g['weights'], sim)
                    w = g['weights'].sum(axis=1, keepdims=True)
                    parts.append((rest - w * g['meas'][:, 0]).ravel())
                else:
                    parts.append((sim - g['meas']).reshape(-1)[g['valid']])
            r = jnp.concatenate(parts)[inverse]
            return jnp.where(jnp.isfinite(r), r, fail)

        def with_aux(u):
            r = residuals(u)
            return r, r

        self._res = jax.jit(residuals)
        self._jac = jax.jit(jax.jacfwd(with_aux, has_aux=True))
        self.compile_s = 0.0

    def residuals(self, u) -> np.ndarray:
        return np.asarray(self._res(np.asarray(u, float)))

    def jacobian(self, u) -> tuple[np.ndarray, np.ndarray]:
        """(J in the unit cube, residuals) at u."""
        J, r = self._jac(np.asarray(u, float))
        return np.asarray(J), np.asarray(r)


# ---------------------------------------------------------------- the Gauss-Newton driver


class _Budget(Exception):
    """The Jacobian budget is spent."""


@dataclass
class GradientResult:
    names: list
    x: np.ndarray
    loss: float  # mean squared residual (rad²) at x, the C simulator's
    x_start: np.ndarray
    loss_start: float
    jacobian: str
    jacobians: int  # Jacobians evaluated (iterations)
    evaluations: int  # simulations of every window (residuals and finite-difference columns)
    wall_s: float
    compile_s: float = 0.0  # of which JIT compilation (mjx)
    interrupted: bool = False
    # (wall s since the start, loss of the iterate, unit-cube point) at every residual evaluation
    trace: list = field(default_factory=list)

    def parameters(self) -> dict:
        return {n: float(v) for n, v in zip(self.names, self.x, strict=True)}


def fit_gradient(
    ev: D.Evaluator,
    x0: Sequence[float] | np.ndarray,
    jacobian: str = 'fd',
    iterations: int = 20,
    mapper: Callable = map,
    log: Callable = print,
) -> GradientResult:
    """Trust-region Gauss-Newton from x0 (physical units) on ev's residuals, at most
    `iterations` Jacobians. ev has no sign term (a sum of squares)."""
    if ev.sign_weight:
        raise MethodError(
            'the gradient method needs a sum-of-squares loss: --sign-weight 0 (the default)'
        )
    kind = resolve_jacobian(jacobian)
    t0 = time.monotonic()
    u0 = np.clip(ev.to_unit(x0), 0.0, 1.0)
    trace: list = []
    best: dict[str, Any] = {'loss': math.inf, 'u': u0}
    compile_s = 0.0
    mj: MjxResiduals | None = None
    if kind == 'mjx':
        log('building the MJX model and compiling its residuals and forward-mode Jacobian ...')
        mj = MjxResiduals(ev, u0)

    def record(u, r) -> None:
        loss = float(np.mean(r**2))
        trace.append((time.monotonic() - t0, loss, np.array(u, float)))
        if loss < best['loss']:
            best.update(loss=loss, u=np.array(u, float))

    n_jac = [0]
    n_fd = [0]  # simulations spent on finite-difference columns
    last: dict[str, Any] = {}

    def fun(u):
        nonlocal compile_s
        if mj is not None:
            tc = time.monotonic()
            r = mj.residuals(u)
            if not trace:
                compile_s += time.monotonic() - tc
        else:
            r = ev.residuals(ev.from_unit(u))
        record(u, r)
        last.update(u=np.array(u, float), r=r)
        return r

    def jac(u):
        nonlocal compile_s
        if n_jac[0] >= iterations:
            raise _Budget
        tj = time.monotonic()
        if mj is not None:
            J, _ = mj.jacobian(u)
            if n_jac[0] == 0:
                compile_s += time.monotonic() - tj
        else:
            same = 'u' in last and np.array_equal(last['u'], u)
            r0 = last['r'] if same else ev.residuals(ev.from_unit(u))
            J = fd_jacobian(ev, u, r0, mapper)
            n_fd[0] += len(u) + (0 if same else 1)
        n_jac[0] += 1
        log(
            f'iteration {n_jac[0]:3d}  loss {best["loss"]:.6g} rad²  '
            f'{time.monotonic() - tj:.2f} s/Jacobian  '
            + ' '.join(f'{v:.4g}' for v in ev.from_unit(best['u']))
        )
        return J

    interrupted = False
    try:
        least_squares(
            fun,
            u0,
            jac=jac,
            bounds=(0.0, 1.0),
            method='trf',
            x_scale='jac',
            max_nfev=10 * max(1, iterations),
        )
    except _Budget:
        log(f'stopped after {iterations} Jacobians (--iterations)')
    except KeyboardInterrupt:
        interrupted = True
        log('interrupted: keeping the best point so far')
    x = ev.from_unit(best['u'])
    loss = float(np.mean(ev.residuals(x) ** 2))  # the C simulator's figure, whatever the Jacobian
    loss_start = float(trace[0][1]) if trace else math.nan
    if kind == 'mjx':
        loss_start = float(np.mean(ev.residuals(ev.from_unit(u0)) ** 2))
    return GradientResult(
        list(ev.names),
        x,
        loss,
        ev.from_unit(u0),
        loss_start,
        kind,
        n_jac[0],
        len(trace) + n_fd[0],
        time.monotonic() - t0,
        compile_s,
        interrupted,
        trace,
    )
