"""Latency of the fused control loop per receive mode (issue 18, item 5), one command:

    python benchmarks/bench_latency.py                     # every mode, 10 s each (~3 min)
    python benchmarks/bench_latency.py --seconds 30 --modes default,busy_fifo

The fused control loop (`control_loop`, fused_loop:=true: NatNet bridge, estimator, PID
controller and valve driver in one process, a frame driving the chain by direct calls in the
receive thread) runs once per mode against the emulated rig in this process (NatNet server
emulator on loopback at 120 Hz, DAC board emulator on a pty, the MuJoCo leg between them), with
the reference process (triangle), as `hardware.launch.py fused_loop:=true emulator:=true` starts
it. Per mode, two figures side by side over the same frames (after a warm-up):
- in-process: the datagram read -> the return of the write() of its SET frame, p50/p99/p99.9/max
  (the control_loop node's own measurement, on /diagnostics, over every frame of the window);
- wire-to-wire: the emulator's transmit stamp of a frame -> the board emulator reading its SET
  frame off the pty, p50/p99/max (UDP, the loop, the pty and the emulator's read).

Modes (parameters of natnet_bridge and control_loop; docs/interfaces.md):
- default: the receive thread sleeps in select;
- fifo: the receive thread at SCHED_FIFO 50;
- busy: it polls the socket without ever sleeping (one core busy);
- busy_fifo: both;
- rt: the whole process at SCHED_FIFO 50 (graph argument rt_priority:=50: every thread, so the
  one holding the GIL is not preempted by the machine's other work while the receive thread
  waits for it);
- rt_busy: rt, and the receive thread at SCHED_FIFO 55 polling all the time;
- rt_mlock: rt, memory locked and pre-faulted (control_loop lock_memory);
- rt_gc: rt, the garbage collector run after each write (control_loop gc_after_write);
- rt_tuned: rt, and the receive thread at SCHED_FIFO 55 polling the last 2 ms before each
  expected frame, memory locked and pre-faulted (mlockall), the garbage collector run after
  each write, SO_BUSY_POLL 50 us;
- default_tuned: rt_tuned's settings without any real-time priority (normal scheduling): the
  receive thread polling the last 2 ms before each expected frame, SO_BUSY_POLL 50 us, memory
  locked, the collector run after each write;
- default_gil100: default, with the loop process's GIL switch interval 100 us instead of every
  node process's 500 us (control_loop gil_switch_interval_us);
- default_python_executor: default, with the loop's nodes on rclpy's Python executor
  (EQUIMUS_EVENTS_EXECUTOR=0) instead of the events executor;
- default_python_kernels: default, with the estimator's and the PID's arithmetic in Python
  (EQUIMUS_KERNELS=python), the reference form of the compiled kernels every other mode runs;
- default_no_quiet: default, with the executor thread's quiet windows off (control_loop
  quiet_window_ms 0): its callbacks run whenever their event comes, a frame arriving meanwhile
  waits for the GIL;
- default_rehearsed: default, with the chain rehearsed 1 ms before each expected frame
  (control_loop rehearse_lead_ms 1.0; off by default): its code run on spare copies, so the
  frame meets it in the caches instead of as the 8 ms since the last frame left them.
The rig's threads run at SCHED_FIFO 51 when this machine permits it (they stand in for Motive's
PC and a microcontroller), in every mode alike; where SCHED_FIFO is refused the FIFO modes say so
(the receive_thread value of the bridge's diagnostics) and run with normal scheduling.
`--rig-scheduling normal` runs them with normal scheduling instead. On a real rig the board is
a microcontroller behind USB and reads a frame without taking a CPU of this computer; here the
board emulator's reader at SCHED_FIFO is woken by the loop's write() and may preempt the writer
on its own core, so the write returns only after the emulator has read the frame. Running both
ways shows how much of the last stage that is.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RATE_HZ = 120.0
WARMUP_S = 3.0  # after the loop's first second of answered frames (caches, allocator)
RIG_PRIORITY = 51

TUNED_WINDOW_S = 0.002
RT_PRIORITY = 50  # the whole process (graph argument rt_priority), and the receive thread alone
TUNED = {
    'natnet_bridge': {
        'busy_poll_window': TUNED_WINDOW_S,
        'receive_priority': RT_PRIORITY + 5,
        'so_busy_poll_us': 50,
    },
    'control_loop': {'lock_memory': True, 'gc_after_write': True},
}
# mode -> (node-scoped parameters, graph arguments)
MODES: dict[str, tuple[dict[str, dict[str, object]], dict[str, str]]] = {
    'default': ({}, {}),
    'fifo': ({'natnet_bridge': {'receive_priority': RT_PRIORITY}}, {}),
    'busy': ({'natnet_bridge': {'busy_poll_window': 1.0}}, {}),
    'busy_fifo': (
        {'natnet_bridge': {'busy_poll_window': 1.0, 'receive_priority': RT_PRIORITY}},
        {},
    ),
    'rt': ({}, {'rt_priority': str(RT_PRIORITY)}),
    'rt_busy': (
        {'natnet_bridge': {'busy_poll_window': 1.0, 'receive_priority': RT_PRIORITY + 5}},
        {'rt_priority': str(RT_PRIORITY)},
    ),
    'rt_mlock': ({'control_loop': {'lock_memory': True}}, {'rt_priority': str(RT_PRIORITY)}),
    'rt_gc': ({'control_loop': {'gc_after_write': True}}, {'rt_priority': str(RT_PRIORITY)}),
    'rt_tuned': (TUNED, {'rt_priority': str(RT_PRIORITY)}),
    'default_tuned': (
        {**TUNED, 'natnet_bridge': {**TUNED['natnet_bridge'], 'receive_priority': 0}},
        {},
    ),
    'default_gil100': ({'control_loop': {'gil_switch_interval_us': 100.0}}, {}),
    'default_python_executor': ({}, {}),
    'default_python_kernels': ({}, {}),
    'default_no_quiet': ({'control_loop': {'quiet_window_ms': 0.0}}, {}),
    'default_rehearsed': ({'control_loop': {'rehearse_lead_ms': 1.0}}, {}),
}
# mode -> environment of the loop's process
MODE_ENV = {
    'default_python_executor': {'EQUIMUS_EVENTS_EXECUTOR': '0'},
    'default_python_kernels': {'EQUIMUS_KERNELS': 'python'},
}
MODE_WIDTH = max(map(len, MODES))
GOALS_MS = {'in_process_p99': 0.5, 'wire_p99': 2.0}


def _params_file(path: Path, mode: dict[str, dict[str, object]], window: int) -> None:
    """A ROS parameter file with the mode's node-scoped parameters."""
    nodes = {k: dict(v) for k, v in mode.items()}
    nodes.setdefault('control_loop', {})['latency_window'] = window
    lines = []
    for node, params in nodes.items():
        lines += [f'{node}:', '  ros__parameters:']
        lines += [
            f'    {k}: {str(v).lower() if isinstance(v, bool) else v}' for k, v in params.items()
        ]
    path.write_text('\n'.join(lines) + '\n')


