"""Simulation node speed: real-time factor and loop jitter of `sim`, beside the bare model.

    python benchmarks/bench_sim.py [--quick]

Side by side, in one run, on the default model (config/leg.yaml, 'equimus' variant):
- bare mj_step loop of the compiled model (the physical floor), and LegSimulator.advance
  (valve lag + F = S·P + stability check) in 1/120 s frames, at Δt = 1/600 s (default) and 1/1200 s;
- the `sim` node in its own process, realtime at 1x with 120 Hz publishing: real-time factor and
  tick lateness (jitter) p50/p99/max against the absolute deadlines, from its /diagnostics;
  a subscriber in this process also counts the /mocap/calf/pose rate;
- the same with the loop thread at SCHED_FIFO priority 50 (parameter realtime_priority);
- the node free-running (real_time_factor 0): sim seconds per wall second, from /diagnostics;
- the node's per-frame cost in this process, publishing pre-serialised messages against message
  objects, in alternating blocks.
Targets (issue 2): realtime holds 1.0 with p99 jitter < 1 ms; free-running >= 100x.

Simulation as a platform (issue 13; `--platform` runs only this part), in alternating rounds so
machine load hits all three alike, each a run of `pause_at` sim seconds in a fresh process:
- the bare mj_step loop (one mj_step call per physics step, as above);
- the free-running sim node (realtime, real_time_factor 0) running its own loop until pause_at;
- the whole lockstep sim graph composed in one process (equimus_bringup.sim_graph: sim, valve
  driver on its simulated board, estimator, PID controller, reference, recorder recording every
  topic), as `make run` starts it, from its first frame until pause_at.
Ratios to the bare loop are the figures that carry over between machines: the targets (graph
>= 20x, node >= 100x) are against a bare loop of 270-320x on an idle machine (issue 13).
Each run also takes the bare loop in its own process, ADJACENT_BARE_S wall seconds just before
and just after it (`bare_window`), and is given against those too: on a host whose speed swings
within seconds, the round's bare loop (seconds away, in this process) moves with the swing.
Beside them (issue 30), the free-running node's per-frame breakdown from two more runs per round
with its phases on thread CPU clocks (physics, the frame's state copied out, virtual mocap,
publishing; the main thread's time waiting for a CPU, from /proc schedstat; the other threads'
CPU), as it runs (FREE_RUN_FRAMES frames a turn) and frame by frame, side by side.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def bare_model(dt: float, sim_seconds: float) -> dict:
    import mujoco

    from equimus_sim.simulator import make_simulator

    sim = make_simulator(timestep=dt)
    m, d = sim.model, sim.data
    n = int(round(sim_seconds / dt))
    t, c = time.perf_counter(), time.process_time()
    for _ in range(n):
        mujoco.mj_step(m, d)
    bare = sim_seconds / (time.perf_counter() - t)
    bare_cpu = sim_seconds / (time.process_time() - c)
    sim.reset('benchmark')
    sim.set_command([30.0, 20.0])
    frames = int(round(sim_seconds * 120))
    t = time.perf_counter()
    for _ in range(frames):
        sim.advance_to(sim.time + 1 / 120)
    adv = sim_seconds / (time.perf_counter() - t)
    return {
        'mj_step_rtf': bare,
        'mj_step_rtf_cpu': bare_cpu,
        'simulator_rtf': adv,
        'us_per_step': 1e6 * dt / bare,
    }


#: wall s of each bare mj_step window a platform run takes in its own process, before and after
#: its run (`bare_window`)
ADJACENT_BARE_S = 0.4


def bare_window(sim, wall_s: float = ADJACENT_BARE_S) -> tuple[float, float]:
    """The bare mj_step loop of `sim` (a LegSimulator at Δt 1/600 s) for about `wall_s` wall
    seconds, after 300 warm-up steps: (sim s per wall s, sim s per CPU s of this process). A
    platform run takes one just before and one just after it, in its own process: the host's
    speed swings by half within seconds on a shared machine, and a bare loop measured in
    another process seconds apart measures the swing as much as the run (docs/benchmarks.md,
    issue 30)."""
    import mujoco

    m, d = sim.model, sim.data
    for _ in range(300):
        mujoco.mj_step(m, d)
    steps = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < wall_s:
        for _ in range(60):
            mujoco.mj_step(m, d)
        steps += 60
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return steps / 600 / wall, steps / 600 / cpu


def _harmonic(a: float, b: float) -> float:
    """Two rates over equal work, combined as one rate over both."""
    return 2.0 / (1.0 / a + 1.0 / b)


def node_run(params: dict, seconds: float, count_poses: bool) -> dict:
    """Start the node, collect its /diagnostics for `seconds` after the first report."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import PoseStamped
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import qos_profile_sensor_data

    cmd = [
        sys.executable,
        '-m',
        'equimus_sim.sim_node',
        '--ros-args',
        '--params-file',
        str(REPO / 'config' / 'sim.yaml'),
    ]
    for k, v in params.items():
        cmd += ['-p', f'{k}:={v}']
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    rclpy.init()
    node = rclpy.create_node('bench_sim_probe')
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    reports, poses = [], []

    def on_diag(arr):
        for s in arr.status:
            if s.name == 'sim: simulator':
                reports.append((time.monotonic(), {kv.key: kv.value for kv in s.values}))

    node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, 50)
    if count_poses:
        node.create_subscription(
            PoseStamped,
            '/mocap/calf/pose',
            lambda m: poses.append(time.monotonic()),
            qos_profile_sensor_data,
        )
    try:
        end = time.monotonic() + 60
        while len(reports) < 2 and time.monotonic() < end and proc.poll() is None:
            ex.spin_once(timeout_sec=0.05)
        if len(reports) < 2:
            stderr = proc.stderr.read() if proc.poll() is not None else ''
            raise RuntimeError(f'sim node gave no diagnostics: {stderr}')
        first = len(reports)
        t0 = time.monotonic()
        n_pose0 = len(poses)
        while time.monotonic() - t0 < seconds:
            ex.spin_once(timeout_sec=0.05)
        win = [r for _, r in reports[first:]]
        pose_rate = (len(poses) - n_pose0) / (time.monotonic() - t0)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        ex.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    (wa, a), (wb, b) = reports[first - 1], reports[-1]
    rtf = (float(b['sim_time']) - float(a['sim_time'])) / (wb - wa)
    f = lambda key: np.array([float(r[key]) for r in win if r[key] != 'nan'])  # noqa: E731
    out = {
        'rtf': rtf,
        'windows': len(win),
        'pose_rate_hz': pose_rate,
        'work_p50_us': float(np.median(f('tick_work_p50_us'))),
        'work_p99_us': float(np.max(f('tick_work_p99_us'))),
        'overruns': int(win[-1]['overruns']) if win else 0,
    }
    if params.get('real_time_factor', 1.0) > 0:
        out.update(
            jitter_p50_us=float(np.median(f('jitter_p50_us'))),
            jitter_p99_us_median=float(np.median(f('jitter_p99_us'))),
            jitter_p99_us_worst=float(np.max(f('jitter_p99_us'))),
            jitter_max_us=float(np.max(f('jitter_max_us'))),
        )
    return out


