"""The hardware graph (one process per node) on each executor, side by side in one run.

    python benchmarks/bench_executors.py           # 2 rounds of 44 s soaks (the CI soak's length)
    python benchmarks/bench_executors.py --quick   # 1 round of 30 s

Each round runs the CI soak's graph (every fault, the emulated rig, real DDS) twice: its
single-node processes spun by rclpy's C++ events executor (what `run_node` does where rclpy has
it), then by rclpy's Python SingleThreadedExecutor ($EQUIMUS_EVENTS_EXECUTOR=0). The valve driver
keeps the Python executor in both (its one-commander guard needs each command's MessageInfo).
Printed per executor, medians over the rounds: each node's CPU (% of a core), the mocap frame ->
SET bytes latency at the board, mocap frame -> /valve/command, the worst vent margin, and the
host's UDP receive-buffer drops during the soaks; then events / Python ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile

EXECUTORS = {'events': '1', 'python': '0'}
LATENCY_KEYS = (
    'e2e_mocap_to_serial_p50_ms',
    'e2e_mocap_to_serial_p99_ms',
    'e2e_mocap_to_serial_max_ms',
    'mocap_to_command_p99_ms',
    'vent_margin_max_ms',
    'cycles_missed',
)


@contextlib.contextmanager
def _executor(value: str):
    from equimus_ros.executors import EVENTS_EXECUTOR_ENV

    before = os.environ.get(EVENTS_EXECUTOR_ENV)
    os.environ[EVENTS_EXECUTOR_ENV] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(EVENTS_EXECUTOR_ENV, None)
        else:
            os.environ[EVENTS_EXECUTOR_ENV] = before


def soak_once(seconds: float, executor: str) -> tuple[dict, list[str]]:
    """One CI-length soak of the split graph with `executor`; its figures and failed checks."""
    from equimus_soak.soak import FAULTS, Soak

    with _executor(EXECUTORS[executor]), tempfile.TemporaryDirectory() as out:
        fig, checks = Soak(
            duration=seconds,
            faults=FAULTS,
            out=out,
            gap=1.0,
            log=lambda *_: None,
            every_fault=True,
        ).run()
    return fig, [c.name for c in checks if not c.ok]


def run(quick: bool = False, rounds: int | None = None, seconds: float | None = None, log=print):
    from equimus_ros.executors import events_executor_available

    rounds = rounds or (1 if quick else 2)
    seconds = seconds or (30.0 if quick else 44.0)

    if not events_executor_available():
        raise SystemExit(
            'this rclpy has no events executor (rclpy.experimental): nothing to compare'
        )
    runs: dict[str, list[dict]] = {name: [] for name in EXECUTORS}
    failed: dict[str, list[str]] = {name: [] for name in EXECUTORS}
    for r in range(rounds):
        for name in EXECUTORS:
            log(f'round {r + 1}/{rounds}: {name} executor, {seconds:g} s soak ...')
            fig, bad = soak_once(seconds, name)
            runs[name].append(fig)
            failed[name] += bad
    out: dict = {'rounds': rounds, 'seconds': seconds}
    nodes = sorted(
        k.removeprefix('cpu_pct_')
        for k in runs['events'][0]
        if k.startswith('cpu_pct_') and not k.startswith('cpu_pct_soak')
    )
    for name, figs in runs.items():
        for node in nodes:
            out[f'{name}_cpu_pct_{node}'] = statistics.median(f[f'cpu_pct_{node}'] for f in figs)
        out[f'{name}_cpu_pct_graph'] = round(sum(out[f'{name}_cpu_pct_{n}'] for n in nodes), 1)
        for key in LATENCY_KEYS:
            out[f'{name}_{key}'] = round(statistics.median(f[key] for f in figs), 3)
        drops = [f.get('udp_receive_buffer_drops_host') for f in figs]
        out[f'{name}_udp_receive_buffer_drops_host'] = (
            sum(drops) if all(isinstance(d, int) for d in drops) else 'n/a'
        )
        out[f'{name}_failed_checks'] = '; '.join(failed[name]) or 'none'
    out['nodes'] = ', '.join(nodes)
    for key in ['cpu_pct_graph', *LATENCY_KEYS[:4]]:
        p = out[f'python_{key}']
        out[f'{key}_events_vs_python'] = round(out[f'events_{key}'] / p, 3) if p else 'n/a'
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument('--quick', action='store_true', help='1 round of 30 s')
    ap.add_argument('--rounds', type=int, default=None, help='default 2 (1 with --quick)')
    ap.add_argument('--seconds', type=float, default=None, help='default 44 (30 with --quick)')
    ns = ap.parse_args()
    r = run(ns.quick, ns.rounds, ns.seconds)
    print(f'\nthe split hardware graph, {r["rounds"]} round(s) of {r["seconds"]:g} s, medians')
    print(f'  {"":32s} {"events":>9} {"python":>9} {"ratio":>7}')
    for node in [*r['nodes'].split(', '), 'graph']:
        e, p = r[f'events_cpu_pct_{node}'], r[f'python_cpu_pct_{node}']
        print(f'  {"CPU % " + node:32s} {e:9.1f} {p:9.1f} {e / p if p else float("nan"):7.2f}')
    for key in LATENCY_KEYS:
        e, p = r[f'events_{key}'], r[f'python_{key}']
        ratio = f'{e / p:7.2f}' if p else '    n/a'
        print(f'  {key:32s} {e:9.3f} {p:9.3f} {ratio}')
    e, p = (r[f'{name}_udp_receive_buffer_drops_host'] for name in ('events', 'python'))
    print(f'  {"UDP receive-buffer drops (host)":32s} {e!s:>9} {p!s:>9}  (all rounds)')
    for name in EXECUTORS:
        print(f'  failed checks ({name}): {r[f"{name}_failed_checks"]}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