MATCH_S = 0.1  # a SET later than this after its frame: the frame counts as unanswered


def match_sets(frames: list[float], sets: list[float]) -> tuple[list[float], int]:
    """Wire-to-wire latencies: each SET frame the board read (its read times, in order) answers
    the oldest unanswered frame (transmit times, in order) sent before it and at most MATCH_S
    earlier; frames left behind are unanswered (counted), a SET with no frame pending answers
    none. A SET that answers no frame (the driver's keep-alive or a vent while the loop stalls)
    is taken for the oldest pending one, which shortens that burst's figures until the loop has
    caught up: the in-order match then starts afresh at the next frame."""
    wire: list[float] = []
    unmatched = 0
    k = 0
    for t in sets:
        while k < len(frames) and t - frames[k] > MATCH_S:
            unmatched += 1  # too old to be what this SET answers
            k += 1
        if k < len(frames) and frames[k] < t:
            wire.append(t - frames[k])
            k += 1
    unmatched += len(frames) - k
    return wire, unmatched


def _percentiles(values_s: list[float]) -> dict[str, float]:
    if not values_s:
        return {q: float('nan') for q in ('p50', 'p99', 'p999', 'max')}
    v = np.asarray(values_s) * 1e3
    return {
        'p50': float(np.percentile(v, 50)),
        'p99': float(np.percentile(v, 99)),
        'p999': float(np.percentile(v, 99.9)),
        'max': float(v.max()),
    }


