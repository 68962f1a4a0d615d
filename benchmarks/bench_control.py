"""Control benchmark, two parts in one run.

1. Plain-code loop: closed loop with the MuJoCo leg (valve model of the leg description, mocap
   noise 0.3 mm / 2 mrad), plain Python at 120 Hz, through the same ControlStep the controller
   node runs (guards, reference preview, clipping) and the sim graph's valve driver. Tracking
   RMSE per joint for open-loop static feedforward, PID (hand-set and tuned gains), linear MPC,
   LTV MPC, predictive sampling and the shipped policy (config/policy_track.npz) side by side on
   the paper's triangle and on a step set, and each controller's compute time per cycle
   (p50/p99, wall clock and thread CPU time).
2. The real sim graph (main job: DDS nodes in lockstep, valve driver, recorder; `equimus run`):
   tuned PID, linear MPC, LTV MPC and the shipped policy on `reference:=triangle` and
   `reference:=step`, 15 s each (8 s with --quick), RMSE from the run's summary and the
   controller node's own compute p50/p99 (its /diagnostics, last 1000 cycles, read back from the
   bag).

Tuned PID = config/tuned_pid.yaml (the gains of `equimus tune pid`, its defaults, triangle), or
the file given with --tuned-pid.

    python benchmarks/bench_control.py [--quick] [--tuned-pid tuned_pid.yaml] [--no-graph]
        [--preview S]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

NAMES = ('open_loop', 'pid', 'pid_tuned', 'mpc', 'ltv_mpc', 'sampling', 'policy')
GRAPH_NAMES = ('pid_tuned', 'mpc', 'ltv_mpc', 'policy')
GRAPH_TASKS = {'triangle': 'triangle', 'steps': 'step'}  # task -> reference:=
#: the tuned PID's gains and the shipped policy, from the checkout root
TUNED_PID = 'config/tuned_pid.yaml'
POLICY = 'config/policy_track.npz'


def tuned_pid_file(path: str | None, folder: str) -> tuple[str, dict]:
    """The tuned PID's parameter file: `path`, or config/tuned_pid.yaml, or `equimus tune pid`
    (its defaults) run now."""
    if path:
        return path, {'tuned_pid_file': os.path.basename(path)}
    if os.path.isfile(TUNED_PID):
        return TUNED_PID, {'tuned_pid_file': TUNED_PID}
    from equimus_learning.tune import TuneConfig, tune_pid, write_params

    cfg = TuneConfig()
    res = tune_pid(cfg)
    out = os.path.join(folder, 'tuned_pid.yaml')
    write_params(out, res, cfg)
    return out, {'tuned_pid_file': 'tuned now', 'tune_seconds': res.seconds}


def run(
    quick: bool = True,
    tuned_pid: str | None = None,
    graph: bool = True,
    leg_overrides: str | None = None,
    preview_s: float | None = None,
) -> dict:
    warnings.simplefilter('ignore')
    with tempfile.TemporaryDirectory() as tmp:
        path, out = tuned_pid_file(tuned_pid, tmp)
        out.update(plain_loop(quick, path, leg_overrides, preview_s))
        if graph:
            out.update(sim_graph(quick, path, tmp))
    with contextlib.suppress(OSError):
        out['load_average_1min'] = os.getloadavg()[0]
    return out


def plain_loop(
    quick: bool,
    tuned_pid: str,
    leg_overrides: str | None = None,
    preview_s: float | None = None,
) -> dict:
    """The plain-code loop; `leg_overrides` (e.g. config/leg_fit.yaml, its valve dead time) for
    the simulated leg and every controller's model alike. `preview_s`: s of its own future the
    reference sends each frame (default: the reference node's; 0: none, the reference is
    extrapolated along its velocity)."""
    from equimus_control.closed_loop import run as run_loop
    from equimus_control.ltv_mpc import LTVMPC, LTVMPCConfig
    from equimus_control.mpc import LinearisationGrid, LinearMPC, MPCConfig
    from equimus_control.pid import PIDController, StaticFeedforward
    from equimus_control.policy import PolicyController, load_policy
    from equimus_control.reference import PREVIEW_S, Waypoints, triangle_poses
    from equimus_control.sampling import PredictiveSampling, SamplingConfig
    from equimus_description.dynamics import DynamicParams, LegDynamics
    from equimus_description.leg import load_leg
    from equimus_description.statics import StaticParams
    from equimus_hw.valve.stage import SimulatedDriver
    from equimus_learning.tune import read_gains
    from equimus_sim.leg_model import LegModel

    preview = PREVIEW_S if preview_s is None else preview_s
    leg = load_leg(overrides=leg_overrides)
    params = StaticParams.from_leg(leg)
    policy = load_policy(POLICY)
    lm = LegModel(leg.with_timestep(1 / 1200))
    lm_plan = LegModel(leg.with_timestep(1 / 120))  # predictive sampling steps at the period
    cfg = MPCConfig(valve_tau=leg.valve_time_constant, grid_lo=(1.1, 0.2), grid_hi=(1.8, 1.1))
    dynamics = LegDynamics(DynamicParams.from_leg(leg))
    gains = read_gains(tuned_pid)
    ps_cfg = SamplingConfig(valve_tau=leg.valve_time_constant)
    t0 = time.perf_counter()
    grid = LinearisationGrid(lm, params, cfg)
    out = {
        'mpc_grid_nodes': len(grid.nodes),
        'mpc_grid_build_s': time.perf_counter() - t0,
        'preview_s': preview,
    }
    tri = triangle_poses(params)
    duration = 6.0 if quick else 18.0
    tasks = {
        'triangle': Waypoints(tri, move=0.5, hold=1.5),
        'steps': Waypoints([[1.4, 0.8], [1.6, 0.5], [1.45, 0.55]], move=0.3, hold=1.5),
    }
    compute = {}
    for task, ref in tasks.items():
        for name in NAMES:
            sim, mocap, p0 = start_at(ref, params, leg_overrides)
            if name == 'open_loop':
                c = StaticFeedforward(params)
            elif name == 'pid':
                c = PIDController(params)
            elif name == 'pid_tuned':
                c = PIDController(params, gains)
            elif name == 'policy':
                c = PolicyController(policy, params)
            elif name == 'mpc':
                c = LinearMPC(lm, params, cfg, grid, valve=leg.valve)
                c.reset(p_valve=p0)
            elif name == 'ltv_mpc':
                c = LTVMPC(dynamics, LTVMPCConfig(), valve=leg.valve)
                c.reset(p_valve=p0)
            else:
                c = PredictiveSampling(lm_plan, params, ps_cfg, valve=leg.valve)
                c.reset(p_valve=p0)
            # the valves get what the sim graph's valve driver makes of each command
            r = run_loop(
                sim, mocap, c, ref, duration, actuation=SimulatedDriver(), preview_s=preview
            )
            e = r.rmse(skip=0.5)
            out[f'{task}_{name}_rmse_hip'] = float(e[0])
            out[f'{task}_{name}_rmse_knee'] = float(e[1])
            compute.setdefault(name, []).append((r.compute, r.compute_cpu))
            if name == 'sampling':
                c.close()
    for name, cs in compute.items():
        c = np.concatenate([w for w, _ in cs]) * 1e3
        cpu = np.concatenate([u for _, u in cs]) * 1e3
        out[f'{name}_compute_p50_ms'] = float(np.percentile(c, 50))
        out[f'{name}_compute_p99_ms'] = float(np.percentile(c, 99))
        out[f'{name}_cpu_p50_ms'] = float(np.percentile(cpu, 50))
        out[f'{name}_cpu_p99_ms'] = float(np.percentile(cpu, 99))
    for task in tasks:
        for name in ('mpc', 'ltv_mpc', 'sampling', 'policy'):
            out[f'{task}_rmse_ratio_{name}_over_pid_tuned'] = ratio(out, task, name)
    return out


def start_at(ref, params, leg_overrides: str | None):
    """(simulated leg, its mocap, pressures): every run's start, the leg at rest at the
    reference's first pose under that pose's holding pressures."""
    from equimus_description.statics import holding_pressures
    from equimus_sim.mocap import MocapConfig, VirtualMocap
    from equimus_sim.simulator import make_simulator

    q0 = ref(0.0)[0]
    p0 = np.clip(holding_pressures(q0, params), 0, 50)
    sim = make_simulator(
        overrides=leg_overrides,
        timestep=1 / 1200,
        initial_q=q0,
        initial_pressures=tuple(p0),
    )
    mocap = VirtualMocap(MocapConfig(position_noise=0.0003, orientation_noise=0.002, seed=7))
    return sim, mocap, p0


def ratio(out: dict, prefix: str, name: str, base: str = 'pid_tuned') -> float:
    """Summed (hip + knee) RMSE of `name` over that of `base`."""
    return (out[f'{prefix}_{name}_rmse_hip'] + out[f'{prefix}_{name}_rmse_knee']) / (
        out[f'{prefix}_{base}_rmse_hip'] + out[f'{prefix}_{base}_rmse_knee']
    )


def sim_graph(quick: bool, tuned_pid: str, folder: str) -> dict:
    """The real sim graph (main job, lockstep) per controller and reference."""
    duration = 8.0 if quick else 15.0
    out: dict = {}
    for task, reference in GRAPH_TASKS.items():
        for name in GRAPH_NAMES:
            argv = ['--controller', 'pid' if name == 'pid_tuned' else name]
            argv += ['--reference', reference, '--duration', str(duration)]
            if name == 'pid_tuned':
                argv += ['--set', f'params_file:={tuned_pid}']
            elif name == 'policy':
                argv += ['--set', f'policy_file:={POLICY}']
            hip, knee, p50, p99 = graph_run(argv, os.path.join(folder, f'{task}_{name}'))
            prefix = f'graph_{task}_{name}'
            out[f'{prefix}_rmse_hip'], out[f'{prefix}_rmse_knee'] = hip, knee
            out[f'{prefix}_compute_p50_ms'], out[f'{prefix}_compute_p99_ms'] = p50, p99
        for name in ('mpc', 'ltv_mpc', 'policy'):
            out[f'graph_{task}_rmse_ratio_{name}_over_pid_tuned'] = ratio(
                out, f'graph_{task}', name
            )
    return out


def graph_run(argv: list[str], folder: str) -> tuple[float, float, float, float]:
    """(RMSE hip, knee; the controller's compute p50, p99 in ms) of one main-job run."""
    cmd = [sys.executable, '-m', 'equimus_bringup.main_job', '--mode', 'sim', '--out', folder]
    done = subprocess.run(cmd + argv, capture_output=True, text=True, timeout=600)
    runs = [p for p in Path(folder).iterdir() if p.is_dir()] if Path(folder).is_dir() else []
    if done.returncode != 0 or len(runs) != 1 or not (runs[0] / 'summary.json').is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
        print(f'sim graph {" ".join(argv)} failed: {tail}', file=sys.stderr)
        return (math.nan,) * 4
    s = json.loads((runs[0] / 'summary.json').read_text())
    p50, p99 = controller_compute(runs[0] / 'bag')
    return float(s['rmse']['hip']), float(s['rmse']['knee']), p50, p99


def controller_compute(bag: Path) -> tuple[float, float]:
    """The controller's compute p50/p99 (ms, wall clock) in its last /diagnostics of the bag."""
    from equimus_record.bag import read_messages

    last = (math.nan, math.nan)
    for _, _, msg in read_messages(bag, ['/diagnostics']):
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            if status.name.endswith('controller') and 'compute_p99_ms' in values:
                last = (float(values['compute_p50_ms']), float(values['compute_p99_ms']))
    return last


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        '--quick', action='store_true', help='6 s per task instead of 18 s (sim graph: 8 s, not 15)'
    )
    ap.add_argument(
        '--tuned-pid', help='parameter file of `equimus tune pid` (default: run the tuner first)'
    )
    ap.add_argument('--no-graph', action='store_true', help='the plain-code loop only')
    ap.add_argument(
        '--preview',
        type=float,
        default=None,
        help='plain-code loop: s of its own future the reference sends (default: the reference '
        "node's, 0.35; 0: none, extrapolated along its velocity as before /reference/preview)",
    )
    ap.add_argument(
        '--leg-overrides',
        help='leg overrides for the plain-code loop (sim and models), e.g. config/leg_fit.yaml',
    )
    a = ap.parse_args(argv)
    if a.tuned_pid and not os.path.isfile(a.tuned_pid):
        print(f'bench_control: {a.tuned_pid}: no such file; write it with `equimus tune pid`')
        return 2
    if a.leg_overrides and not os.path.isfile(a.leg_overrides):
        print(f'bench_control: {a.leg_overrides}: no such file')
        return 2
    r = run(a.quick, a.tuned_pid, not a.no_graph, a.leg_overrides, a.preview)
    print(f'reference preview in the plain-code loop: {r["preview_s"]:g} s')
    print(f'MPC grid: {r["mpc_grid_nodes"]} linearisations in {r["mpc_grid_build_s"]:.2f} s')
    print(f'{"task":10s} {"controller":10s} {"RMSE hip (rad)":>15s} {"RMSE knee (rad)":>16s}')
    for task in ('triangle', 'steps'):
        for name in NAMES:
            print(
                f'{task:10s} {name:10s} {r[f"{task}_{name}_rmse_hip"]:15.4f} '
                f'{r[f"{task}_{name}_rmse_knee"]:16.4f}'
            )
        print(
            f"{task:10s} summed RMSE over tuned PID's: "
            f'MPC {r[f"{task}_rmse_ratio_mpc_over_pid_tuned"]:.3f}, '
            f'LTV MPC {r[f"{task}_rmse_ratio_ltv_mpc_over_pid_tuned"]:.3f}, '
            f'sampling {r[f"{task}_rmse_ratio_sampling_over_pid_tuned"]:.3f}, '
            f'policy {r[f"{task}_rmse_ratio_policy_over_pid_tuned"]:.3f}'
        )
    print(
        f'compute per cycle (target p99 < 4 ms); wall clock includes preemption by other load '
        f'(1-min load average {r.get("load_average_1min", float("nan")):.1f}), CPU = thread time'
    )
    print(
        f'{"controller":10s} {"wall p50":>9s} {"wall p99":>9s} '
        f'{"CPU p50":>9s} {"CPU p99":>9s}  (ms)'
    )
    for name in NAMES:
        print(
            f'{name:10s} {r[f"{name}_compute_p50_ms"]:9.3f} {r[f"{name}_compute_p99_ms"]:9.3f} '
            f'{r[f"{name}_cpu_p50_ms"]:9.3f} {r[f"{name}_cpu_p99_ms"]:9.3f}'
        )
    if 'graph_triangle_ltv_mpc_rmse_hip' not in r:
        return 0
    print("real sim graph (main job, lockstep): RMSE (rad) and the controller node's compute (ms)")
    print(f'{"task":10s} {"controller":10s} {"hip":>8s} {"knee":>8s} {"p50":>8s} {"p99":>8s}')
    for task in GRAPH_TASKS:
        for name in GRAPH_NAMES:
            k = f'graph_{task}_{name}'
            print(
                f'{task:10s} {name:10s} {r[f"{k}_rmse_hip"]:8.4f} {r[f"{k}_rmse_knee"]:8.4f} '
                f'{r[f"{k}_compute_p50_ms"]:8.3f} {r[f"{k}_compute_p99_ms"]:8.3f}'
            )
        print(
            f"{task:10s} summed RMSE over tuned PID's: "
            f'MPC {r[f"graph_{task}_rmse_ratio_mpc_over_pid_tuned"]:.3f}, '
            f'LTV MPC {r[f"graph_{task}_rmse_ratio_ltv_mpc_over_pid_tuned"]:.3f}, '
            f'policy {r[f"graph_{task}_rmse_ratio_policy_over_pid_tuned"]:.3f} (goal <= 0.7)'
        )
    return 0


if __name__ == '__main__':
    sys.exit(main())
