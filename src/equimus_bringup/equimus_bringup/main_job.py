"""The main job: the simulated leg under closed-loop control through the triangle, recorded.

Starts the sim graph (lockstep simulation, valve driver on its simulated board, estimator,
controller, reference, recorder) with the same description as `sim.launch.py`: composed in one
process by default (equimus_bringup.sim_graph; `--set composed:=false` for one process per node).
The simulation pauses by itself at the run's length in sim time (pause_at); meanwhile a progress
line (sim time, wall time, real-time factor) is printed every second. Then it stops the graph in
order, reads the bag back, prints a tracking summary with the run's real-time factor (sim time
over wall time from the first frame to the last, start-up aside; and sim time per CPU second of
the graph's process over the same span, which other load on the machine changes much less) and
writes a plot of reference vs measured joint angles and pressures. The composed graph measures
both itself and prints them as it stops (what benchmarks/bench_sim.py --platform measures); for
the split graph they come from the first and the last /clock this job receives.

    make run                   # PID
    make run CONTROLLER=mpc
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

from equimus_bringup import prestart
from equimus_bringup.graph import SPEED_PREFIX
from equimus_bringup.prestart import StartError
from equimus_bringup.run_report import report
from equimus_bringup.run_report import video as run_video
from equimus_bringup.supervisor import GraphError, Supervisor
from equimus_control import CONTROLLERS
from equimus_hw.natnet.ports import free_udp_port_pair


def speed_from_output(lines: list[str]) -> tuple[float, float] | None:
    """(real-time factor, per CPU second) from the composed graph's speed line, if it printed
    one (equimus_bringup.sim_graph.SimGraph.speed_report)."""
    for line in reversed(lines):
        m = re.search(
            re.escape(SPEED_PREFIX) + r'.*: ([0-9.]+)x real time, ([0-9.na]+)x per CPU', line
        )
        if m:
            return float(m.group(1)), float(m.group(2))
    return None


def process_cpu_s(pids: list[int]) -> float | None:
    """User + system CPU seconds of these processes so far (Linux /proc; None elsewhere or when
    one has gone). Their own children (the bag writer) are not counted."""
    total = 0.0
    for pid in pids:
        try:
            stat = Path(f'/proc/{pid}/stat').read_text()
        except OSError:
            return None
        fields = stat[stat.rindex(')') + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime in clock ticks
    return total / os.sysconf('SC_CLK_TCK')


class ClockWatch:
    """Follows /clock from a small rclpy node of its own."""

    def __init__(self, wall: bool = False):
        """wall=True: no /clock (the hardware graph); progress is wall time since the first
        /valve/command, when the loop is closed (the processes' start-up, up to 10 s apart on a
        loaded machine, aside)."""
        import rclpy
        from rosgraph_msgs.msg import Clock
        from std_msgs.msg import Float64MultiArray

        self.rclpy = rclpy
        rclpy.init(args=['--ros-args', '-r', '__node:=main_job_clock'])
        self.node = rclpy.create_node('main_job_clock')
        self.first = None
        self.first_wall: float | None = None  # monotonic time of the first /clock seen
        self.now = 0.0
        self.last_wall: float | None = None  # monotonic time of the last /clock that advanced
        # CPU seconds of the graph's processes (see `process_cpu_s`) at those two /clock
        # messages: sim time per CPU second, which the machine's other load changes little.
        self.cpu_of: Callable[[], float | None] = lambda: None
        self.first_cpu: float | None = None
        self.last_cpu: float | None = None
        self.wall = wall
        self.t0: float | None = None
        from equimus_description.interface import CLOCK, VALVE_COMMAND
        from equimus_ros.qos import subscription

        if wall:
            subscription(self.node, Float64MultiArray, VALVE_COMMAND, self._on_command)
        else:
            subscription(self.node, Clock, CLOCK, self._on_clock)

    def _on_command(self, msg):
        if self.t0 is None:
            self.t0 = time.monotonic()

    def _on_clock(self, msg):
        # Sim time starts at 0: absolute, so a /clock missed during discovery costs nothing.
        t = msg.clock.sec + msg.clock.nanosec * 1e-9
        if self.first is None:
            self.first, self.first_wall, self.first_cpu = t, time.monotonic(), self.cpu_of()
        elif t > self.now:  # (while paused the last /clock is repeated: not progress)
            self.last_wall, self.last_cpu = time.monotonic(), self.cpu_of()
        self.now = t

    def final_factors(self) -> tuple[float, float]:
        """(sim s per wall s, sim s per CPU s of the graph) between the first and the last
        /clock that advanced: the watcher's polling after the end and start-up stay out, as in
        benchmarks/bench_sim.py --platform (first frame to pause). NaN where not measured."""
        nan = float('nan')
        if self.wall:
            return 1.0, nan
        if self.first is None or self.first_wall is None or self.last_wall is None:
            return nan, nan
        sim = self.now - self.first
        cpu = (
            self.last_cpu - self.first_cpu
            if self.last_cpu is not None and self.first_cpu is not None
            else 0.0
        )
        return sim / max(self.last_wall - self.first_wall, 1e-9), sim / cpu if cpu > 0 else nan

    def real_time_factor(self) -> float:
        """Sim seconds per wall second since the first /clock seen (start-up aside)."""
        if self.wall:
            return 1.0  # the hardware graph runs in real time by construction
        if self.first is None or self.first_wall is None:
            return float('nan')
        return (self.now - self.first) / max(time.monotonic() - self.first_wall, 1e-9)

    def spin(self, seconds: float):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.rclpy.spin_once(self.node, timeout_sec=0.02)
        if self.wall and self.t0 is not None:
            self.now = time.monotonic() - self.t0

    def close(self):
        self.node.destroy_node()
        self.rclpy.try_shutdown()


def truth_spec(ns: argparse.Namespace) -> str:
    return f'random:{ns.seed}' if ns.truth == 'random' else ns.truth


def use_truth_file(specs, truth, path: Path) -> None:
    """Write the truth to `path` and point the rig emulator at it (the same plant as its
    `rig_truth` argument, now on record in the run folder)."""
    from equimus_sim.truth import dump

    dump(truth, path)
    for spec in specs:
        if '--truth' in spec.arguments:
            spec.arguments[spec.arguments.index('--truth') + 1] = str(path.resolve())


def resolve_truth(mode: str, spec: str, seed: int | None):
    """The emulated rig's truth of `--truth`/`--seed` (StartError: one line)."""
    from equimus_sim.truth import TruthError, parse_spec

    if mode != 'hardware':
        raise StartError("--truth is the emulated rig's plant: use it with --mode hardware")
    if spec == 'random' and seed is None:
        raise StartError('--truth random needs --seed S (the draw is reproducible)')
    if spec != 'random' and seed is not None:
        raise StartError('--seed draws a truth: give --truth random with it')
    try:
        return parse_spec(f'random:{seed}' if spec == 'random' else spec)
    except TruthError as exc:
        raise StartError(str(exc)) from None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        '--mode',
        default='sim',
        choices=('sim', 'hardware'),
        help='sim: lockstep simulation; hardware: the real-rig graph against rig_emulator '
        '(NatNet + DAC board emulators around the simulated leg), in real time',
    )
    p.add_argument('--controller', default='pid', choices=CONTROLLERS)
    p.add_argument('--reference', default='triangle')
    p.add_argument('--duration', type=float, default=15.0, help='sim seconds to run (default 15)')
    p.add_argument(
        '--wall-timeout', type=float, default=300.0, help='give up after this many wall seconds'
    )
    p.add_argument(
        '--out', default='out/run', help='output folder (a time-stamped run folder is made inside)'
    )
    p.add_argument(
        '--video',
        action='store_true',
        help='also write video.mp4 of the run (the leg from the bag) next to tracking.png',
    )
    p.add_argument(
        '--truth',
        default='',
        metavar='FILE|random',
        help='hardware mode: the emulated rig simulates this plant, which the stack does not '
        'know (a truth file, a fitted parameter file such as config/leg_fit.yaml, or random '
        'with --seed); written to the run folder as truth.yaml',
    )
    p.add_argument('--seed', type=int, default=None, help='seed of --truth random')
    p.add_argument(
        '--set',
        action='append',
        default=[],
        metavar='NAME:=VALUE',
        help='extra launch arguments, e.g. --set variant:=pure',
    )
    ns = p.parse_args(argv)

    run_dir = Path(ns.out) / time.strftime('%Y%m%d-%H%M%S')
    bag_path = (run_dir / 'bag').resolve()
    overrides = {
        'controller': ns.controller,
        'reference': ns.reference,
        'record': 'true',
        'bag': str(bag_path),
    }
    if ns.mode == 'sim':
        overrides['sim_mode'] = 'lockstep'
        overrides['pause_at'] = str(ns.duration)
    else:
        port = free_udp_port_pair()
        overrides.update(
            emulator='true',
            auto_arm='true',
            serial_port=str(run_dir.resolve() / 'dac'),
            natnet_command_port=str(port),
            natnet_data_port=str(port + 1),
        )
    for item in ns.set:
        key, _, value = item.partition(':=')
        overrides[key] = value
    truth = None
    # Everything checked before anything is started or written (equimus_bringup.prestart).
    try:
        try:
            prestart.check_new_folder(str(run_dir), '--out ')
        except StartError as exc:
            raise StartError(f'{exc} (make run OUT=<folder>)') from None
        if ns.truth or ns.seed is not None:
            truth = resolve_truth(ns.mode, ns.truth, ns.seed)
            overrides['rig_truth'] = truth_spec(ns)
        start = prestart.check(ns.mode, overrides)
        run_dir.mkdir(parents=True)
        if truth is not None:  # the run's record of its plant, which the rig then reads
            use_truth_file(start.specs, truth, run_dir / 'truth.yaml')
    except StartError as exc:
        print(f'main_job: {exc}', file=sys.stderr)
        return 2
    except OSError as exc:  # a race with another process: still one line
        print(f'main_job: cannot create {run_dir}: {exc.strerror}', file=sys.stderr)
        return 2
    log_path = run_dir / 'graph.log'
    print(
        f'[main] {ns.mode} graph: {", ".join(s.name for s in start.specs)}; '
        f'controller {ns.controller}, '
        f'reference {ns.reference}, {ns.duration:.0f} s; node logs in {log_path}',
        flush=True,
    )

    sup = Supervisor(start.specs, echo=False, drivers_listed=start.drivers_listed)
    watch = ClockWatch(wall=ns.mode == 'hardware')
    wall0 = time.monotonic()
    rtf = rtf_cpu = float('nan')
    watch.cpu_of = lambda: process_cpu_s([p.pid for p in sup.procs.values()])
    try:
        sup.start()
        next_report = time.monotonic() + 1.0
        last, last_change = watch.now, time.monotonic()
        while watch.now < ns.duration - 1e-6:
            watch.spin(0.02)
            if watch.now != last:
                last, last_change = watch.now, time.monotonic()
            elif watch.now > ns.duration - 0.5 and time.monotonic() - last_change > 2.0:
                break  # paused at the end, its last /clock (best effort) lost on the way
            if sup.poll():
                break
            if time.monotonic() - wall0 > ns.wall_timeout:
                sup.failed = (
                    f'no progress to {ns.duration} s sim time within {ns.wall_timeout} s wall time'
                )
                break
            if time.monotonic() >= next_report:
                next_report += 1.0
                rate = watch.real_time_factor()
                print(
                    f'[main] sim time {watch.now:6.1f} / {ns.duration:.0f} s   '
                    f'wall {time.monotonic() - wall0:6.1f} s   '
                    + (f'{rate:6.1f}x real time' if math.isfinite(rate) else 'waiting for /clock'),
                    flush=True,
                )
        rtf, rtf_cpu = watch.final_factors()
    except KeyboardInterrupt:
        print('[main] interrupted: stopping the graph and keeping the bag', flush=True)
    except GraphError as exc:
        sup.failed = str(exc)
    finally:
        codes = sup.stop()
        watch.close()
        with open(log_path, 'w') as fh:
            for name, lines in sup.output.items():
                fh.writelines(f'[{name}] {line}' for line in lines)
    wall = time.monotonic() - wall0
    measured = speed_from_output(sup.output.get('sim_graph', []))
    source = 'the first to the last /clock received'
    if measured is not None:  # the composed graph's own figure: no wait for DDS discovery
        (rtf, rtf_cpu), source = measured, 'the first to the last frame'
    if sup.failed:
        print(
            f'[main] the graph failed: {sup.failed}\nAll node output: {log_path}', file=sys.stderr
        )
        return 1
    print(
        f'[main] stopped cleanly after {wall:.1f} s wall in all; {watch.now:.1f} s sim time at '
        f'{rtf:.1f}x real time, {rtf_cpu:.1f}x per CPU second of the graph (from {source}, '
        f'start-up aside); exit codes {codes}',
        flush=True,
    )

    plot_path = run_dir / 'tracking.png'
    summary = report(
        bag_path, plot_path, title=f'EquiMus {ns.mode}, {ns.controller}, {ns.reference}', settle=0.5
    )
    print('\n' + summary.table())
    print(
        f'real-time factor: {rtf:.1f}x ({watch.now:.1f} s sim time; {rtf_cpu:.1f}x per CPU '
        'second of the graph)'
    )
    (run_dir / 'summary.json').write_text(
        json.dumps(
            dict(summary.__dict__, real_time_factor=rtf, real_time_factor_per_cpu_s=rtf_cpu),
            indent=2,
        )
    )
    print(f'\nbag:  {bag_path}\nplot: {plot_path}\nsummary: {run_dir / "summary.json"}')
    if ns.video:
        from equimus_sim.render import RenderError

        try:
            print(f'video: {run_video(bag_path, run_dir / "video.mp4")}')
        except (RenderError, ValueError) as exc:
            print(f'[main] no video: {exc}', file=sys.stderr)
            return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
