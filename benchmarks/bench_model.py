"""Speed of the EquiMus leg model: plain mj_step Python loop and batched mujoco.rollout,
side by side with the authors' reference MJCF (data/equimus/models/leg_realgeom_reference.xml).

    python benchmarks/bench_model.py [--quick]

Real-time factor (RTF) = simulated seconds per wall-clock second. Target (issue 2): ≥ 100×
free-running. The reference model names meshes that are not shipped; unused mesh assets are
stripped in memory so it loads.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import mujoco
import numpy as np
from mujoco import rollout

REPO = Path(__file__).resolve().parents[1]
REF_DIR = REPO.parent / 'shared' / 'data' / 'equimus' / 'models'
REF_XML = REF_DIR / 'leg_realgeom_reference.xml'


def load_reference(path: Path = REF_XML) -> mujoco.MjModel:
    """The authors' model with mesh assets missing from meshes/ (and unused) removed."""
    xml = path.read_text()
    have = set(os.listdir(path.parent / 'meshes'))
    used = set(re.findall(r'mesh="([^"]+)"', xml))

    def keep(m):
        name = re.search(r'name="([^"]+)"', m.group(0)).group(1)
        f = re.search(r'file="([^"]+)"', m.group(0)).group(1)
        return m.group(0) if (f in have and name in used) else ''

    xml = re.sub(r'<mesh [^>]*/>', keep, xml)
    xml = xml.replace(
        '<compiler angle="radian"/>',
        f'<compiler angle="radian" meshdir="{path.parent / "meshes"}"/>',
    )
    return mujoco.MjModel.from_xml_string(xml)


def equimus_model(dt: float) -> mujoco.MjModel:
    sys.path.insert(0, str(REPO / 'src' / 'equimus_sim'))
    from equimus_description.leg import load_leg
    from equimus_sim.mjcf_builder import build_model

    return build_model(load_leg().with_timestep(dt), 'equimus')


def step_loop(model: mujoco.MjModel, n: int, ctrl: float = 5.0) -> dict:
    d = mujoco.MjData(model)
    d.ctrl[:] = ctrl
    for _ in range(200):  # warm-up
        mujoco.mj_step(model, d)
    t0 = time.perf_counter()
    for _ in range(n):
        mujoco.mj_step(model, d)
    wall = time.perf_counter() - t0
    if not np.all(np.isfinite(d.qpos)):
        raise RuntimeError('state diverged during the benchmark')
    return {'us_per_step': wall / n * 1e6, 'rtf': n * model.opt.timestep / wall}


def batched(model: mujoco.MjModel, nbatch: int, nstep: int, nthread: int = 2) -> dict:
    rng = np.random.default_rng(0)
    d0 = mujoco.MjData(model)
    mujoco.mj_forward(model, d0)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    x0 = np.empty(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, d0, x0, spec)
    init = np.tile(x0, (nbatch, 1))
    ctrl = rng.uniform(0.0, 10.0, size=(nbatch, 1, model.nu)).repeat(nstep, axis=1)
    datas = [mujoco.MjData(model) for _ in range(nthread)]
    rollout.rollout(model, datas, init[:2], ctrl[:2, :10])  # warm-up / thread pool start
    t0 = time.perf_counter()
    state, _ = rollout.rollout(model, datas, init, ctrl)
    wall = time.perf_counter() - t0
    if not np.all(np.isfinite(state)):
        raise RuntimeError('batched rollout diverged')
    steps = nbatch * nstep
    return {
        'steps_per_s': steps / wall,
        'us_per_step': wall / steps * 1e6,
        'sim_s_per_wall_s': steps * model.opt.timestep / wall,
    }


def run(quick: bool = False) -> dict:
    n = 20000 if quick else 200000
    nb, ns = (16, 1000) if quick else (64, 5000)
    models = {
        'equimus dt=1ms': equimus_model(0.001),
        'equimus dt=5ms': equimus_model(0.005),
        'reference dt=5ms': load_reference(),
    }
    out = {}
    for name, m in models.items():
        s = step_loop(m, n)
        out[f'{name} mj_step loop us/step'] = s['us_per_step']
        out[f'{name} mj_step loop RTF'] = s['rtf']
    for name, m in models.items():
        b = batched(m, nb, ns)
        out[f'{name} rollout(2 threads, {nb} states) steps/s'] = b['steps_per_s']
        out[f'{name} rollout(2 threads, {nb} states) sim s per wall s'] = b['sim_s_per_wall_s']
    out['equimus dt=1ms vs target 100x RTF'] = out['equimus dt=1ms mj_step loop RTF'] / 100.0
    out['equimus/reference us per step (dt=5ms loop)'] = (
        out['equimus dt=5ms mj_step loop us/step'] / out['reference dt=5ms mj_step loop us/step']
    )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument('--quick', action='store_true')
    args = ap.parse_args(argv)
    res = run(args.quick)
    w = max(len(k) for k in res)
    for k, v in res.items():
        print(f'{k:<{w}}  {v:12.4g}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