def publish_paths(blocks: int, ticks: int) -> dict:
    """The node's per-frame cost (tick: physics, virtual mocap, 6 publishes) in this process,
    pre-serialised (equimus_ros.cdr) against message objects (the writers' fallback path: a
    message object built and converted by rclpy per publish), in alternating blocks so that
    machine drift hits both alike."""
    import rclpy
    from rclpy.parameter import Parameter

    from equimus_sim.sim_node import SimNode

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = SimNode(context=ctx, parameter_overrides=[Parameter('real_time_factor', value=0.0)])
    writers = [
        node.out_clock,
        node.out_joints,
        *node.out_pose.values(),
        node.out_pressure,
    ]
    per_tick = {True: [], False: []}
    try:
        for _ in range(200):
            node.tick()
        for _ in range(blocks):
            for packed in (True, False):
                for w in writers:
                    w.packed = packed
                t = time.perf_counter()
                for _ in range(ticks):
                    node.tick()
                per_tick[packed].append((time.perf_counter() - t) / ticks)
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
    fast, slow = (float(np.median(per_tick[k])) for k in (True, False))
    return {
        'tick_us_preserialised': 1e6 * fast,
        'tick_us_message_objects': 1e6 * slow,
        'tick_preserialised_vs_message_objects': fast / slow,
        'tick_loop_rtf_preserialised': (1 / 120) / fast,
        'tick_loop_rtf_message_objects': (1 / 120) / slow,
    }


