"""Issue 30 in one run: the four speed figures of this host, each beside its goal.

    python benchmarks/bench_speed.py                      # about 3 minutes
    python benchmarks/bench_speed.py --rounds 5 --seconds 30   # items 1 and 2 over more rounds

Speed that holds "on any host" is checked by running this on the host in question. It runs, one
after the other (never in parallel: they measure time), the project's own benchmarks of each item
and prints one table:

1. the free-running sim node against the bare MuJoCo loop (bench_sim.py --platform, alternating
   rounds; each run against the bare loop taken in its own process just before and just after
   it, then the median: the host's speed swings by half within seconds, and a ratio of two runs
   apart measures the swing; the ratio to the round's bare loop, the earlier figure, beside it);
2. the composed sim graph recording every topic, against the same bare loops;
3. the fused low-latency chain's in-process p99 (datagram read -> SET frame written) in default
   scheduling, in bench_latency.py's modes default, busy, default (the emulated rig's threads at
   normal scheduling, as a real rig's Motive PC and board take none of this computer's CPU);
4. the recorder's sustained rate without a missing message, for the project's ~1 KiB messages
   and for 64 KiB ones of random bytes (bench_bringup.py --recorder --payload random).

First, and printed under the table, the host itself (bench_machine.py --quick): a physics frame's
time and a bytecode operation's. Items 1 and 2 are shares of the bare loop, so a host that runs
Python slower against MuJoCo than another gives lower shares for the same code; that line is the
reason to look at first when a share falls between two hosts.

Each benchmark's own command prints the detail behind its row (the per-frame breakdown, the
stages of the chain, every step of the sweep).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_bringup  # noqa: E402  (the benchmarks are scripts beside this one)
import bench_latency  # noqa: E402
import bench_machine  # noqa: E402
import bench_sim  # noqa: E402

#: item 1 and item 2's goals, as shares of the bare mj_step loop (issue 30)
NODE_GOAL = 0.4
GRAPH_GOAL = 0.15
#: item 3: the modes run, every one in default (non-real-time) scheduling
LATENCY_MODES = ('default', 'busy', 'default')
#: the full run's rounds of items 1 and 2, their sim s a run, s a latency mode, s a recorder step
FULL = (3, 15.0, 10.0, 5.0)
QUICK = (1, 5.0, 4.0, 2.0)


def measure(rounds: int, sim_seconds: float, latency_seconds: float, step_seconds: float) -> dict:
    """Every figure of the table (see the module docstring), with the load it ran at."""
    os.environ.setdefault('ROS_DOMAIN_ID', str(150 + os.getpid() % 80))
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    out: dict = {'load_average_1min_at_start': os.getloadavg()[0], 'started': time.time()}
    print('[host] a physics frame and interpreted Python on this host ...', flush=True)
    out['machine'] = bench_machine.run(quick=True)
    print(f'[1, 2] sim node and composed graph against the bare loop: {rounds} round(s) ...')
    out['platform'] = bench_sim.platform(rounds, sim_seconds)
    bench_sim.print_platform(out['platform'])
    print('[3] the low-latency chain, modes ' + ', '.join(LATENCY_MODES) + ' ...')
    print(bench_latency.HEADER, flush=True)
    out['latency'] = bench_latency.run(list(LATENCY_MODES), latency_seconds, 'normal')
    print('[4] the recorder, random payloads ...', flush=True)
    out['recorder'] = {
        str(k): v for k, v in bench_bringup.recorder_sweep(step_seconds, 'random').items()
    }
    out['load_average_1min_at_end'] = os.getloadavg()[0]
    return out


def figures(r: dict) -> dict:
    """The table's figures by name (`make bench`'s form)."""
    p = r['platform']
    out = {
        'free_node_vs_bare': p['platform_free_node_vs_adjacent_bare'],
        'composed_graph_vs_bare': p['platform_graph_vs_adjacent_bare'],
        'free_node_vs_bare_of_the_round': p['platform_free_node_vs_bare_per_round'],
        'composed_graph_vs_bare_of_the_round': p['platform_graph_vs_bare_per_round'],
        'bare_mj_step_rtf': p['platform_bare_mj_step_rtf'],
    }
    for i, m in enumerate(r['latency']['results']):
        if 'skipped' not in m:
            out[f'chain_in_process_p99_ms_{i + 1}_{m["mode"]}'] = m['in_process_p99_ms']
    for size, best in r['recorder'].items():
        out[f'recorder_{size}_doubles_sustained_msg_s'] = best['rate'] if best else 0.0
        out[f'recorder_{size}_doubles_sustained_mb_s'] = best['payload_mb_s'] if best else 0.0
    out['load_average_1min_at_start'] = r['load_average_1min_at_start']
    out['python_ns_per_operation'] = r['machine']['python_ns_per_operation']
    out['frame_physics_us_back_to_back'] = r['machine']['frame_physics_us_back_to_back_p50']
    return out


def run(quick: bool = False) -> dict:
    """`make bench`: the table's figures; quick: shorter runs of each."""
    return figures(measure(*(QUICK if quick else FULL)))


