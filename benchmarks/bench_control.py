"""Control benchmark, two parts:

1. Plain-code loop: closed loop with the MuJoCo leg (valve lag τ of the leg description, mocap
   noise 0.3 mm / 2 mrad), plain Python at 120 Hz, through the same ControlStep the controller
   node runs (guards, reference preview, clipping). Tracking RMSE per joint for open-loop static
   feedforward, PID (hand-set gains of config/control.yaml and the tuned ones of
   config/tuned_pid.yaml), linear MPC, predictive sampling and the shipped policy
   (config/policy_track.npz) side by side on the paper's triangle and on a step set, and each
   controller's compute time per cycle (p50/p99).
2. The real sim graph (`equimus_bringup.main_job`: DDS nodes, lockstep simulation, the valve
   driver's safety filter, the recorder; 15 s per run, the summary's RMSE of the true angles):
   tuned PID (`params_file:=config/tuned_pid.yaml`) and the shipped policy
   (`controller:=policy policy_file:=config/policy_track.npz`) on the triangle and on the steps
   (`reference:=step`). Needs rclpy; `--no-graph` skips it.

    python benchmarks/bench_control.py [--quick] [--no-graph]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np

NAMES = ('open_loop', 'pid', 'pid_tuned', 'mpc', 'sampling', 'policy')
#: the tuned PID's gains and the shipped policy, from the checkout root
TUNED_PID = 'config/tuned_pid.yaml'
POLICY = 'config/policy_track.npz'
#: the sim graph's references (the reference node's `trajectory`) per task
GRAPH_TASKS = {'triangle': 'triangle', 'steps': 'step'}


def run(quick: bool = True, graph: bool = True) -> dict:
    warnings.simplefilter('ignore')
    from equimus_control.closed_loop import run as run_loop
    from equimus_control.mpc import LinearisationGrid, LinearMPC, MPCConfig
    from equimus_control.pid import PIDController, StaticFeedforward
    from equimus_control.policy import PolicyController, load_policy
    from equimus_control.reference import Waypoints, triangle_poses
    from equimus_control.sampling import PredictiveSampling, SamplingConfig
    from equimus_description.leg import load_leg
    from equimus_description.statics import StaticParams, holding_pressures
    from equimus_hw.valve.stage import SimulatedDriver
    from equimus_learning.tune import read_gains
    from equimus_sim.leg_model import LegModel
    from equimus_sim.mocap import MocapConfig, VirtualMocap
    from equimus_sim.simulator import make_simulator

    leg = load_leg()
    params = StaticParams.from_leg(leg)
    tuned = read_gains(TUNED_PID)
    policy = load_policy(POLICY)
    lm = LegModel(leg.with_timestep(1 / 1200))
    lm_plan = LegModel(leg.with_timestep(1 / 120))  # predictive sampling steps at the period
    cfg = MPCConfig(valve_tau=leg.valve_time_constant, grid_lo=(1.1, 0.2), grid_hi=(1.8, 1.1))
    ps_cfg = SamplingConfig(valve_tau=leg.valve_time_constant)
    t0 = time.perf_counter()
    grid = LinearisationGrid(lm, params, cfg)
    out = {'mpc_grid_nodes': len(grid.nodes), 'mpc_grid_build_s': time.perf_counter() - t0}
    tri = triangle_poses(params)
    duration = 6.0 if quick else 18.0
    tasks = {
        'triangle': Waypoints(tri, move=0.5, hold=1.5),
        'steps': Waypoints([[1.4, 0.8], [1.6, 0.5], [1.45, 0.55]], move=0.3, hold=1.5),
    }
    compute = {}
    for task, ref in tasks.items():
        q0 = ref(0.0)[0]
        p0 = np.clip(holding_pressures(q0, params), 0, 50)
        for name in NAMES:
            sim = make_simulator(timestep=1 / 1200, initial_q=q0, initial_pressures=tuple(p0))
            mocap = VirtualMocap(
                MocapConfig(position_noise=0.0003, orientation_noise=0.002, seed=7)
            )
            if name == 'open_loop':
                c = StaticFeedforward(params)
            elif name == 'pid':
                c = PIDController(params)
            elif name == 'pid_tuned':
                c = PIDController(params, tuned)
            elif name == 'policy':
                c = PolicyController(policy, params)
            elif name == 'mpc':
                c = LinearMPC(lm, params, cfg, grid)
                c.reset(p_valve=p0)
            else:
                c = PredictiveSampling(lm_plan, params, ps_cfg)
                c.reset(p_valve=p0)
            # the valves get what the sim graph's valve driver makes of each command
            r = run_loop(sim, mocap, c, ref, duration, actuation=SimulatedDriver())
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
    try:
        import os

        out['load_average_1min'] = os.getloadavg()[0]
    except OSError:
        pass
    for task in tasks:
        for name in ('mpc', 'sampling', 'policy'):
            out[f'{task}_rmse_ratio_{name}_over_pid'] = _ratio(out, task, name, 'pid')
            out[f'{task}_rmse_ratio_{name}_over_pid_tuned'] = _ratio(out, task, name, 'pid_tuned')
    if graph:
        out.update(graph_figures(15.0))
    return out


def _ratio(out: dict, task: str, name: str, base: str, prefix: str = '') -> float:
    """Summed (hip + knee) RMSE of `name` over that of `base`."""
    a = out[f'{prefix}{task}_{name}_rmse_hip'] + out[f'{prefix}{task}_{name}_rmse_knee']
    return float(
        a / (out[f'{prefix}{task}_{base}_rmse_hip'] + out[f'{prefix}{task}_{base}_rmse_knee'])
    )


def graph_rmse(controller: str, reference: str, sets: list[str], duration: float) -> dict:
    """The summary of one real sim graph run (main job, lockstep): RMSE per joint, the
    commanded pressure range."""
    import json
    import tempfile
    from pathlib import Path

    from equimus_bringup import main_job

    with tempfile.TemporaryDirectory() as tmp:
        argv = ['--out', tmp, '--mode', 'sim', '--controller', controller]
        argv += ['--reference', reference, '--duration', str(duration)]
        for s in sets:
            argv += ['--set', s]
        if main_job.main(argv) != 0:
            raise RuntimeError(f'the sim graph run {argv} failed')
        (run_dir,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        return dict(json.loads((run_dir / 'summary.json').read_text()))


def graph_figures(duration: float) -> dict:
    """Tuned PID and the shipped policy in the real sim graph, triangle and steps."""
    try:
        import rclpy  # noqa: F401
    except ImportError:
        return {}
    runs = {
        'pid_tuned': ('pid', [f'params_file:={TUNED_PID}']),
        'policy': ('policy', [f'policy_file:={POLICY}']),
    }
    out: dict = {}
    for task, reference in GRAPH_TASKS.items():
        for name, (controller, sets) in runs.items():
            s = graph_rmse(controller, reference, sets, duration)
            out[f'graph_{task}_{name}_rmse_hip'] = float(s['rmse']['hip'])
            out[f'graph_{task}_{name}_rmse_knee'] = float(s['rmse']['knee'])
            out[f'graph_{task}_{name}_kpa_min'] = float(s['pressure_min'])
            out[f'graph_{task}_{name}_kpa_max'] = float(s['pressure_max'])
        out[f'graph_{task}_rmse_ratio_policy_over_pid_tuned'] = _ratio(
            out, task, 'policy', 'pid_tuned', 'graph_'
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--quick', action='store_true', help='one 6 s pass per task instead of 18 s')
    ap.add_argument('--no-graph', action='store_true', help='skip the real sim graph runs')
    a = ap.parse_args(argv)
    r = run(a.quick, graph=not a.no_graph)
    print(f'MPC grid: {r["mpc_grid_nodes"]} linearisations in {r["mpc_grid_build_s"]:.2f} s')
    print(f'{"task":10s} {"controller":10s} {"RMSE hip (rad)":>15s} {"RMSE knee (rad)":>16s}')
    for task in ('triangle', 'steps'):
        for name in NAMES:
            print(
                f'{task:10s} {name:10s} {r[f"{task}_{name}_rmse_hip"]:15.4f} '
                f'{r[f"{task}_{name}_rmse_knee"]:16.4f}'
            )
        print(
            f"{task:10s} summed RMSE over PID's: MPC {r[f'{task}_rmse_ratio_mpc_over_pid']:.3f}, "
            f'sampling {r[f"{task}_rmse_ratio_sampling_over_pid"]:.3f}, '
            f"policy {r[f'{task}_rmse_ratio_policy_over_pid']:.3f}; over tuned PID's: "
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
    if 'graph_triangle_pid_tuned_rmse_hip' in r:
        print('real sim graph (main job, lockstep, 15 s per run)')
        for task in GRAPH_TASKS:
            for name in ('pid_tuned', 'policy'):
                print(
                    f'{task:10s} {name:10s} {r[f"graph_{task}_{name}_rmse_hip"]:15.4f} '
                    f'{r[f"graph_{task}_{name}_rmse_knee"]:16.4f}   commands '
                    f'{r[f"graph_{task}_{name}_kpa_min"]:.1f}..'
                    f'{r[f"graph_{task}_{name}_kpa_max"]:.1f} kPa'
                )
            print(
                f"{task:10s} summed RMSE, policy over tuned PID's: "
                f'{r[f"graph_{task}_rmse_ratio_policy_over_pid_tuned"]:.3f} (goal <= 0.7)'
            )
    return 0


if __name__ == '__main__':
    sys.exit(main())
