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

Beside it, the host's interpreted Python (`python_speed`): ns a bytecode operation of a fixed
piece of the frame's own pure-Python code (the valve safety filter and the reference's sample,
no ROS), its operations counted by `sys.settrace` in this run, then timed untraced. The share of
the bare loop the graph reaches (issue 30) depends on how fast a host runs Python against how
fast it runs MuJoCo's C, and the two differ from host to host.

And what waking costs one call of per-frame code (`first_call`): the valve driver's SET encoding,
in its interpreted and its compiled form (equimus_hw.valve._wire, what the driver runs), timed
on its first call after an 8.3 ms sleep and on the call right after it, side by side. The first
call pays for every piece of memory the code touches; an interpreted call touches many more.
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


def _frame_python():
    """A call of pure-Python frame code: what `python_speed` counts and times. Each call runs
    the same operations: the reference sampled at fixed times in its move and hold phases, the
    safety filter (armed) given each sample as a command and stepped."""
    from equimus_control.reference import Waypoints
    from equimus_hw.valve.safety import SafetyFilter

    traj = Waypoints([[0.1, -0.2], [0.3, -0.5], [-0.1, -0.9]])
    times = (0.25, 1.0, 2.25, 3.0)  # move, hold, move, hold (segments of 0.5 + 1.5 s)
    safety = SafetyFilter(2)
    safety.arm(0.0)
    now = [0.0]

    def frame() -> None:
        for t in times:
            now[0] += PERIOD
            q, _ = traj.at(t)
            safety.command([20.0 + 10.0 * q[0], 15.0 - 10.0 * q[1]], now[0])
            safety.step(now[0], PERIOD)

    return frame


def python_speed(calls: int = 20000) -> float:
    """ns a bytecode operation of `_frame_python`'s call on this host: its operations counted
    (profile_sim_graph's `opcodes`), the time taken over `calls` untraced calls, best of 3."""
    from profile_sim_graph import opcodes  # a script beside this one

    frame = _frame_python()
    for _ in range(200):  # warm
        frame()
    per_call = opcodes(frame, 200)[0]
    best = float('inf')
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(calls):
            frame()
        best = min(best, (time.perf_counter() - t) / calls)
    return best / per_call * 1e9


def first_call(frames: int) -> dict:
    """µs (p50) of a SET frame's encoding, per form: back to back, first after an 8.3 ms sleep,
    and the call right after that first one."""
    from equimus_hw.valve.protocol import encoder_form, set_encoder

    clock = time.thread_time_ns
    out = {}
    for prefer in (False, True):
        encode = set_encoder(prefer)
        form = encoder_form(encode)
        hot, first, second = [], [], []
        for k in range(frames + 20):
            codes = (1000 + k % 500, 2000)
            c0 = clock()
            encode(k & 0xFF, codes)
            hot.append(clock() - c0)
        for k in range(frames + 20):
            codes = (1000 + k % 500, 2000)
            time.sleep(PERIOD)
            c0 = clock()
            encode(k & 0xFF, codes)
            c1 = clock()
            encode(k & 0xFF, codes)
            c2 = clock()
            first.append(c1 - c0)
            second.append(c2 - c1)
        for name, xs in (
            ('back_to_back', hot),
            ('first_after_8ms_sleep', first),
            ('second', second),
        ):
            out[f'set_encode_{form}_us_{name}_p50'] = float(np.median(xs[20:])) / 1e3
        out[f'set_encode_{form}_first_vs_second'] = (
            out[f'set_encode_{form}_us_first_after_8ms_sleep_p50']
            / out[f'set_encode_{form}_us_second_p50']
        )
    return out


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
    out['python_ns_per_operation'] = python_speed(5000 if quick else 20000)
    # bytecode operations in the time of a physics frame: fewer, the frame's Python weighs more
    out['python_operations_per_physics_frame'] = hot * 1e3 / out['python_ns_per_operation']
    out.update(first_call(frames))
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
