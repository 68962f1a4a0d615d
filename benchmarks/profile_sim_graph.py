"""Where a frame of the composed sim graph goes (issue 13): the graph built in this process as
`sim.launch.py` builds it (recording on), frames run one by one from here, CPU time per frame in
blocks (process and main thread), the bare mj_step loop beside it; `--profile` adds cProfile of
the main thread.

    python benchmarks/profile_sim_graph.py --frames 2400            # per-block CPU a frame
    python benchmarks/profile_sim_graph.py --frames 1200 --profile  # and where it goes
    python benchmarks/profile_sim_graph.py --frames 6000 --functions  # the frame's parts
    python benchmarks/profile_sim_graph.py --frames 6000 --plain      # and in plain code
    python benchmarks/profile_sim_graph.py --frames 600 --opcodes     # interpreted operations

`--functions` times the frame's main parts (TIMED) by their inclusive CPU time in the main
thread, a counter around each call (about a microsecond each; cProfile's cost per call of every
function distorts a frame of many small calls several times over).

`--opcodes` then counts, over 240 more frames, the Python bytecode operations and calls the
main thread runs a frame (sys.settrace): a figure that does not move with the host's load, for
comparing two versions of the frame's Python (not its C: MuJoCo, numpy, struct, the pipe).
The frame's CPU beyond its physics (the bare loop's frame) divided by that count is the host's
cost of the frame's Python, to compare two hosts with.

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
#: (module, qualified name) of what `--functions` times: the physics, the /clock fan-out and
#: what hangs off it, the mocap pose -> estimator -> controller -> driver -> sim chain, the
#: state publisher, and the bag's encoding.
TIMED = (
    ('equimus_sim.simulator', 'LegSimulator.advance'),
    ('equimus_bringup.sim_graph', 'SimGraph.frame_started'),
    ('equimus_bringup.sim_graph', 'InProcessBus._set_clocks'),
    ('equimus_bringup.sim_graph', 'InProcessBus.flush'),
    ('equimus_hw.valve.driver_node', 'ValveDriver.on_frame'),
    ('equimus_control.controller_node', 'ControllerNode.on_frame'),
    ('equimus_control.reference_node', 'ReferenceNode.tick'),
    ('equimus_control.reference_node', 'ReferenceNode._publish_preview'),
    ('equimus_bringup.sim_graph', 'SimGraph.poses'),
    ('equimus_control.estimator_node', 'EstimatorNode._process'),
    ('equimus_control.estimation', 'JointStateEstimator.update'),
    ('equimus_control.controller_node', 'ControllerNode.on_joints'),
    ('equimus_control.step', 'ControlStep.step'),
    ('equimus_hw.valve.driver_node', 'ValveDriver.on_pressures'),
    ('equimus_sim.sim_node', 'SimNode.take_applied'),
    ('equimus_tf.state_publisher', 'StatePublisher.on_mocap_frame'),
    ('equimus_ros.cdr', '_Writer.write'),
    ('equimus_ros.cdr', 'MessageEncoder.encode'),
)


class Timed:
    """Inclusive CPU time of TIMED's functions in one thread: each class attribute wrapped
    before the graph is built (its subscriptions bind the wrapped methods)."""

    def __init__(self) -> None:
        import importlib

        self.ns: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.thread = threading.get_ident()
        for module, qualname in TIMED:
            owner: object = importlib.import_module(module)
            *path, attr = qualname.split('.')
            for part in path:
                owner = getattr(owner, part)
            setattr(owner, attr, self._wrap(qualname, getattr(owner, attr)))
            self.ns[qualname] = self.calls[qualname] = 0

    def _wrap(self, name: str, fn):
        clock, ns, calls, thread = time.thread_time_ns, self.ns, self.calls, self.thread
        inside = [False]

        def timed(*args, **kwargs):
            if inside[0] or threading.get_ident() != thread:
                return fn(*args, **kwargs)
            inside[0] = True
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                ns[name] += clock() - t0
                calls[name] += 1
                inside[0] = False

        return timed

    def reset(self) -> None:
        """Zero the counters (what the graph's construction and first frame spent)."""
        for name in self.ns:
            self.ns[name] = self.calls[name] = 0

    def overhead_us(self, n: int = 20000) -> float:
        """CPU µs a timed call adds to the parts around it (a wrapped no-op against the bare)."""

        def noop() -> None:
            pass

        wrapped = self._wrap('calibration', noop)
        self.ns['calibration'] = self.calls['calibration'] = 0
        t0 = time.thread_time_ns()
        for _ in range(n):
            noop()
        t1 = time.thread_time_ns()
        for _ in range(n):
            wrapped()
        t2 = time.thread_time_ns()
        del self.ns['calibration'], self.calls['calibration']
        return ((t2 - t1) - (t1 - t0)) / n / 1e3

    def report(self, frames: int) -> None:
        per_call = self.overhead_us()
        total = sum(self.calls.values()) / frames
        print(
            'the frame by part (main thread CPU, inclusive: a part includes the parts it calls, '
            f'and {per_call:.1f} us of counting for each timed call inside it; '
            f'{total:.0f} timed calls a frame):'
        )
        for _, name in TIMED:
            print(
                f'  {name:36s} {self.calls[name] / frames:5.2f} calls  '
                f'{self.ns[name] / frames / 1e3:7.1f} us a frame'
            )


def opcodes(step, frames: int = 240) -> tuple[float, float, float]:
    """Interpreted operations, Python calls and C calls a frame of `step()` in this thread."""
    counts = [0, 0, 0]

    def trace(frame, event, arg):
        if event == 'opcode':
            counts[0] += 1
        elif event == 'call':
            counts[1] += 1
            frame.f_trace_opcodes = True
        return trace

    def profile(frame, event, arg):
        if event == 'c_call':
            counts[2] += 1

    sys.setprofile(profile)
    sys.settrace(trace)
    try:
        for _ in range(frames):
            step()
    finally:
        sys.settrace(None)
        sys.setprofile(None)
    ops, calls, c_calls = (c / frames for c in counts)
    return ops, calls, c_calls


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


class _Sink:
    """Where a writer's bytes go in the plain frame: kept for the bag, not published."""

    def __init__(self, items: list, topic: str) -> None:
        self.items, self.topic = items, topic

    def publish(self, data: bytes) -> None:
        self.items.append((self.topic, data))


def plain_frames(graph, frames: int, flush_every: int = 12) -> float:
    """CPU s a frame of the composed graph's frame in plain code: the objects its nodes hold
    (the simulator, the virtual mocap, the estimator, the reference, ControlStep, the safety
    filter, the channels' calibrations) called directly in the graph's order, and the messages
    the graph records every frame encoded from plain values by equimus_ros.cdr's writers and
    handed to the graph's own bag writer process every `flush_every` frames. No ROS message,
    clock override, lock or node bookkeeping: the floor of a fused lockstep frame (issue 30,
    item 2), measured on the graph just run, which is not used afterwards. Not in it: /tf
    (the state publisher's), the nodes' diagnostics counters and the driver's read-back."""
    import numpy as np
    from std_msgs.msg import Float64MultiArray

    from equimus_control.kernels import use_compiled
    from equimus_control.reference import PREVIEW_SPACING_S, preview_count, preview_rows
    from equimus_description.interface import (
        CLOCK,
        FRAME_MOCAP,
        JOINT_STATES,
        REFERENCE,
        SIM_JOINT_STATES,
        VALVE_APPLIED,
        VALVE_COMMAND,
        VALVE_PRESSURE,
        mocap_pose,
    )
    from equimus_ros.arrays import float_array, table_array
    from equimus_ros.cdr import (
        ArrayWriter,
        ClockWriter,
        JointStateWriter,
        MessageEncoder,
        PoseWriter,
        PressureStateWriter,
    )
    from equimus_sim.sim_node import ros_pose

    node = graph.sim
    sim, mocap, bodies = node.sim, node.mocap, node.bodies
    est, step, traj = graph.estimator.est, graph.controller.step, graph.reference.traj
    safety, cals = graph.driver.safety, graph.driver.cals
    ref = graph.reference.params.config
    preview_every = max(1, round(ref.rate / ref.preview_rate)) if ref.preview > 0 else 0
    writer = graph.recorder.writer
    # As the graph keeps them (InProcessBus.pending): each frame's sim time, then its messages.
    items: list = []

    def sink(topic: str) -> _Sink:
        return _Sink(items, topic)

    clock = ClockWriter(sink(CLOCK.name))
    sim_joints = JointStateWriter(sink(SIM_JOINT_STATES.name), node.joint_names)
    sim_pressure = PressureStateWriter(sink(VALVE_PRESSURE.name), tuple(node.actuator_names))
    poses_out = [PoseWriter(sink(mocap_pose(b).name), FRAME_MOCAP) for b in bodies]
    reference = JointStateWriter(sink(REFERENCE.name), graph.reference.params.config.joint_names)
    joints = JointStateWriter(sink(JOINT_STATES.name), graph.estimator.joint_names, FRAME_MOCAP)
    layout = graph.controller.layout
    command = ArrayWriter(sink(VALVE_COMMAND.name), float_array([0.0] * step.n_valves, layout))
    applied = PressureStateWriter(sink(VALVE_APPLIED.name), tuple(graph.driver.channels))
    preview_encode = MessageEncoder(Float64MultiArray).encode
    columns = graph.reference._preview_columns
    kernels = use_compiled()  # the preview's form, as the reference node picks it
    n_joints = step.n
    frame, t0_ref, slew_t = node.frame, None, None
    log_ns = node.time_ns(frame)
    c0 = time.process_time()
    for k in range(frames):
        frame += 1
        t_ns = node.time_ns(frame)
        t = t_ns * 1e-9
        items.append(t_ns)
        sim.advance_to(t)
        q, qd, pos, quat, pressures = sim.frame_state(bodies)
        clock.write(t_ns)
        sim_joints.write(t_ns, q, qd)
        safety.step(t, 0.0)  # the driver's watchdog at the frame (its on_frame)
        t0_ref = t if t0_ref is None else t0_ref
        q_ref, qd_ref = traj(t - t0_ref)
        step.set_reference(q_ref, qd_ref, t)
        reference.write(t_ns, q_ref, qd_ref)
        if preview_every and k % preview_every == 0:
            flat = preview_rows(traj, t - t0_ref, t, ref.preview, PREVIEW_SPACING_S, kernels)
            rows = np.array(flat).reshape(preview_count(ref.preview, PREVIEW_SPACING_S), -1)
            step.set_preview(rows[:, 0], rows[:, 1 : 1 + n_joints], rows[:, 1 + n_joints :])
            table = table_array(rows.tolist(), 'point', columns)
            items.append((graph.reference.preview_pub.topic_name, preview_encode(table)))
        mocap.capture_arrays(t, pos, quat)
        for f in mocap.release(t):
            cap_ns = int(round(f.capture_time * 1e9))
            ros = [ros_pose(p.position, p.orientation) for p in f.bodies.values()]
            for out, (p, o) in zip(poses_out, ros, strict=True):
                out.write(cap_ns, p, o)
            e = est.update(cap_ns * 1e-9, ros)
            position, velocity = e.position.tolist(), e.velocity.tolist()
            joints.write(cap_ns, position, velocity)
            cmd = step.step(position, velocity, cap_ns * 1e-9, t)
            kpa = [float(v) for v in cmd.pressures]
            command.write(kpa)
            safety.command(kpa, t)
            elapsed = 0.0 if slew_t is None else max(0.0, t - slew_t)
            slew_t = t
            out_kpa = safety.step(t, elapsed)
            codes = [cal.kpa_to_code(p) for cal, p in zip(cals, out_kpa, strict=True)]
            kpa_applied = [cal.code_to_kpa(c) for cal, c in zip(cals, codes, strict=True)]
            applied.write(t_ns, kpa_applied)
            sim.set_command(kpa_applied)
        sim_pressure.write(t_ns, pressures)
        if (k + 1) % flush_every == 0:
            # a copy: the writer keeps the list it is given until it sends it
            log_ns = writer.write_logged(items.copy(), log_ns)
            items.clear()
    writer.write_logged(items, log_ns)
    return (time.process_time() - c0) / frames


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
    p.add_argument(
        '--functions',
        action='store_true',
        help="the inclusive CPU time of the frame's main parts (TIMED), a counter each",
    )
    p.add_argument(
        '--opcodes',
        action='store_true',
        help='then the Python operations and calls a frame (sys.settrace, 240 frames): '
        "independent of the host's load",
    )
    p.add_argument(
        '--plain',
        action='store_true',
        help="then as many frames of the same graph's objects in plain code (plain_frames): "
        'the floor of a fused lockstep frame',
    )
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

    timed = Timed() if ns.functions else None
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
    plain: float | None = None
    ops: tuple[float, float, float] | None = None
    before = threads_cpu()
    if timed is not None:
        timed.reset()
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
        ops = opcodes(sim._lockstep_once) if ns.opcodes else None
        plain = plain_frames(graph, ns.frames) if ns.plain else None
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
    if ops is not None:
        print(
            f'a frame in Python (main thread, 240 frames): {ops[0]:.0f} bytecode operations, '
            f'{ops[1]:.1f} Python calls, {ops[2]:.1f} C calls'
        )
        beyond_us = (total_cpu / ns.frames - 1 / RATE / bare) * 1e6
        print(
            f'the frame beyond its physics: {beyond_us:.0f} us CPU, {beyond_us * 1e3 / ops[0]:.1f} '
            "ns an operation (C calls included): this host's cost of the frame's Python"
        )
    if plain is not None:
        print(
            f'the same frame in plain code: {plain * 1e6:.0f} us CPU a frame, '
            f'{1 / RATE / plain:.1f}x per CPU s: {1 / RATE / plain / bare:.4f} of bare'
        )
    if timed is not None:
        timed.report(ns.frames)
    if profiler is not None:
        print('main thread (CPU time):')
        pstats.Stats(profiler).sort_stats('tottime').print_stats(ns.top)
    if spin_profiler is not None:
        print(f'executor thread (CPU time, {spin_cpu[0]:.2f} s in all):')
        pstats.Stats(spin_profiler).sort_stats('tottime').print_stats(ns.top)
    return 0


if __name__ == '__main__':
    sys.exit(main())