def verdict(value: float, goal: float, above: bool) -> str:
    met = value >= goal if above else value < goal
    return 'met' if met else 'NOT met'


def table(r: dict) -> list[str]:
    """The four rows: item, goal, figure, verdict."""
    p = r['platform']
    node, graph = p['platform_free_node_vs_adjacent_bare'], p['platform_graph_vs_adjacent_bare']
    bare = p['platform_bare_mj_step_rtf']
    rows = [
        (
            '1. free-running node',
            f'>= {NODE_GOAL} of bare',
            f'{node:.4f} of bare ({p["platform_free_node_rtf"]:.1f}x; per CPU s '
            f"{p['platform_cpu_free_node_vs_adjacent_bare']:.4f}; against the round's "
            f'{bare:.1f}x bare loop {p["platform_free_node_vs_bare_per_round"]:.4f})',
            verdict(node, NODE_GOAL, above=True),
        ),
        (
            '2. composed graph, recording',
            f'>= {GRAPH_GOAL} of bare',
            f'{graph:.4f} of bare ({p["platform_composed_graph_recording_rtf"]:.1f}x; per CPU s '
            f"{p['platform_cpu_graph_vs_adjacent_bare']:.4f}; against the round's bare loop "
            f'{p["platform_graph_vs_bare_per_round"]:.4f})',
            verdict(graph, GRAPH_GOAL, above=True),
        ),
    ]
    goal = bench_latency.GOALS_MS['in_process_p99']
    results = [m for m in r['latency']['results'] if 'skipped' not in m]
    worst_default = max(
        (m['in_process_p99_ms'] for m in results if m['mode'] == 'default'), default=float('nan')
    )
    rows.append(
        (
            '3. chain in-process p99',
            f'< {goal} ms',
            ', '.join(f'{m["mode"]} {m["in_process_p99_ms"]:.3f}' for m in results) + ' ms',
            verdict(worst_default, goal, above=False) + ' (default)',
        )
    )
    sustained = []
    for best in r['recorder'].values():
        if best is None:
            sustained.append('no step without a missing message')
        else:
            sustained.append(
                f'{best["message_bytes"]} B: {best["rate"]:.0f} msg/s, '
                f'{best["payload_mb_s"]:.1f} MB/s'
            )
    rows.append(('4. recorder, no drops', 'stated', '; '.join(sustained), 'measured'))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return ['  '.join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


def host_line(m: dict) -> str:
    """What the ratios of items 1 and 2 depend on besides the code: how fast this host runs
    MuJoCo's C and interpreted Python (bench_machine.py)."""
    return (
        f'host: a physics frame (5 mj_step) {m["frame_physics_us_back_to_back_p50"]:.1f} us '
        f'back to back, {m["after_8ms_sleep_vs_back_to_back"]:.2f}x that after an 8.3 ms sleep; '
        f'Python {m["python_ns_per_operation"]:.1f} ns a bytecode operation, '
        f"{m['python_operations_per_physics_frame']:.0f} operations in a physics frame's time"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument('--quick', action='store_true', help='short runs of each (about 2 minutes)')
    rounds, seconds, latency_seconds, step_seconds = FULL
    p.add_argument('--rounds', type=int, default=rounds, help='items 1 and 2: alternating rounds')
    p.add_argument('--seconds', type=float, default=seconds, help='items 1 and 2: sim s a run')
    p.add_argument(
        '--latency-seconds', type=float, default=latency_seconds, help='item 3: s a mode'
    )
    p.add_argument('--step-seconds', type=float, default=step_seconds, help='item 4: s a step')
    p.add_argument('--json', default='', help='also write every figure to this file')
    ns = p.parse_args(argv)
    if ns.rounds < 1 or ns.seconds <= 0 or ns.latency_seconds <= 0 or ns.step_seconds <= 0:
        print('bench_speed: --rounds must be >= 1 and every duration > 0', file=sys.stderr)
        return 2
    r = (
        measure(*QUICK)
        if ns.quick
        else measure(ns.rounds, ns.seconds, ns.latency_seconds, ns.step_seconds)
    )
    print(
        f'\nissue 30 on this host ({os.cpu_count()} cores; 1-min load average '
        f'{r["load_average_1min_at_start"]:.2f} at start, {r["load_average_1min_at_end"]:.2f} at '
        'end):'
    )
    for line in table(r):
        print('  ' + line)
    print('  ' + host_line(r['machine']))
    if ns.json:
        Path(ns.json).write_text(json.dumps(r, indent=1, default=str))
    return 0


if __name__ == '__main__':
    sys.exit(main())
