"""What a 120 Hz loop costs on this machine when it wakes up, against the same work run hot.

    python benchmarks/bench_machine.py [--quick]

Every control-path figure here (the sim node's tick, the fused loop's frame) is work done once
per 8.3 ms frame after the thread slept. This measures the same fixed work (5 mj_step of the leg
model, one 120 Hz frame of physics at Δt = 1/600 s) run back to back, and after each kind of
gap, side by side in one run:
- back to back (the hot figure micro-benchmarks give);
- after reading 64 MB (caches evicted by our own process);
- after 8.3 ms of a Python busy loop (the CPU never idles);
- after an 8.3 ms sleep (what every loop of the stack does).
On a dedicated machine the gaps cost little more than the cache refill; on a shared virtual
machine the CPU's state may be lost whenever the vCPU leaves it, and the ratios show how much.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

PERIOD = 1 / 120


def _busy(n: int) -> int:
    x = 0
    for i in range(n):
        x += i
    return x


def run(quick: bool = False) -> dict:
    import mujoco

    from equimus_sim.simulator import make_simulator

    sim = make_simulator(timestep=1 / 600)
    m, d = sim.model, sim.data
    t = time.perf_counter()
    _busy(200_000)
    busy_n = int(PERIOD / ((time.perf_counter() - t) / 200_000))
    big = np.ones(64 * 2**20 // 8)
    gaps = {
        'back_to_back': None,
        'after_64MB_read': big.sum,
        'after_8ms_busy_loop': lambda: _busy(busy_n),
        'after_8ms_sleep': lambda: time.sleep(PERIOD),
    }
    frames = 150 if quick else 600
    out = {}
    for name, gap in gaps.items():
        work = []
        for _ in range(frames + 20):
            if gap is not None:
                gap()
            t = time.perf_counter()
            for _ in range(5):
                mujoco.mj_step(m, d)
            work.append(time.perf_counter() - t)
        w = np.array(work[20:]) * 1e6
        out[f'frame_physics_us_{name}_p50'] = float(np.median(w))
        out[f'frame_physics_us_{name}_p90'] = float(np.percentile(w, 90))
    hot = out['frame_physics_us_back_to_back_p50']
    for name in list(gaps)[1:]:
        out[f'{name}_vs_back_to_back'] = out[f'frame_physics_us_{name}_p50'] / hot
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument('--quick', action='store_true', help='fewer frames')
    r = run(p.parse_args(argv).quick)
    for k, v in r.items():
        print(f'{k:48s} {v:.4g}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