def turns(blocks: int = 6, frames: int = 4800) -> dict:
    """The free-running node in this process (its writers publishing on DDS, no subscriber),
    main-thread CPU a frame (thread CPU clock):
    - each phase alone, its calls in a row (physics of a frame, the frame's state copied, its
      virtual mocap, its six messages published), against the same phases inside the
      frame-by-frame loop (`run_frames(1)`, each phase timed in place);
    - `run_frames(k)` for k = 1, 8, 32 frames a turn, in alternating blocks (medians).
    Why the node's share of the bare loop moves between hosts (docs/benchmarks.md, issue 30)."""
    import rclpy
    from rclpy.parameter import Parameter

    from equimus_sim.sim_node import SimNode

    clock = time.thread_time_ns
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = SimNode(context=ctx, parameter_overrides=[Parameter('real_time_factor', value=0.0)])
    out: dict = {'load_average_1min_at_start': os.getloadavg()[0]}
    try:
        node.run_frames(300)
        sim = node.sim

        def alone(f, n: int = 2000) -> float:
            c = clock()
            for _ in range(n):
                f()
            return (clock() - c) / n / 1e3

        t_ns = node.time_ns(node.frame)
        state = node._frame_state(t_ns)
        outputs = node._frame_outputs(*state)
        phases_alone = {
            'physics': alone(lambda: sim.advance_to(sim.time + 1 / node.rate)),
            'state_copy': alone(lambda: node._frame_state(t_ns)),
            'mocap_outputs': alone(lambda: node._frame_outputs(*state)),
            'publish': alone(lambda: node._publish_frame(*outputs)),
        }
        inside = dict.fromkeys(phases_alone, 0)
        n = frames
        for _ in range(n):
            a = clock()
            node.frame += 1
            t = node.time_ns(node.frame)
            sim.advance_to(t * 1e-9)
            b = clock()
            st = node._frame_state(t)
            c = clock()
            o = node._frame_outputs(*st)
            d = clock()
            node._publish_frame(*o)
            e = clock()
            for key, dt in zip(inside, (b - a, c - b, d - c, e - d), strict=True):
                inside[key] += dt
        out['phase_us_alone'] = phases_alone
        out['phase_us_inside_loop'] = {k: v / n / 1e3 for k, v in inside.items()}
        per_turn: dict[int, list[float]] = {1: [], 8: [], 32: []}
        for _ in range(blocks):
            for k in per_turn:
                c = clock()
                for _ in range(frames // k):
                    node.run_frames(k)
                per_turn[k].append((clock() - c) / (frames // k * k) / 1e3)
        out['run_frames_us'] = {k: float(np.median(v)) for k, v in per_turn.items()}
        out['run_frames_us_blocks'] = {k: [round(x, 1) for x in v] for k, v in per_turn.items()}
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
    out['load_average_1min_at_end'] = os.getloadavg()[0]
    return out


def print_turns(r: dict) -> None:
    print(
        'free-running node in this process, main-thread CPU µs a frame '
        f'(load {r["load_average_1min_at_start"]:.1f} -> {r["load_average_1min_at_end"]:.1f}):'
    )
    print(f'  {"phase":16s} {"alone":>8s} {"inside the frame-by-frame loop":>32s}')
    for k, v in r['phase_us_alone'].items():
        print(f'  {k:16s} {v:8.1f} {r["phase_us_inside_loop"][k]:32.1f}')
    print('  run_frames(k), alternating blocks (median; blocks):')
    for k, v in r['run_frames_us'].items():
        print(f'    {k:2d} frames a turn: {v:6.1f}  {r["run_frames_us_blocks"][k]}')


def _child_run(kind: str, seconds: float, out_dir: str, leg_overrides: str = '') -> dict:
    """In a fresh process: the free-running node or the composed graph, from its first frame
    until it pauses itself at `seconds` of sim time; `leg_overrides` as the launch argument
    (an identified fit: its valve has a dead time)."""
    import threading

    import rclpy

    from equimus_bringup.graph import describe_graph, ros_arguments

    cfg = str(REPO / 'config')
    profile = kind.startswith('node_profile')
    if profile:
        import equimus_sim.sim_node as sim_node_module

        if kind == 'node_profile_1':
            sim_node_module.FREE_RUN_FRAMES = 1  # frame by frame, as before issue 30
        kind = 'node'
    if kind == 'graph':
        (spec,) = describe_graph(
            'sim',
            {
                'record': 'true',
                'bag': str(Path(out_dir) / 'bag'),
                'pause_at': repr(seconds),
                'config_dir': cfg,
                'leg_overrides': leg_overrides,
            },
        )
        args = ros_arguments(spec, 'warn')
    else:
        args = ['--ros-args', '--log-level', 'warn', '--params-file', f'{cfg}/sim.yaml']
        for k, v in (('mode', 'realtime'), ('real_time_factor', 0.0), ('pause_at', seconds)):
            args += ['-p', f'{k}:={v}']
        if leg_overrides:
            args += ['-p', f'parameter_overrides:={leg_overrides}']
    from equimus_ros.main import GIL_SWITCH_INTERVAL_S, _freeze_startup_objects

    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)  # as every node process (equimus_ros.main)
    rclpy.init(args=args)
    if kind == 'graph':
        from equimus_bringup.sim_graph import SimGraph

        graph = SimGraph()
        sim, nodes, spin = graph.sim, graph.all_nodes(), graph.spin
    else:
        from equimus_sim.sim_node import SimNode

        sim = SimNode()
        nodes, spin = [sim], sim.run
    phases = _instrument(sim) if profile else {}
    from equimus_sim.simulator import make_simulator

    bare_sim = make_simulator(timestep=1 / 600)  # its own model and data, not the run's
    bare_before = bare_window(bare_sim)
    _freeze_startup_objects()  # as run_node does before it spins a node
    marks: dict[str, float] = {}

    def watch() -> None:
        while sim.frame == 0 and sim.running():
            time.sleep(0.0005)
        marks['first'], marks['cpu0'] = time.perf_counter(), time.process_time()
        marks['threads0'] = _thread_cpu()
        for ph in phases.values():
            ph[0] = ph[1] = 0
        marks['frame0'] = sim.frame
        while not sim.paused and sim.running():
            time.sleep(0.002)
        marks['paused'], marks['cpu1'] = time.perf_counter(), time.process_time()
        marks['threads1'] = _thread_cpu()
        sim.stop()

    threading.Thread(target=watch, daemon=True).start()
    spin()
    frames = sim.frame
    if kind == 'graph':
        graph.close()
    for node in nodes:
        node.destroy_node()
    rclpy.try_shutdown()
    bare_after = bare_window(bare_sim)
    wall = marks['paused'] - marks['first']
    sim_s = (frames - marks['frame0']) / sim.rate
    # CPU time of this process (all its threads): what the run costs, whatever else the machine
    # runs; the recorder's writer process is not in it (it runs beside, see bag_process).
    cpu = marks['cpu1'] - marks['cpu0']
    out = {
        'rtf': sim_s / wall,
        'rtf_cpu': sim_s / cpu,
        'frames': frames,
        'wall_s': wall,
        # the bare loop in this process just before and after the run
        'bare_rtf': _harmonic(bare_before[0], bare_after[0]),
        'bare_rtf_cpu': _harmonic(bare_before[1], bare_after[1]),
        'bare_rtf_before_after': [bare_before[0], bare_after[0]],
    }
    if profile:
        n = frames - marks['frame0']
        t0, t1 = marks['threads0'], marks['threads1']
        main_tid = threading.main_thread().native_id
        main_cpu, main_wait = (b - a for a, b in zip(t0[main_tid], t1[main_tid], strict=True))
        others = sum(v[0] - t0.get(k, (0.0, 0.0))[0] for k, v in t1.items() if k != main_tid)
        us = lambda x: 1e6 * x / n  # noqa: E731
        out['us_per_frame'] = {
            'wall': us(wall),
            'main_thread_cpu': us(main_cpu),
            **{f'{k}_cpu': v[0] / 1e3 / n for k, v in phases.items()},
            'other_threads_cpu': us(others),
            'main_thread_waiting_for_a_cpu': us(main_wait),
            'main_thread_blocked_or_asleep': us(wall - main_cpu - main_wait),
            'phase_calls_per_frame': sum(v[1] for v in phases.values()) / n,
        }
    return out


def _thread_cpu() -> dict[int, tuple[float, float]]:
    """Per thread of this process: seconds on a CPU and seconds runnable but waiting for one
    (the scheduler's ns counts, /proc schedstat)."""
    out = {}
    for tid in os.listdir('/proc/self/task'):
        try:
            with open(f'/proc/self/task/{tid}/schedstat') as f:
                run, wait = f.read().split()[:2]
        except (OSError, ValueError):
            continue
        out[int(tid)] = (int(run) * 1e-9, int(wait) * 1e-9)
    return out


def _instrument(node) -> dict[str, list[int]]:
    """Wrap the free-running node's phases with thread CPU clocks (ns and calls per phase):
    physics (LegSimulator.advance: MuJoCo, the valve command, the stability check), the frame's
    state copied out, the virtual mocap and conversions, the messages encoded and published
    (the middleware's write included). The clocks cost ~1 µs a call: this run is a little
    slower than the unprofiled one, and is reported beside it, not instead of it."""
    phases: dict[str, list[int]] = {}
    clock = time.thread_time_ns

    def wrap(obj, name: str, label: str) -> None:
        f = getattr(obj, name)
        acc = phases.setdefault(label, [0, 0])

        def timed(*args, **kwargs):
            t = clock()
            r = f(*args, **kwargs)
            acc[0] += clock() - t
            acc[1] += 1
            return r

        setattr(obj, name, timed)

    wrap(node.sim, 'advance', 'physics')
    wrap(node, '_frame_state', 'state_copy')
    wrap(node, '_frame_outputs', 'mocap_outputs')
    wrap(node, '_publish_frame', 'publish')
    return phases


def _child(kind: str, seconds: float, leg_overrides: str = '') -> dict:
    """One run in a fresh process; kind 'graph_python_executor' is the composed graph on
    rclpy's Python SingleThreadedExecutor (the fallback where rclpy has no EventsExecutor)."""
    import json
    import tempfile

    from equimus_ros.executors import EVENTS_EXECUTOR_ENV

    env = dict(os.environ)
    if kind == 'graph_python_executor':
        kind, env[EVENTS_EXECUTOR_ENV] = 'graph', '0'
    with tempfile.TemporaryDirectory(prefix='bench_sim_') as tmp:
        r = subprocess.run(
            [sys.executable, __file__, '--child', kind, '--seconds', repr(seconds), '--out', tmp]
            + (['--leg-overrides', leg_overrides] if leg_overrides else []),
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
    lines = [line for line in r.stdout.splitlines() if line.startswith('{')]
    if r.returncode or not lines:
        raise RuntimeError(f'{kind} run failed ({r.returncode}): {r.stderr[-2000:]}')
    return json.loads(lines[-1])


def platform(
    rounds: int, sim_seconds: float, python_executor: bool = False, leg_overrides: str = ''
) -> dict:
    """Issue 13's three figures side by side (see the module docstring); with
    `python_executor`, the composed graph on rclpy's Python executor as a fourth; with
    `leg_overrides`, the node and the graph simulate that leg (the bare loop stays the default
    model's: the same MuJoCo steps, the valve's Python is the difference)."""
    kinds = [
        'node',
        'graph',
        *(['graph_python_executor'] if python_executor else []),
        *PROFILES,
    ]
    runs: dict[str, list[float]] = {k: [] for k in ['bare', *kinds]}
    cpu: dict[str, list[float]] = {k: [] for k in ['bare', *kinds]}
    # each run against the bare loop in its own process just before and after it
    adjacent: dict[str, list[float]] = {k: [] for k in kinds}
    adjacent_cpu: dict[str, list[float]] = {k: [] for k in kinds}
    adjacent_bare: dict[str, list[list[float]]] = {k: [] for k in kinds}
    breakdown: dict[str, list[dict]] = {k: [] for k in PROFILES}
    for _ in range(rounds):
        b = bare_model(1 / 600, sim_seconds)
        runs['bare'].append(b['mj_step_rtf'])
        cpu['bare'].append(b['mj_step_rtf_cpu'])
        for kind in kinds:
            r = _child(kind, sim_seconds, leg_overrides)
            runs[kind].append(r['rtf'])
            cpu[kind].append(r['rtf_cpu'])
            adjacent[kind].append(r['rtf'] / r['bare_rtf'])
            adjacent_cpu[kind].append(r['rtf_cpu'] / r['bare_rtf_cpu'])
            adjacent_bare[kind].append([round(x, 1) for x in r['bare_rtf_before_after']])
            if kind in breakdown:
                breakdown[kind].append(r['us_per_frame'])
    med = {k: float(np.median(v)) for k, v in runs.items()}
    mcpu = {k: float(np.median(v)) for k, v in cpu.items()}
    profiles = {
        kind: {key: float(np.median([b[key] for b in bs])) for key in bs[0]}
        for kind, bs in breakdown.items()
    }
    extra = {}
    if python_executor:
        extra = {
            'platform_graph_python_executor_rtf': med['graph_python_executor'],
            'platform_cpu_graph_python_executor_rtf': mcpu['graph_python_executor'],
        }
    for kind in PROFILES:
        extra[f'platform_{kind}_rtf'] = med[kind]
        extra[f'platform_{kind}_vs_bare'] = med[kind] / med['bare']
        extra[f'platform_{kind}_us_per_frame'] = profiles[kind]
    extra['platform_bare_us_per_frame_cpu'] = 1e6 / (120 * mcpu['bare'])
    return {
        **extra,
        'platform_cpu_bare_mj_step_rtf': mcpu['bare'],
        'platform_cpu_free_node_rtf': mcpu['node'],
        'platform_cpu_composed_graph_recording_rtf': mcpu['graph'],
        'platform_cpu_graph_vs_bare': mcpu['graph'] / mcpu['bare'],
        'platform_bare_mj_step_rtf': med['bare'],
        'platform_free_node_rtf': med['node'],
        'platform_composed_graph_recording_rtf': med['graph'],
        'platform_free_node_vs_bare': med['node'] / med['bare'],
        'platform_graph_vs_bare': med['graph'] / med['bare'],
        'platform_cpu_free_node_vs_bare': mcpu['node'] / mcpu['bare'],
        # each run against the bare loop of its own round (seconds apart), then the median
        'platform_free_node_vs_bare_per_round': _per_round(runs, 'node'),
        'platform_graph_vs_bare_per_round': _per_round(runs, 'graph'),
        'platform_rounds': rounds,
        'platform_sim_seconds': sim_seconds,
        'platform_leg_overrides': leg_overrides,
        'platform_runs': {k: [round(x, 2) for x in v] for k, v in runs.items()},
        'platform_free_node_vs_adjacent_bare': float(np.median(adjacent['node'])),
        'platform_graph_vs_adjacent_bare': float(np.median(adjacent['graph'])),
        'platform_cpu_free_node_vs_adjacent_bare': float(np.median(adjacent_cpu['node'])),
        'platform_cpu_graph_vs_adjacent_bare': float(np.median(adjacent_cpu['graph'])),
        'platform_adjacent_bare_runs': {
            k: adjacent_bare[k] for k in ('node', 'graph') if k in adjacent_bare
        },
    }


def _per_round(runs: dict[str, list[float]], kind: str) -> float:
    return float(np.median([v / b for v, b in zip(runs[kind], runs['bare'], strict=True)]))


# Profiled runs of the free-running node (phases on thread CPU clocks), as it runs (8 frames a
# turn) and frame by frame as before issue 30: the per-frame breakdown printed beside the ratios.
PROFILES = {
    'node_profile_8': 'node, 8 frames a turn',
    'node_profile_1': 'node, 1 frame a turn',
}


def print_breakdown(r: dict) -> None:
    print(
        '  free-running node per frame, µs (profiled runs, medians; CPU of the main thread by '
        'phase; bare loop: '
        f'{r["platform_bare_us_per_frame_cpu"]:.1f} µs CPU a frame):'
    )
    kinds = list(PROFILES)
    print('    ' + f'{"":28s}' + ''.join(f'{PROFILES[k]:>24s}' for k in kinds))
    rows = r[f'platform_{kinds[0]}_us_per_frame']
    for key in rows:
        vals = ''.join(f'{r[f"platform_{k}_us_per_frame"][key]:24.2f}' for k in kinds)
        print(f'    {key:28s}{vals}')
    vals = ''.join(f'{r[f"platform_{k}_rtf"]:23.1f}x' for k in kinds)
    print(f'    {"RTF of the profiled run":28s}{vals}')
    vals = ''.join(f'{r[f"platform_{k}_vs_bare"]:24.4f}' for k in kinds)
    print(f'    {"  / bare loop":28s}{vals}')


def print_platform(r: dict) -> None:
    bare = r['platform_bare_mj_step_rtf']
    print(
        f'\nsimulation as a platform (issue 13), medians of {r["platform_rounds"]} alternating '
        f'rounds of {r["platform_sim_seconds"]:g} sim s:'
    )
    if r.get('platform_leg_overrides'):
        print(f'  (node and graph: leg_overrides:={r["platform_leg_overrides"]})')
    print(f'  bare mj_step loop              {bare:8.1f}x   1')
    for key, label, target in (
        ('platform_free_node_rtf', 'sim node, free-running', 100),
        ('platform_composed_graph_recording_rtf', 'composed graph, recording', 20),
    ):
        v = r[key]
        print(
            f'  {label:30s} {v:8.1f}x   {v / bare:.4f} of bare '
            f'(target {target}x = {target / 300:.3f} of an idle 300x bare loop)'
        )
    if 'platform_graph_python_executor_rtf' in r:
        v = r['platform_graph_python_executor_rtf']
        print(
            f'  {"the same, Python executor":30s} {v:8.1f}x   {v / bare:.4f} of bare '
            f'({r["platform_cpu_graph_python_executor_rtf"]:.1f}x per CPU s)'
        )
    print(f'  all runs: {r["platform_runs"]}')
    print(
        '  per CPU second of the process instead of per wall second (load-independent): bare '
        f'{r["platform_cpu_bare_mj_step_rtf"]:.1f}x, node {r["platform_cpu_free_node_rtf"]:.1f}x, '
        f'graph {r["platform_cpu_composed_graph_recording_rtf"]:.1f}x '
        f'({r["platform_cpu_graph_vs_bare"]:.4f} of bare; node '
        f'{r["platform_cpu_free_node_vs_bare"]:.4f} of bare)'
    )
    print(
        '  each run against the bare loop of its own round (median of the rounds): node '
        f'{r["platform_free_node_vs_bare_per_round"]:.4f}, graph '
        f'{r["platform_graph_vs_bare_per_round"]:.4f} of bare'
    )
    print(
        '  each run against the bare loop in its own process just before and after it (median of '
        f'the rounds): node {r["platform_free_node_vs_adjacent_bare"]:.4f}, graph '
        f'{r["platform_graph_vs_adjacent_bare"]:.4f} of bare (per CPU s: node '
        f'{r["platform_cpu_free_node_vs_adjacent_bare"]:.4f}, graph '
        f'{r["platform_cpu_graph_vs_adjacent_bare"]:.4f}); those bare loops, before and after: '
        f'{r["platform_adjacent_bare_runs"]}'
    )
    print_breakdown(r)


def run(quick: bool) -> dict:
    os.environ.setdefault('ROS_DOMAIN_ID', str(150 + os.getpid() % 80))
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    res = {'load_average_1min_at_start': os.getloadavg()[0]}
    sim_s = 4.0 if quick else 20.0
    for label, dt in (('dt600', 1 / 600), ('dt1200', 1 / 1200)):
        b = bare_model(dt, sim_s)
        res[f'bare_mj_step_rtf_{label}'] = b['mj_step_rtf']
        res[f'simulator_advance_rtf_{label}'] = b['simulator_rtf']
        res[f'us_per_mj_step_{label}'] = b['us_per_step']
    res.update(publish_paths(4 if quick else 20, 300))
    wall = 6.0 if quick else 30.0
    rt = node_run(
        {'mode': 'realtime', 'real_time_factor': 1.0, 'diagnostics_period': 1.0}, wall, True
    )
    res.update({f'node_realtime_{k}': v for k, v in rt.items()})
    fifo = node_run(
        {
            'mode': 'realtime',
            'real_time_factor': 1.0,
            'diagnostics_period': 1.0,
            'realtime_priority': 50,
        },
        wall,
        True,
    )
    res.update(
        {f'node_realtime_fifo_{k}': v for k, v in fifo.items() if k.startswith(('rtf', 'jitter'))}
    )
    free = node_run(
        {'mode': 'realtime', 'real_time_factor': 0.0, 'diagnostics_period': 1.0}, wall / 2, False
    )
    res.update({f'node_free_{k}': v for k, v in free.items()})
    free12 = node_run(
        {
            'mode': 'realtime',
            'real_time_factor': 0.0,
            'diagnostics_period': 1.0,
            'timestep': 1 / 1200,
        },
        wall / 2,
        False,
    )
    res['node_free_rtf_dt1200'] = free12['rtf']
    res['target_realtime_p99_jitter_under_1ms'] = bool(rt.get('jitter_p99_us_worst', 1e9) < 1000)
    res['target_free_running_100x'] = bool(free['rtf'] >= 100)
    res['free_running_node_vs_bare_mj_step'] = free['rtf'] / res['bare_mj_step_rtf_dt600']
    res.update(platform(2 if quick else 3, 5.0 if quick else 15.0))
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument('--quick', action='store_true', help='short runs (~30 s)')
    p.add_argument('--platform', action='store_true', help="only issue 13's side-by-side figures")
    p.add_argument('--rounds', type=int, default=3, help='--platform: alternating rounds')
    p.add_argument('--child', choices=('node', 'graph', *PROFILES), help=argparse.SUPPRESS)
    p.add_argument('--seconds', type=float, default=15.0, help='--platform: sim s per run')
    p.add_argument(
        '--python-executor',
        action='store_true',
        help="--platform: also the composed graph on rclpy's Python SingleThreadedExecutor",
    )
    p.add_argument('--out', default='', help=argparse.SUPPRESS)
    p.add_argument(
        '--leg-overrides',
        default='',
        help='--platform: the node and the graph simulate this leg (launch argument '
        'leg_overrides:=, e.g. config/leg_fit.yaml: a valve with a dead time)',
    )
    p.add_argument(
        '--turns',
        action='store_true',
        help="only the free-running node's phases alone and in the loop, and frames a turn",
    )
    ns = p.parse_args(argv)
    if ns.leg_overrides:
        ns.leg_overrides = str(Path(ns.leg_overrides).resolve())
    if ns.turns:
        os.environ.setdefault('ROS_DOMAIN_ID', str(150 + os.getpid() % 80))
        os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
        print_turns(turns())
        return 0
    if ns.child:
        import json

        print(json.dumps(_child_run(ns.child, ns.seconds, ns.out, ns.leg_overrides)), flush=True)
        return 0
    os.environ.setdefault('ROS_DOMAIN_ID', str(150 + os.getpid() % 80))
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    if ns.platform:
        load = os.getloadavg()[0]
        r = platform(ns.rounds, ns.seconds, ns.python_executor, ns.leg_overrides)
        print_platform(r)
        print(f'  (1-min load average at start: {load:.2f} on {os.cpu_count()} cores)')
        return 0
    r = run(ns.quick)
    print(f'{"figure":48s} value')
    for k, v in r.items():
        print(f'{k:48s} {v:.4g}' if isinstance(v, float) else f'{k:48s} {v}')
    print('\nside by side (sim seconds per wall second, Δt = 1/600 s):')
    print(f'  bare mj_step loop        {r["bare_mj_step_rtf_dt600"]:8.1f}x')
    print(f'  LegSimulator.advance     {r["simulator_advance_rtf_dt600"]:8.1f}x')
    print(f'  sim node, free-running   {r["node_free_rtf"]:8.1f}x   (target >= 100x)')
    print(
        f'  node loop in-process     {r["tick_loop_rtf_preserialised"]:8.1f}x   '
        'pre-serialised publishing, '
        f'{r["tick_loop_rtf_message_objects"]:.1f}x with message objects'
    )
    print(
        f'  sim node, realtime 1x    {r["node_realtime_rtf"]:8.4f}x   jitter p50/p99/max '
        f'{r["node_realtime_jitter_p50_us"]:.0f}/{r["node_realtime_jitter_p99_us_worst"]:.0f}/'
        f'{r["node_realtime_jitter_max_us"]:.0f} us (target p99 < 1000 us)'
    )
    print(
        f'  ... with SCHED_FIFO 50   {r["node_realtime_fifo_rtf"]:8.4f}x   jitter p50/p99/max '
        f'{r["node_realtime_fifo_jitter_p50_us"]:.0f}/'
        f'{r["node_realtime_fifo_jitter_p99_us_worst"]:.0f}/'
        f'{r["node_realtime_fifo_jitter_max_us"]:.0f} us'
    )
    print_platform(r)
    print(
        f'  (1-min load average at start: {r["load_average_1min_at_start"]:.2f} '
        f'on {os.cpu_count()} cores)'
    )
    return 0


if __name__ == '__main__':
    sys.exit(main())
