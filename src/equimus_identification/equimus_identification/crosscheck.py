"""An independent check of the dynamic fit: the same least-squares problem solved with MuJoCo's
own system-identification module (`mujoco.sysid`, the `mujoco[sysid]` extra).

Same data, same model description, same start; everything else independent:
- ours: dynamic.Evaluator writes candidates into one compiled model, the valve lag is a filter
  over the command, rollouts through mujoco.rollout; scipy trust-region least squares; intervals
  from our Gauss-Newton covariance (dynamic.covariance_summary).
- mujoco.sysid: the leg's MJCF as an MjSpec recompiled for every candidate by parameter
  modifiers (slide stiffness/damping/spring reference, hinge damping, actuator gain = area), the
  valve lag as MuJoCo actuator dynamics (dyntype filterexact, dynprm = τ: the same discrete
  first-order lag), jointpos sensors for θ1, θ2; its rollout, residual, optimiser
  (optimizer='mujoco') and `calculate_intervals`.
Parameters are relative to the start value on both sides (well scaled for either optimiser).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Sequence
from typing import Any

import mujoco
import numpy as np
from scipy.optimize import least_squares

from equimus_description.leg import (
    LegDescription,
    require_constant_area,
    require_constant_damping,
)
from equimus_sim.leg_model import LegModel
from equimus_sim.mjcf_builder import build_mjcf, seg_names

from . import dynamic as D
from .data import Experiment

SENSORS = ('sysid_hip', 'sysid_knee')
T_95 = 1.96  # two-sided 95 % normal quantile (n ≫ p)


def _sysid() -> Any:
    """mujoco.sysid, imported at run time: it ships type information that would make the type
    checker treat the untyped mujoco package as typed."""
    return importlib.import_module('mujoco.sysid')


def available() -> str | None:
    """None when mujoco.sysid can run here, else why not."""
    try:
        sysid = _sysid()
        sysid.ParameterDict  # noqa: B018 (the package imports empty without its extra)
    except (ImportError, AttributeError):
        return 'mujoco.sysid needs the mujoco[sysid] extra: pip install "mujoco[sysid]"'
    return None


def _spec(leg: LegDescription, dt: float) -> tuple[mujoco.MjSpec, LegModel]:
    require_constant_area(leg, "the cross-check (it sets the actuators' gain)")
    require_constant_damping(leg, "the cross-check (it sets the actuators' gain)")
    leg = leg.with_timestep(dt)
    lm = LegModel(leg)
    spec = mujoco.MjSpec.from_string(build_mjcf(leg))
    for j, s in zip(lm.joint_names, SENSORS, strict=True):
        spec.add_sensor(
            name=s,
            type=mujoco.mjtSensor.mjSENS_JOINTPOS,
            objname=j,
            objtype=mujoco.mjtObj.mjOBJ_JOINT,
        )
    for a in lm.actuator_names:
        for sname in seg_names(a):
            act = spec.actuator(sname)
            act.dyntype = mujoco.mjtDyn.mjDYN_FILTEREXACT
            act.dynprm[0] = leg.valve_time_constant
            act.gainprm[0] = leg.actuators[a].area * 1e3  # ctrl is the commanded pressure, kPa
            act.gear[0] = abs(act.gear[0]) if D.PRESSURE_LENGTHENS else act.gear[0]
            act.ctrllimited = 0
            act.actlimited = 0
            act.actearly = 1  # force from the updated valve state, as our lag filter does
    return spec, lm


def _modifier(name: str, x0: float, build_len: dict):
    """spec ← parameter (value relative to x0), for one override key."""
    part = name.split('.')

    def modify(spec, p):
        v = float(p.value[0]) * x0
        if part[0] == 'valve':
            for a in build_len:
                for s in seg_names(a):
                    spec.actuator(s).dynprm[0] = v
        elif part[0] == 'joints':
            spec.joint(part[1]).damping[0] = v
        else:
            a, what = part[1], part[2]
            for s in seg_names(a):
                if what == 'k':
                    spec.joint(s).stiffness[0] = 2.0 * v
                elif what == 'c':
                    spec.joint(s).damping[0] = 2.0 * v
                elif what == 'l0':
                    spec.joint(s).springref = (v - build_len[a]) / 2.0
                elif what == 'area':
                    spec.actuator(s).gainprm[0] = v * 1e3
                else:
                    raise KeyError(name)

    return modify


def _plain_residual(params, pred, measured, model, return_pred_all, state=None):
    """Measured minus predicted angles at the measured times, unweighted: the default divides
    each sensor by the norm of its measured signal, which would weight the hip, the knee and
    every experiment differently from our loss (a different problem, a different optimum)."""
    pred = pred.resample(measured.times)
    return measured.data - pred.data, pred, measured


def sysid_solve(
    exps: Sequence[Experiment], leg: LegDescription, names: Sequence[str], dt: float, max_iters=50
) -> dict:
    sysid = _sysid()
    spec, lm = _spec(leg, dt)
    build_len = dict(zip(lm.actuator_names, lm._build_len, strict=True))
    x0 = np.array([D.leg_value(leg, n) for n in names])
    params = sysid.ParameterDict()
    for n, v in zip(names, x0, strict=True):
        lo, hi = D.BOUNDS[n]
        params.add(
            sysid.Parameter(
                n,
                nominal=1.0,
                min_value=lo / v,
                max_value=hi / v,
                modifier=_modifier(n, v, build_len),
            )
        )
    model = spec.compile()
    data = mujoco.MjData(model)
    lm = LegModel(lm.leg, model=model)  # the same joints: reset places the 3-2-1 chains
    inits, ctrls, sens = [], [], []
    ctrl_names = [s for a in lm.actuator_names for s in seg_names(a)]
    for e in exps:
        lm.reset(data, e.start_q[0], e.qd[0])
        act = np.repeat(np.asarray(e.p0_kpa, float), 2)
        inits.append(sysid.create_initial_state(model, data.qpos, data.qvel, act))
        ctrl = np.repeat(e.command_kpa, 2, axis=1)
        ctrls.append(sysid.TimeSeries.from_control_names(e.t, ctrl, model, ctrl_names))
        sens.append(sysid.TimeSeries.from_names(e.t, e.q, model, list(SENSORS)))
    ms = sysid.ModelSequences('equimus_leg', spec, [e.name for e in exps], inits, ctrls, sens)
    residual_fn = sysid.build_residual_fn(models_sequences=[ms], modify_residual=_plain_residual)
    t0 = time.monotonic()
    opt, res = sysid.optimize(
        initial_params=params,
        residual_fn=residual_fn,
        optimizer='mujoco',
        verbose=False,
        max_iters=max_iters,
    )
    wall = time.monotonic() - t0
    r_star, _, _ = residual_fn(res.x, opt)
    _, half = sysid.calculate_intervals(r_star, res.jac)
    return {
        'x': res.x * x0,
        'interval': np.asarray(half) * x0,
        'wall_s': wall,
        'residual_rms': float(np.sqrt(np.mean(np.concatenate(r_star) ** 2))),
    }


def ours_solve(
    exps: Sequence[Experiment], leg: LegDescription, names: Sequence[str], dt: float, max_nfev=600
) -> dict:
    ev = D.Evaluator(exps, names, leg=leg, loss='whole', dt=dt, sign_weight=0.0)
    x0 = np.array([D.leg_value(leg, n) for n in names])
    lo = np.array([D.BOUNDS[n][0] for n in names]) / x0
    hi = np.array([D.BOUNDS[n][1] for n in names]) / x0
    t0 = time.monotonic()
    r = least_squares(
        lambda v: ev.residuals(v * x0),
        np.ones(len(names)),
        bounds=(lo, hi),
        method='trf',
        diff_step=1e-4,
        max_nfev=max_nfev,
    )
    wall = time.monotonic() - t0
    x = r.x * x0
    cov = D.identifiability(ev, x)
    return {
        'x': x,
        'interval': T_95 * np.array([cov['std_error'][n] for n in names]),
        'wall_s': wall,
        'residual_rms': cov['residual_rms_rad'],
        'evaluations': int(r.nfev),
    }


def compare(exps, leg, names, dt: float = D.DT, max_iters: int = 50) -> dict:
    """Both solutions, their 95 % intervals, and whether each parameter agrees: the optima
    differ by less than the combined interval sqrt(ci_ours² + ci_sysid²)."""
    ours = ours_solve(exps, leg, names, dt)
    theirs = sysid_solve(exps, leg, names, dt, max_iters=max_iters)
    diff = np.abs(ours['x'] - theirs['x'])
    tol = np.hypot(ours['interval'], theirs['interval'])
    return {
        'names': list(names),
        'ours': ours,
        'sysid': theirs,
        'agree': (diff <= tol).tolist(),
        'relative_difference': (diff / np.abs(ours['x'])).tolist(),
    }


def markdown(c: dict) -> str:
    lines = [
        '| parameter | ours | ± 95 % | mujoco.sysid | ± 95 % | rel. diff | agree |',
        '|---|---|---|---|---|---|---|',
    ]
    for i, n in enumerate(c['names']):
        o, s = c['ours'], c['sysid']
        lines.append(
            f'| {n} | {o["x"][i]:.5g} | {o["interval"][i]:.3g} | {s["x"][i]:.5g} | '
            f'{s["interval"][i]:.3g} | {100 * c["relative_difference"][i]:.2f} % | '
            f'{"yes" if c["agree"][i] else "**no**"} |'
        )
    lines.append(
        f'\nWall time: ours {c["ours"]["wall_s"]:.1f} s, '
        f'mujoco.sysid {c["sysid"]["wall_s"]:.1f} s; '
        f'residual RMS {c["ours"]["residual_rms"]:.4g} / {c["sysid"]["residual_rms"]:.4g} rad.'
    )
    return '\n'.join(lines)