class Diagnostics:
    """The last control_loop and natnet_bridge statuses seen on /diagnostics (rclpy)."""

    def __init__(self) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray

        from equimus_description.interface import DIAGNOSTICS
        from equimus_ros.qos import subscription

        self.rclpy = rclpy
        rclpy.init(args=['--ros-args', '-r', '__node:=bench_latency'])
        self.node = rclpy.create_node('bench_latency')
        self.latest: dict[str, tuple[float, dict[str, str]]] = {}
        subscription(self.node, DiagnosticArray, DIAGNOSTICS, self._on_diag)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _on_diag(self, msg) -> None:
        for st in msg.status:
            for prefix in ('control_loop:', 'natnet_bridge:'):
                if st.name.startswith(prefix):
                    values = {kv.key: kv.value for kv in st.values}
                    self.latest[prefix] = (time.monotonic(), values)

    def _spin(self) -> None:
        while not self._stop.is_set() and self.rclpy.ok():
            self.rclpy.spin_once(self.node, timeout_sec=0.1)

    def after(self, prefix: str, t: float, timeout: float = 5.0) -> dict[str, str]:
        """The first status of `prefix` received after monotonic time `t`."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            got = self.latest.get(prefix)
            if got is not None and got[0] > t:
                return got[1]
            time.sleep(0.05)
        return {}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        self.node.destroy_node()
        self.rclpy.try_shutdown()


def _rig_priority(scheduling: str) -> str:
    """This thread at SCHED_FIFO RIG_PRIORITY, if permitted, so the emulators' threads started
    next inherit it (not with SCHED_RESET_ON_FORK, which Linux applies to new threads too);
    `_normal_scheduling` afterwards, before any process is started."""
    if scheduling == 'normal':
        return 'normal (--rig-scheduling normal)'
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RIG_PRIORITY))
    except (OSError, AttributeError) as e:
        return f'normal (SCHED_FIFO refused: {getattr(e, "strerror", e)})'
    return f'SCHED_FIFO {RIG_PRIORITY}'


def _normal_scheduling() -> None:
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def run_mode(
    name: str, rig, sink: dict, ports, link: str, diag: Diagnostics, seconds: float, tmp: Path
) -> dict:
    """One run of the fused loop in mode `name` against the running rig: both figures
    (`sink['sent']` collects the emulator's transmit stamps while it is a list)."""
    from equimus_bringup.control_loop import CPU_STAGES, STAGES
    from equimus_bringup.graph import describe_graph
    from equimus_bringup.supervisor import GraphError, Supervisor

    params = tmp / f'{name}.yaml'
    node_params, graph_args = MODES[name]
    _params_file(params, node_params, int(seconds * RATE_HZ))
    specs = describe_graph(
        'hardware',
        {
            **graph_args,
            'fused_loop': 'true',
            'auto_arm': 'true',
            'record': 'false',
            'serial_port': link,
            'calibration': 'none',  # the emulated board's DAC chain is the nominal one
            'natnet_command_port': str(ports[0]),
            'natnet_data_port': str(ports[1]),
            'params_file': str(params),
        },
    )
    specs = [s for s in specs if s.name in ('control_loop', 'reference')]
    sup = Supervisor(
        specs, echo=False, log_level='warn', env={**os.environ, **MODE_ENV.get(name, {})}
    )
    try:
        sup.check_realtime()
    except GraphError as exc:
        return {'mode': name, 'skipped': str(exc)}
    sent: list[tuple[float, int]] = []
    sink['sent'] = sent
    try:
        sup.start()
        t_start = time.monotonic()
        # The loop answers frames (its own count on /diagnostics, after this run started).
        while int(diag.after('control_loop:', t_start, 0.5).get('frames', '0') or 0) < RATE_HZ:
            if sup.poll():
                raise RuntimeError(f'{name}: the loop stopped: {sup.failed}')
            if time.monotonic() - t_start > 90.0:
                raise RuntimeError(f'{name}: no frame answered within 90 s; {sup.output}')
        time.sleep(WARMUP_S)
        t0 = time.monotonic()
        time.sleep(seconds)
        t1 = time.monotonic()
        inproc = diag.after('control_loop:', t1)
        bridge = diag.after('natnet_bridge:', t1)
    finally:
        sink['sent'] = None
        sup.stop()
    frames = sorted(t for t, _ in sent if t0 <= t <= t1)
    sets = [f.t for f in list(rig.board.frames) if f.accepted and t0 <= f.t <= t1 + MATCH_S]
    wire, unmatched = match_sets(frames, sets)
    w = _percentiles(wire)

    def num(key: str) -> float:
        try:
            return float(inproc.get(key, 'nan'))
        except ValueError:
            return float('nan')

    return {
        'mode': name,
        'in_process_p50_ms': num('latency_p50_ms'),
        'in_process_p99_ms': num('latency_p99_ms'),
        'in_process_p999_ms': num('latency_p999_ms'),
        'in_process_max_ms': num('latency_max_ms'),
        'in_process_frames': int(num('window')) if inproc else 0,
        'wire_p50_ms': w['p50'],
        'wire_p99_ms': w['p99'],
        'wire_max_ms': w['max'],
        'wire_frames': len(wire),
        'wire_unmatched': unmatched,
        'receive_thread': bridge.get('receive_thread', '?'),
        'so_busy_poll': bridge.get('so_busy_poll', '?'),
        'memory': inproc.get('memory', '?'),
        'gc': inproc.get('gc', '?'),
        'kernels': inproc.get('kernels', '?'),
        # ms after the datagram was read at which a frame reached each stage of the chain
        'reached_ms': {
            stage: (num(f'reached_{stage}_p50_ms'), num(f'reached_{stage}_p99_ms'))
            for stage in STAGES
        },
        # the same in the receive thread's CPU time used since the read
        'cpu_ms': {
            stage: (num(f'cpu_{stage}_p50_ms'), num(f'cpu_{stage}_p99_ms')) for stage in CPU_STAGES
        },
        # per frame, wall-clock less the receive thread's CPU time from the read to the write
        'waited_ms': (num('waited_p50_ms'), num('waited_p99_ms')),
        'waited_frames_pct': num('waited_frames_pct'),
        # the chain rehearsed before each expected frame: how often, how often it ran into the
        # frame's earliest arrival, its CPU µs (p50)
        'rehearsals': (num('rehearsals'), num('rehearsals_overran'), num('rehearsal_cpu_p50_us')),
    }


def run(modes: list[str], seconds: float, rig_scheduling: str = 'fifo') -> dict:
    from equimus_bringup.rig_emulator import BODIES, EmulatedRig
    from equimus_hw.natnet.emulator import NatNetEmulator
    from equimus_hw.natnet.ports import free_udp_ports

    os.environ.setdefault('ROS_DOMAIN_ID', str(150 + os.getpid() % 80))
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    load0 = os.getloadavg()[0]
    ports = tuple(free_udp_ports(2))
    sink: dict[str, list | None] = {'sent': None}

    def on_sent(frame_number: int, stamp_ticks: int) -> None:
        sent = sink['sent']
        if sent is not None:
            sent.append((stamp_ticks * 100 / 1e9, frame_number))  # ticks_now: perf_counter / 100

    natnet = NatNetEmulator(
        command_port=ports[0],
        data_port=ports[1],
        multicast=True,
        rate_hz=RATE_HZ,
        bodies=BODIES,
        on_sent=on_sent,
    )
    results = []
    with tempfile.TemporaryDirectory(prefix='bench_latency_') as tmp_name:
        tmp = Path(tmp_name)
        link = str(tmp / 'dac')
        diag = Diagnostics()  # first: rclpy's threads keep normal scheduling
        rig = EmulatedRig(link, natnet, rate=RATE_HZ, position_noise=0.0002)
        rig_sched = _rig_priority(rig_scheduling)
        try:
            with rig:
                _normal_scheduling()  # the processes started from here: their own settings
                threading.Thread(target=rig.run, daemon=True).start()
                for name in modes:
                    results.append(run_mode(name, rig, sink, ports, link, diag, seconds, tmp))
                    print(_row(results[-1]), flush=True)
        finally:
            _normal_scheduling()
            diag.close()
    return {
        'results': results,
        'seconds': seconds,
        'rig_scheduling': rig_sched,
        'load_average_1min_at_start': load0,
        'load_average_1min_at_end': os.getloadavg()[0],
    }


HEADER = (
    f'{"mode":{MODE_WIDTH}s} {"in-process p50/p99/p99.9/max ms":>34s}   '
    f'{"wire-to-wire p50/p99/max ms":>28s}'
    '   frames (in/wire/unmatched)'
)


def _row(r: dict) -> str:
    if 'skipped' in r:
        return f'{r["mode"]:{MODE_WIDTH}s} skipped: {r["skipped"]}'
    ip = '/'.join(f'{r[f"in_process_{q}_ms"]:.3f}' for q in ('p50', 'p99', 'p999', 'max'))
    wi = '/'.join(f'{r[f"wire_{q}_ms"]:.3f}' for q in ('p50', 'p99', 'max'))
    return (
        f'{r["mode"]:{MODE_WIDTH}s} {ip:>34s}   {wi:>28s}   '
        f'{r["in_process_frames"]}/{r["wire_frames"]}/{r["wire_unmatched"]}'
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument('--seconds', type=float, default=10.0, help='measured s per mode')
    p.add_argument('--modes', default=','.join(MODES), help=f'comma-separated, of {list(MODES)}')
    p.add_argument(
        '--rig-scheduling',
        choices=('fifo', 'normal'),
        default='fifo',
        help="the emulated rig's threads at SCHED_FIFO 51 (where permitted) or normal",
    )
    ns = p.parse_args(argv)
    modes = [m for m in ns.modes.split(',') if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        print(f'bench_latency: unknown modes {unknown}; choose from {list(MODES)}', file=sys.stderr)
        return 2
    from equimus_bringup.control_loop import WAITED_MS

    print(HEADER, flush=True)
    r = run(modes, ns.seconds, ns.rig_scheduling)
    print(
        f'goals: in-process p99 < {GOALS_MS["in_process_p99"]} ms, wire-to-wire p99 < '
        f'{GOALS_MS["wire_p99"]} ms; {ns.seconds:g} s a mode after {WARMUP_S:g} s of warm-up; '
        f'rig threads {r["rig_scheduling"]}; 1-min load average '
        f'{r["load_average_1min_at_start"]:.2f} at start, {r["load_average_1min_at_end"]:.2f} at '
        f'end, on {os.cpu_count()} cores'
    )
    for res in r['results']:
        if 'skipped' in res:
            continue
        print(
            f'  {res["mode"]:{MODE_WIDTH}s} receive thread: {res["receive_thread"]}; so_busy_poll '
            f'{res["so_busy_poll"]}; memory {res["memory"]}; gc {res["gc"]}; kernels '
            f'{res["kernels"]}'
        )
    print(
        'where the time goes (in-process, ms after the datagram was read at which a frame '
        'reached each stage, p50/p99; the step between two is the cost of the stage before):'
    )
    for res in r['results']:
        if 'skipped' in res:
            continue
        steps = [(s, *ms) for s, ms in res['reached_ms'].items()] + [
            ('written', res['in_process_p50_ms'], res['in_process_p99_ms'])
        ]
        print(
            f'  {res["mode"]:{MODE_WIDTH}s} '
            + '  '.join(f'{s} {a:.3f}/{b:.3f}' for s, a, b in steps)
        )
    print(
        "the same in the receive thread's CPU time (ms used since the read, p50/p99; close to the "
        'wall-clock figures: the stage computes; far below them: it waits for the GIL or a core):'
    )
    for res in r['results']:
        if 'skipped' in res:
            continue
        cpu = '  '.join(f'{s} {a:.3f}/{b:.3f}' for s, (a, b) in res['cpu_ms'].items())
        print(f'  {res["mode"]:{MODE_WIDTH}s} {cpu}')
    print(
        'what a frame waited (wall-clock less CPU time, read to write, per frame; for the GIL '
        f'held by another thread of the process, or for a core), p50/p99 ms, and the frames that '
        f'waited more than {WAITED_MS} ms:'
    )
    for res in r['results']:
        if 'skipped' in res:
            continue
        a, b = res['waited_ms']
        print(
            f'  {res["mode"]:{MODE_WIDTH}s} {a:.3f}/{b:.3f}, {res["waited_frames_pct"]:.1f} % '
            'of the frames'
        )
    print(
        'the chain rehearsed before each expected frame (control_loop rehearse_lead_ms): '
        "rehearsals, those still running at the frame's earliest arrival, CPU µs p50:"
    )
    for res in r['results']:
        if 'skipped' in res:
            continue
        n, over, cpu = res['rehearsals']
        print(f'  {res["mode"]:{MODE_WIDTH}s} {n:.0f}, {over:.0f} overran, {cpu:.1f} µs')
    return 0


if __name__ == '__main__':
    sys.exit(main())
