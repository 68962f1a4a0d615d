#!/usr/bin/env python3
"""What the valve/chamber model and hinge friction cost (issue 25), side by side in one run.

    python benchmarks/bench_valve_model.py [--fit config/leg_fit.yaml ...] [--quick]

The default leg (the authors' first-order lag, frictionless) against fitted legs with a dead
time, fill and vent constants, a regulator or hinge friction (--fit, one or more files):
- LegSimulator.advance per 1/120 s frame at the sim node's Δt = 1/600 s, both valve paths
  ('mujoco': the lag as actuator dynamics, one mj_step call per frame; a general valve is written
  in step by step; 'python': the loop in Python), µs per frame;
- VectorTrackEnv steps/s (64 environments, 2 threads);
- the identification evaluator on the 36 ToCenter segments (whole-trajectory loss, Δt 0.01 s):
  simulated steps/s, i.e. what one least-squares evaluation costs;
- valve.follow alone over 72,000 steps (the valve of one evaluation), ms.
Rounds alternate between the legs so machine load hits them alike; medians are printed.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOCENTER = (ROOT / '..' / 'shared' / 'data/equimus/physical/dynamic').resolve()


def frame_cost(overrides, valve: str, frames: int) -> float:
    from equimus_sim.simulator import make_simulator

    sim = make_simulator(overrides=overrides, timestep=1 / 600, valve=valve)
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    for k in range(frames):
        if k % 30 == 0:
            sim.set_command(rng.uniform(0, 50, 2))
        sim.advance(1 / 120)
    return (time.perf_counter() - t) / frames * 1e6


def vector_rate(overrides, steps: int) -> float:
    from equimus_learning.vector import VectorTrackEnv

    env = VectorTrackEnv(num_envs=64, nthread=2, leg_overrides=overrides or '')
    env.reset(seed=0)
    act = np.zeros((64, 2))
    t = time.perf_counter()
    for _ in range(steps):
        env.step(act)
    env.close()
    return steps * 64 / (time.perf_counter() - t)


def evaluator_rate(overrides) -> tuple[float, float]:
    from equimus_description.leg import load_leg
    from equimus_description.valve import follow
    from equimus_identification import data
    from equimus_identification import dynamic as D

    exps = data.load_trajectory_csv(next(TOCENTER.glob('ToCenter_*.csv')))
    leg = load_leg(parameter_set='table_v_dynamic', overrides=overrides)
    names = list(D.BOUNDS)
    x = [D.leg_value(leg, n) for n in names]
    ev = D.Evaluator(exps, names, leg=leg, loss='whole', dt=0.01, sign_weight=0.0)
    ev.simulate(x)
    t = time.perf_counter()
    ev.simulate(x)
    rate = ev.steps_per_eval / (time.perf_counter() - t)
    u = np.zeros((72000, 2))
    u[::2000] = 30.0
    t = time.perf_counter()
    follow(leg.valve, u, np.zeros(2), 0.005)
    return rate, (time.perf_counter() - t) * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--fit', nargs='+', default=[str(ROOT / 'config' / 'leg_fit.yaml')])
    ap.add_argument('--quick', action='store_true')
    ap.add_argument('--rounds', type=int, default=3)
    a = ap.parse_args(argv)
    frames, steps, rounds = (120, 20, 1) if a.quick else (1200, 200, a.rounds)
    legs = {'default (lag, frictionless)': None}
    legs.update({f'fit ({pathlib.Path(f).name})': f for f in a.fit})
    rows: dict[str, dict[str, list[float]]] = {k: {} for k in legs}
    for _ in range(rounds):
        for label, ov in legs.items():
            r = rows[label]
            r.setdefault('frame µs, valve mujoco', []).append(frame_cost(ov, 'mujoco', frames))
            r.setdefault('frame µs, valve python', []).append(frame_cost(ov, 'python', frames))
            r.setdefault('VectorTrackEnv steps/s', []).append(vector_rate(ov, steps))
            rate, ms = evaluator_rate(ov)
            r.setdefault('evaluator steps/s', []).append(rate)
            r.setdefault('valve.follow 72k steps, ms', []).append(ms)
    measures = list(next(iter(rows.values())))
    print('| measure | ' + ' | '.join(legs) + ' |')
    print('|---|' + '---|' * len(legs))
    for m in measures:
        vals = [statistics.median(rows[label][m]) for label in legs]
        print(f'| {m} | ' + ' | '.join(f'{v:,.0f}' for v in vals) + ' |')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
