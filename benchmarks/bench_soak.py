"""Reliability soak benchmark: the hardware graph against the emulated rig, every fault, 120 Hz.

    python benchmarks/bench_soak.py --quick     # 60 s fused loop, then 60 s one process per node
    python benchmarks/bench_soak.py             # 10 minutes each (fault cycles repeated), then
                                                #   60 s with normal scheduling

Two graphs, measured one after the other in the same run: the fused control loop
(fused_loop:=true: NatNet bridge, estimator, controller and valve driver in one process, a frame
driving the chain by direct calls; every fault except kill_controller, which has no process of
its own there) and the default graph with one process per node (every fault). Both run the
control path with rt_priority (SCHED_FIFO 20, the emulated rig at 21) when this machine permits
it, as a rig would be run; the full mode adds a 60 s soak of the default graph with normal
scheduling, so the effect of the priorities is measured in the same run too.

Figures from equimus_soak.soak: missed cycles, command inter-arrival (jitter) at the DAC board,
mocap frame (NatNet transmit tick) -> SET bytes read by the board, vent times against the watchdog
deadlines, recorder acknowledged vs read back, CPU and RSS growth of every node. Baselines in the
same run: the NatNet emulator's own send interval (the source jitter every later figure includes).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

TARGETS = {
    'cycles_missed': 0,
    'e2e_mocap_to_serial_p99_ms': 2.0,
    'vent_margin_max_ms': 100.0,
    'recorder_lost_valve_command': 0,
}


RT_PRIORITY = 20
BASELINE_KEYS = (
    'cycles_missed',
    'mocap_frames_steady',
    'e2e_mocap_to_serial_p50_ms',
    'e2e_mocap_to_serial_p99_ms',
    'e2e_mocap_to_serial_max_ms',
    'vent_margin_max_ms',
    'checks_passed',
    'checks_total',
)


SPLIT_KEYS = BASELINE_KEYS + ('jitter_abs_p99_ms', 'recorder_lost_valve_command')


def run(quick: bool = True, duration: float = None) -> dict:
    from equimus_bringup.graph import realtime_problem
    from equimus_soak.soak import FAULTS, Soak

    duration = duration or (60.0 if quick else 600.0)
    rt = 0 if realtime_problem(RT_PRIORITY + 1) else RT_PRIORITY
    soak = Soak(
        duration=duration, faults=FAULTS, log=lambda *_: None, rt_priority=rt, fused_loop=True
    )
    fig, checks = soak.run()
    out = {
        'graph': 'fused control loop (fused_loop:=true)',
        'duration_s': duration,
        'rate_hz': 120.0,
        'scheduling': f'SCHED_FIFO {rt} (rig {rt + 1})'
        if rt
        else 'normal (SCHED_FIFO not permitted)',
    }
    out.update(fig)
    out['target_e2e_p99_ms'] = TARGETS['e2e_mocap_to_serial_p99_ms']
    out['e2e_p99_vs_target'] = round(
        fig['e2e_mocap_to_serial_p99_ms'] / TARGETS['e2e_mocap_to_serial_p99_ms'], 2
    )
    base = fig['baseline_mocap_send_interval_p99_ms'] - 1000 / 120
    out['jitter_p99_vs_source_jitter_p99'] = (
        round(fig['jitter_abs_p99_ms'] / base, 2) if base > 0 else 'n/a'
    )
    out['cycles_missed_ratio'] = round(fig['cycles_missed'] / max(1, fig['mocap_frames_steady']), 4)
    out['failed_checks'] = '; '.join(c.name for c in checks if not c.ok) or 'none'
    with contextlib.suppress(OSError):
        out['load_average_1min'] = round(float(Path('/proc/loadavg').read_text().split()[0]), 2)
    out['records'] = str(soak.out)
    split, split_checks = Soak(
        duration=duration, faults=FAULTS, log=lambda *_: None, rt_priority=rt
    ).run()
    for k in SPLIT_KEYS:
        out[f'split_graph_{k}'] = split[k]
    out['split_graph_failed_checks'] = '; '.join(c.name for c in split_checks if not c.ok) or 'none'
    for q in ('p50', 'p99'):
        key = f'e2e_mocap_to_serial_{q}_ms'
        out[f'e2e_{q}_fused_vs_split_graph'] = round(fig[key] / split[key], 2)
    if rt and not quick:
        base, base_checks = Soak(duration=60.0, faults=FAULTS, log=lambda *_: None).run()
        for k in BASELINE_KEYS:
            out[f'normal_sched_60s_{k}'] = base[k]
        out['normal_sched_60s_failed_checks'] = (
            '; '.join(c.name for c in base_checks if not c.ok) or 'none'
        )
        out['e2e_p99_split_graph_rt_vs_normal_sched'] = round(
            split['e2e_mocap_to_serial_p99_ms'] / base['e2e_mocap_to_serial_p99_ms'], 2
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument('--quick', action='store_true', help='60 s instead of 10 minutes')
    ap.add_argument('--duration', type=float, default=None, help='seconds (overrides --quick)')
    ns = ap.parse_args()
    r = run(ns.quick, ns.duration)
    print(
        f'{r["graph"]}: soak {r["duration_s"]:.0f} s at 120 Hz, {r["faults_injected"]} faults, '
        f'{r["checks_passed"]}/{r["checks_total"]} checks passed '
        f'(load average {r.get("load_average_1min")}); scheduling: {r["scheduling"]}'
    )
    print(f'  {"figure":36s} {"p50":>9} {"p99":>9} {"max":>9}')
    for key, label in (
        ('e2e_mocap_to_serial', 'mocap frame -> SET bytes at board'),
        ('fused_frame_to_write', 'in the loop: datagram -> SET written'),
        ('mocap_to_command', 'mocap frame -> /valve/command'),
        ('command_interarrival_at_board', 'command inter-arrival at board'),
        ('baseline_mocap_send_interval', 'baseline: NatNet send interval'),
    ):
        print(
            f'  {label:36s} '
            + ' '.join(f'{r[f"{key}_{q}_ms"]:8.3f}ms' for q in ('p50', 'p99', 'max'))
        )
    print(
        f'  cycles missed {r["cycles_missed"]} of {r["mocap_frames_steady"]} fault-free frames; '
        f'e2e p99 / 2 ms target = {r["e2e_p99_vs_target"]}'
    )
    print(
        f'  worst vent after its watchdog deadline {r["vent_margin_max_ms"]:.1f} ms (target 100 ms)'
    )
    print(
        f'  recorder: {r["recorder_read_back"]} read back >= '
        f'{r["recorder_acknowledged"]} acknowledged; '
        f'/valve/command lost {r.get("recorder_lost_valve_command")}'
    )
    for k, v in r.items():
        if k.startswith(('cpu_pct_', 'rss_growth_')):
            print(f'  {k:44s} {v}')
    print(f'  failed checks: {r["failed_checks"]}; records in {r["records"]}')
    for k, v in r.items():
        if k.startswith(('split_graph_', 'normal_sched_', 'e2e_p50_', 'e2e_p99_')):
            print(f'  {k:44s} {v}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
