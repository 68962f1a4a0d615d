"""Where a frame of the composed sim graph goes (issue 13): the graph built in this process as
`sim.launch.py` builds it (recording on), frames run one by one from here, CPU time per frame in
blocks (process and main thread), the bare mj_step loop beside it; `--profile` adds cProfile of
the main thread.

    python benchmarks/profile_sim_graph.py --frames 2400            # per-block CPU a frame
    python benchmarks/profile_sim_graph.py --frames 1200 --profile  # and where it goes

The executor runs in a background thread as in `SimNode.run` (its timers cost CPU too).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RATE = 120.0


def bare_rtf_cpu(frames: int) -> float:
    """Sim s per CPU s of the bare mj_step loop at Δt 1/600 s over `frames` frames."""
    import mujoco

    from equimus_sim.simulator import make_simulator

    sim = make_simulator(timestep=1 / 600)
    c0 = time.process_time()
    for _ in range(frames * 5):
        mujoco.mj_step(sim.model, sim.data)
    return frames / RATE / (time.process_time() - c0)


def threads_cpu() -> dict[str, float]:
    """CPU seconds of each thread of this process by name (Linux /proc; {} elsewhere)."""
    out: dict[str, float] = {}
    tick = os.sysconf('SC_CLK_TCK') if hasattr(os, 'sysconf') else 100
    for task in Path('/proc/self/task').glob('*'):
        try:
            stat = (task / 'stat').read_text()
        except OSError:
            continue
        name = stat[stat.index('(') + 1 : stat.rindex(')')]
        fields = stat[stat.rindex(')') + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        key = f'{name} ({task.name})'
        out[key] = out.get(key, 0.0) + cpu
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--frames', type=int, default=2400)
    p.add_argument('--block', type=int, default=600, help='frames per reported block')
    p.add_argument(
        '--profile', action='store_true', help='cProfile (CPU time) the main and executor threads'
    )
    p.add_argument(
        '--executor',
        choices=('events', 'single'),
        default='events',
        help="events: what the composed graph uses where rclpy has it; single: rclpy's Python "
        'SingleThreadedExecutor (the fallback)',
    )
    p.add_argument('--top', type=int, default=40, help='functions listed per profile')
    ns = p.parse_args(argv)

    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from equimus_bringup.graph import describe_graph, ros_arguments
    from equimus_ros.main import GIL_SWITCH_INTERVAL_S

    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    tmp = tempfile.mkdtemp(prefix='profile_sim_graph_')
    (spec,) = describe_graph(
        'sim', {'record': 'true', 'bag': f'{tmp}/bag', 'config_dir': str(REPO / 'config')}
    )
    rclpy.init(args=ros_arguments(spec, 'warn'))
    from equimus_bringup.sim_graph import SimGraph

    graph = SimGraph()
    sim = graph.sim
    if ns.executor == 'events':
        from rclpy.experimental import EventsExecutor

        executor = EventsExecutor()
    else:
        executor = SingleThreadedExecutor()
    for node in graph.all_nodes():
        executor.add_node(node)

    # CPU time, not wall time: the machine is shared and wall time counts the others' load.
    spin_profiler = cProfile.Profile(time.thread_time) if ns.profile else None
    spin_cpu = [0.0]
    spins = [0]

    def spin() -> None:
        if spin_profiler is not None:
            spin_profiler.enable()
        try:
            while rclpy.ok() and not sim._stop.is_set():
                executor.spin_once(timeout_sec=0.1)
                spins[0] += 1
        except Exception:
            if rclpy.ok() and not sim._stop.is_set():
                raise
        finally:
            spin_cpu[0] = time.thread_time()
            if spin_profiler is not None:
                spin_profiler.disable()

    sim.publish_initial()
    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    profiler = cProfile.Profile(time.thread_time) if ns.profile else None
    total_cpu = 0.0
    before = threads_cpu()
    try:
        for start in range(0, ns.frames, ns.block):
            n = min(ns.block, ns.frames - start)
            c0, t0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
            if profiler is not None:
                profiler.enable()
            for _ in range(n):
                sim._lockstep_once()
            if profiler is not None:
                profiler.disable()
            c1, t1, w1 = time.process_time(), time.thread_time(), time.perf_counter()
            total_cpu += c1 - c0
            print(
                f'frames {start:5d}-{start + n:5d}: {1e6 * (c1 - c0) / n:6.0f} us CPU a frame '
                f'(main thread {1e6 * (t1 - t0) / n:.0f}), {1e6 * (w1 - w0) / n:6.0f} us wall',
                flush=True,
            )
        after = threads_cpu()
        print(f'CPU s by thread over the frames ({spins[0]} executor wake-ups):')
        for name, cpu in sorted(after.items(), key=lambda kv: -kv[1]):
            used = cpu - before.get(name, 0.0)
            if used > 0:
                print(f'  {name}: {used:.2f} s ({1e6 * used / ns.frames:.0f} us a frame)')
    finally:
        sim.stop()
        spinner.join(timeout=2.0)
        graph.close()
        for node in graph.all_nodes():
            node.destroy_node()
        rclpy.try_shutdown()
    graph_rtf = ns.frames / RATE / total_cpu
    bare = bare_rtf_cpu(ns.frames)
    print(
        f'composed graph {graph_rtf:.1f}x per CPU s, bare mj_step loop {bare:.1f}x: '
        f'{graph_rtf / bare:.4f} of bare'
    )
    if profiler is not None:
        print('main thread (CPU time):')
        pstats.Stats(profiler).sort_stats('tottime').print_stats(ns.top)
    if spin_profiler is not None:
        print(f'executor thread (CPU time, {spin_cpu[0]:.2f} s in all):')
        pstats.Stats(spin_profiler).sort_stats('tottime').print_stats(ns.top)
    return 0


if __name__ == '__main__':
    sys.exit(main())
