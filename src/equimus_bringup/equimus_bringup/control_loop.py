"""control_loop: the hardware control path in one process, driven by the mocap frame.

    ros2 launch equimus_bringup hardware.launch.py fused_loop:=true

The same four nodes as the multi-process graph (natnet_bridge, estimator, controller,
valve_driver, with the same names, parameters, topics, services and diagnostics), but a NatNet
frame travels from the socket to the serial line by direct calls in the bridge's receive thread:
decode -> estimator -> controller -> safety filter -> DAC frame. Every intermediate message is
still published (after it has been passed on), so recording and monitoring see the full graph.
This removes the four DDS hops and executor wake-ups between a frame and its valve command, which
dominate the latency of the multi-process graph (docs/benchmarks.md, soak section).

Threads: the receive thread runs the chain; one executor thread runs the nodes' timers
(valve keep-alive, slew and watchdog, the controller's stale-state guard, diagnostics), the
reference subscription, parameter changes and the driver's services. Both need the GIL, so the
executor thread starts no callback in a quiet window around each expected frame, from
`quiet_window_ms` before it until its SET frame is written (`LoopLatency.executor_turn`): a frame
then finds the GIL free instead of waiting up to the switch interval for a callback to yield it.
Each node guards its own state: the controller's ControlStep and the valve driver's safety
filter and link each sit behind their node's lock, so nothing here wraps another node's
callbacks or reads its private fields.
The controller in this process is the same `ControllerNode` (and so the same
`equimus_control.step.ControlStep`) as in the split graph.

The managed nodes (valve_driver, natnet_bridge) are configured and activated here, in-process;
their lifecycle services stay available (`ros2 lifecycle set /valve_driver deactivate` vents).
The valve driver does not read /valve/command in this mode: the in-process controller is its
only command source (another publisher of /valve/command is named in an ERROR, in the log and
on /diagnostics, never obeyed), and the controller hears the driver's armed state by call, not
on /valve/armed.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import gc
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.executors import Executor
from rclpy.node import Node

from equimus_control import kernels
from equimus_control.controller_node import ControllerNode
from equimus_control.estimator_node import EstimatorNode
from equimus_description.config import param, validate_fields
from equimus_description.interface import DIAGNOSTICS
from equimus_hw.natnet.bridge_node import NatNetBridge
from equimus_hw.natnet.client import NatNetClient
from equimus_hw.valve.driver_node import ValveDriver, vent_on_exit
from equimus_ros.diagnostics import Diagnostics, Level
from equimus_ros.executors import SPIN_ONCE_TIMEOUT_S, timer_callback
from equimus_ros.lifecycle import bring_up
from equimus_ros.main import GIL_SWITCH_INTERVAL_S, run_node, spin_all
from equimus_ros.params import bind

MCL_CURRENT, MCL_FUTURE = 1, 2  # <sys/mman.h>
#: Where a frame is on its way to the serial line, in order (LoopLatency.stage): handed from
#: the NatNet decoder to the bridge, to the estimator, to the controller, to the valve driver.
STAGES = ('decoded', 'estimator', 'controller', 'driver')
#: The same stages and the write, in the receive thread's CPU time (time.thread_time_ns) used
#: since the datagram was read: beside the wall-clock ones, whether a stage computes or waits.
CPU_STAGES = (*STAGES, 'written')
#: ms a frame may spend not computing (wall-clock less the receive thread's CPU time, from the
#: read to the write) before it counts as having waited (for the GIL or a core)
WAITED_MS = 0.1
#: s after a frame's expected arrival (or after its arrival) the executor thread waits at most
#: for its write, when the frame is late, lost or never answered (a skipped estimate)
QUIET_AFTER_S = 0.002
GC_YOUNG_EVERY = 10  # frames between collections of the middle generation (gc_after_write)
GC_FULL_EVERY = 1200  # frames between full collections (gc_after_write)


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """Parameters of the `control_loop` node (the fused process itself)."""

    latency_window: int = param(
        1200,
        'frames behind the latency percentiles on /diagnostics (1200 = 10 s)',
        range=(10, 1_000_000),
    )
    lock_memory: bool = param(
        False,
        'mlockall(MCL_CURRENT | MCL_FUTURE) at start: every page of the process resident and '
        'pre-faulted, none paged out (needs CAP_IPC_LOCK or a large enough `ulimit -l`; a '
        'refusal is logged and the loop runs on)',
    )
    gc_after_write: bool = param(
        False,
        "Python's cyclic garbage collector off, and run by the receive thread right after each "
        "frame's serial write instead (young objects every frame, the middle generation every "
        f'{GC_YOUNG_EVERY}, all every {GC_FULL_EVERY}): no collection lands between a datagram '
        'and its write',
    )
    quiet_window_ms: float = param(
        1.0,
        'ms before each expected NatNet frame from which the executor thread (timers, the '
        'reference, parameters, services) starts no callback until that frame is written, or '
        f'{QUIET_AFTER_S * 1e3:g} ms past its expected time; 0 = off (callbacks run whenever '
        'their event comes, and a frame may wait for one to yield the GIL)',
        range=(0.0, 8.0),
    )
    rehearse_lead_ms: float = param(
        0.0,
        'ms before each expected NatNet frame at which the receive thread, otherwise asleep, '
        'rehearses the chain on the last frame: decode, estimate, control step, safety filter '
        'and the SET frame, on spare copies (nothing is published, written or changed), so the '
        "next frame finds more of that code in the CPU's caches; 0 = off. Keep it within "
        'quiet_window_ms, where no callback competes. Off by default: at 1 ms it took the '
        "chain's median about 0.1 ms lower and not its p99, for about 0.45 ms of CPU a frame "
        '(docs/benchmarks.md, issue 30)',
        range=(0.0, 8.0),
    )
    gil_switch_interval_us: float = param(
        GIL_SWITCH_INTERVAL_S * 1e6,
        "µs this process's threads hold the GIL before a waiting one may take it "
        '(sys.setswitchinterval; every node process uses the default): a frame that arrives '
        'while the executor thread runs Python waits up to this long',
        range=(10.0, 5000.0),
    )

    def __post_init__(self) -> None:
        validate_fields(self)


def lock_memory() -> str:
    """mlockall(MCL_CURRENT | MCL_FUTURE); '' on success, else why not (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mlockall = libc.mlockall
    except (OSError, AttributeError) as e:
        return f'mlockall is not available here ({e})'
    if mlockall(MCL_CURRENT | MCL_FUTURE) != 0:
        err = ctypes.get_errno()
        return f'{os.strerror(err)} (errno {err})'
    return ''


class LoopLatency(Node):
    """Node `control_loop`: per frame, NatNet datagram read -> its SET frame written to the serial
    port, measured in this process; p50/p99/p99.9/max of the last `latency_window` frames on
    /diagnostics, and the p50/p99 of the time each stage of the chain (STAGES) was reached, so
    the cost of a stage is the step between two of them, in wall-clock time and in the receive
    thread's CPU time (CPU_STAGES). Also applies the process-wide latency settings (lock_memory,
    gc_after_write)."""

    def __init__(self) -> None:
        super().__init__('control_loop')
        cfg = bind(self, LoopConfig()).config
        self.bridge: NatNetBridge | None = None  # set once the bridge exists (built last)
        self.samples: collections.deque[float] = collections.deque(maxlen=cfg.latency_window)
        self.reached: dict[str, collections.deque[float]] = {
            name: collections.deque(maxlen=cfg.latency_window) for name in STAGES
        }
        self.cpu: dict[str, collections.deque[float]] = {
            name: collections.deque(maxlen=cfg.latency_window) for name in CPU_STAGES
        }
        #: per frame, ms from the read to the write not spent computing in the receive thread
        self.waited: collections.deque[float] = collections.deque(maxlen=cfg.latency_window)
        self.frames = 0
        self.memory = 'not locked'
        if cfg.lock_memory:
            problem = lock_memory()
            self.memory = f'not locked: {problem}' if problem else 'locked (mlockall)'
            if problem:
                self.get_logger().warning(
                    f'lock_memory: mlockall refused: {problem}; grant CAP_IPC_LOCK or raise '
                    '`ulimit -l`, or set lock_memory:=false. Running with pageable memory'
                )
        self.gc_after_write = cfg.gc_after_write
        self.quiet_ns = int(cfg.quiet_window_ms * 1e6)
        self.rehearse_lead_s = cfg.rehearse_lead_ms * 1e-3
        #: the receive thread's CPU µs of each recent rehearsal
        self.rehearsal_cpu: collections.deque[float] = collections.deque(maxlen=cfg.latency_window)
        #: frames written by the receive thread, and the event that wakes a quiet executor
        self.written = 0
        self.frame_written = threading.Event()
        self.held_s = 0.0  # s the executor thread spent held out of quiet windows
        self._turn_owed = False  # a hold has ended: the next turn runs a callback if one is ready
        sys.setswitchinterval(cfg.gil_switch_interval_us * 1e-6)
        self._gc_frames = 0
        self._gc_last = time.monotonic()
        if self.gc_after_write:
            gc.disable()
        self.diagnostics = Diagnostics(
            self, DIAGNOSTICS, 'control_loop: frame -> serial write', hardware_id='fused'
        )
        self.create_timer(
            1.0, timer_callback(self._diag), clock=Clock(clock_type=ClockType.STEADY_TIME)
        )

    def timed(self, driver: ValveDriver) -> Callable[[list[float]], None]:
        """The driver's on_pressures, timing each frame from its datagram to the end of the serial
        write (not of the driver's publishing after it).

        Commands from the executor thread (the stale-state vent) are not frame answers."""

        def call(kpa: list[float]) -> None:
            driver.on_pressures(kpa)
            bridge = self.bridge
            if bridge is not None and bridge.is_receive_thread() and bridge.frame_arrival_ns:
                if driver.last_write_ns > bridge.frame_arrival_ns:
                    wall = (driver.last_write_ns - bridge.frame_arrival_ns) * 1e-6
                    self.samples.append(wall)
                    self.reached['decoded'].append(
                        (bridge.frame_decoded_ns - bridge.frame_arrival_ns) * 1e-6
                    )
                    read_cpu = bridge.client.arrival_cpu_ns
                    cpu = (driver.last_write_cpu_ns - read_cpu) * 1e-6
                    self.cpu['decoded'].append((bridge.frame_decoded_cpu_ns - read_cpu) * 1e-6)
                    self.cpu['written'].append(cpu)
                    self.waited.append(wall - cpu)
                    self.frames += 1
                bridge.frame_arrival_ns = 0
                self.written += 1
                self.frame_written.set()
                if self.gc_after_write:
                    self._collect()

        return call

    def stage(self, name: str, call: Callable[..., None]) -> Callable[..., None]:
        """`call`, noting (in the receive thread) when a frame reached stage `name`, in ms after
        its datagram was read, in wall-clock and in CPU time; two clock readings and two deque
        appends (a few microseconds)."""
        reached, cpu = self.reached[name], self.cpu[name]

        def noted(*args: Any) -> None:
            bridge = self.bridge
            if bridge is not None and bridge.frame_arrival_ns and bridge.is_receive_thread():
                reached.append((time.perf_counter_ns() - bridge.frame_arrival_ns) * 1e-6)
                cpu.append((time.thread_time_ns() - bridge.client.arrival_cpu_ns) * 1e-6)
            call(*args)

        return noted

    def rehearsal(
        self, estimator: EstimatorNode, controller: ControllerNode, driver: ValveDriver
    ) -> Callable[[bytes], None]:
        """The bridge client's `rehearse`: the last frame's datagram through the chain's code
        on spare copies (a socketless client, the estimator's, the control step's, the safety
        filter's; the SET frame encoded, not written), giving way between stages to a datagram
        that has come. Why: a paced frame costs 2-3 times its back-to-back CPU time on a virtual
        machine, its code and data evicted from the caches in the 8 ms since the last one. Run
        just before the frame, the rehearsal brings back part of them: the median fell, p99 did
        not (docs/benchmarks.md, issue 30, "seventh session")."""
        spare: list[NatNetClient] = []

        def rehearse(datagram: bytes) -> None:
            c0 = time.thread_time_ns()
            bridge = self.bridge
            if bridge is None:
                return
            client = bridge.client
            if (
                not spare
                or spare[0].version != client.version
                or spare[0].model is not client.model
            ):
                spare[:] = [client.spare()]
            # Between stages it gives way to a datagram that has come: the frame waits for one
            # stage at most.
            waiting = client.datagram_waiting
            ev = spare[0].handle_datagram(datagram, client.clock_ns())
            state = None if ev is None or waiting() else estimator.rehearse(bridge.poses(ev))
            kpa = None if state is None or waiting() else controller.rehearse(*state)
            if kpa is not None and not waiting():
                driver.rehearse(kpa)
            self.rehearsal_cpu.append((time.thread_time_ns() - c0) * 1e-3)

        return rehearse

    def executor_turn(self, executor: Executor) -> None:
        """One turn of the process's executor thread: a callback (or a wait for one) outside
        the quiet windows, else a hold until the frame is written. A window opens quiet_ns
        before the frame the NatNet client expects next, and lasts while a frame is in the
        chain; neither lasts more than QUIET_AFTER_S past the frame's time (a late or lost
        frame, an estimate skipped), and every hold is followed by a turn that runs a ready
        callback, so a timer or a service waits a few ms at most, whatever the frame rate."""
        bridge = self.bridge
        if not self.quiet_ns or bridge is None:
            executor.spin_once(timeout_sec=SPIN_ONCE_TIMEOUT_S)
            return
        client = bridge.client
        now = client.clock_ns()
        after = int(QUIET_AFTER_S * 1e9)
        arrival = bridge.frame_arrival_ns
        expected = client.next_frame_ns()
        if arrival and now - arrival < after:
            until = arrival + after  # a frame in the chain
        elif expected is not None and expected - self.quiet_ns <= now < expected + after:
            until = expected + after  # a frame due
        else:
            start = None if expected is None else expected - self.quiet_ns
            wait = SPIN_ONCE_TIMEOUT_S if start is None or start <= now else (start - now) * 1e-9
            self._turn_owed = False
            executor.spin_once(timeout_sec=min(wait, SPIN_ONCE_TIMEOUT_S))
            return
        if self._turn_owed:  # a turn after every hold: at a high frame rate, where one window
            self._turn_owed = False  # follows the last, a service (disarm, e-stop) still runs
            executor.spin_once(timeout_sec=0.0)
            return
        seen = self.written
        self.frame_written.clear()
        if self.written == seen:  # not written since: wait (a write after the clear sets it)
            t0 = time.perf_counter()
            self.frame_written.wait((until - now) * 1e-9)
            self.held_s += time.perf_counter() - t0
        self._turn_owed = True

    def _collect(self) -> None:
        """The collector's work, after the write (gc_after_write; see LoopConfig)."""
        self._gc_frames += 1
        n = self._gc_frames
        gc.collect(2 if n % GC_FULL_EVERY == 0 else 1 if n % GC_YOUNG_EVERY == 0 else 0)
        self._gc_last = time.monotonic()

    def _diag(self) -> None:
        if self.gc_after_write and time.monotonic() - self._gc_last > 1.0:
            gc.collect()  # no frames (stream stopped): the executor's garbage still goes
            self._gc_last = time.monotonic()
        # One sort per window (np.percentile of several q at once): this runs on the executor
        # thread, whose GIL a frame arriving meanwhile waits for.
        v = np.array(self.samples)
        values: dict = {'frames': self.frames, 'window': v.size, 'memory': self.memory}
        values['gc'] = 'after each write' if self.gc_after_write else 'automatic'
        values['kernels'] = kernels.describe()
        values['quiet_window_ms'] = f'{self.quiet_ns * 1e-6:g}'
        values['executor_held_s'] = f'{self.held_s:.3f}'
        values['rehearse_lead_ms'] = f'{self.rehearse_lead_s * 1e3:g}'
        client = self.bridge.client if self.bridge is not None else None
        if client is not None:
            values['rehearsals'] = client.rehearsals
            values['rehearsals_overran'] = client.rehearsals_overran
            if client.rehearse_error:
                values['rehearse_error'] = client.rehearse_error
        rehearsed = np.array(self.rehearsal_cpu)
        values['rehearsal_cpu_p50_us'] = (
            f'{np.percentile(rehearsed, 50):.1f}' if rehearsed.size else 'nan'
        )
        values['gil_switch_interval_us'] = f'{sys.getswitchinterval() * 1e6:.0f}'
        names, qs = ('p50', 'p99', 'p999', 'max'), (50, 99, 99.9, 100)
        ps = np.percentile(v, qs) if v.size else [math.nan] * len(qs)
        for name, x in zip(names, ps, strict=True):
            values[f'latency_{name}_ms'] = f'{x:.3f}'
        w = np.array(self.waited)
        waited = np.percentile(w, (50, 99)) if w.size else [math.nan] * 2
        values['waited_p50_ms'], values['waited_p99_ms'] = (f'{x:.3f}' for x in waited)
        values['waited_frames_pct'] = f'{100 * np.mean(w > WAITED_MS):.1f}' if w.size else 'nan'
        for prefix, stages in (('reached', self.reached), ('cpu', self.cpu)):
            for stage, d in stages.items():
                r = np.percentile(np.array(d), (50, 99)) if d else [math.nan] * 2
                for name, x in zip(('p50', 'p99'), r, strict=True):
                    values[f'{prefix}_{stage}_{name}_ms'] = f'{x:.3f}'
        self.diagnostics.publish(
            Level.OK,
            f'p99 {ps[1]:.2f} ms over the last {v.size} frames' if v.size else 'no frame yet',
            values,
        )


def control_loop() -> list[Node]:
    """The nodes, upstream first (the order they are stopped in), and the latency monitor."""
    nodes: list[Node] = []
    try:
        driver = ValveDriver(subscribe=False)
        nodes.append(driver)
        bring_up(driver)  # managed: configured and active in-process, no service round trip
        monitor = LoopLatency()
        nodes.append(monitor)
        controller = ControllerNode(
            subscribe_state=False,
            downstream=monitor.stage('driver', monitor.timed(driver)),
            subscribe_armed=False,
        )
        nodes.append(controller)
        # The driver's armed state by direct call: the controller starts afresh at each arm,
        # before the next frame (the driver armed before the controller existed: tell it now).
        driver.armed_listeners.append(controller.on_valves_armed)
        controller.on_valves_armed(driver.valves_armed)
        # Its only command source; a publisher of /valve/command elsewhere is named, never heard.
        driver.in_process_commanders = {controller.get_fully_qualified_name()}
        estimator = EstimatorNode(
            subscribe=False, downstream=monitor.stage('controller', controller.on_joints)
        )
        nodes.append(estimator)
        # Last: the bridge starts receiving (and driving the chain) when it is activated.
        bridge = NatNetBridge(downstream=monitor.stage('estimator', estimator.on_frame))
        monitor.bridge = bridge
        if monitor.rehearse_lead_s > 0:
            bridge.client.rehearse = monitor.rehearsal(estimator, controller, driver)
            bridge.client.rehearse_lead_s = monitor.rehearse_lead_s
        nodes.append(bridge)
        bring_up(bridge)
    except BaseException:
        for node in nodes:
            if isinstance(node, ValveDriver):
                node.vent_and_close()
            node.destroy_node()
        raise
    return nodes[::-1]


def _spin(nodes: list[Node]) -> None:
    """The nodes on one executor thread (`spin_all`), turned by the latency monitor's
    `executor_turn` so that no callback starts in a frame's quiet window."""
    monitor = next(n for n in nodes if isinstance(n, LoopLatency))
    spin_all(nodes, turn=monitor.executor_turn)


def _close(nodes: Any) -> None:
    """No frame may reach the valves once the driver has vented: stop the receiver first."""
    for node in nodes:
        if isinstance(node, NatNetBridge):
            node.stop_receiving()
    for node in nodes:
        if isinstance(node, ValveDriver):
            vent_on_exit(node)


def main(args: Any = None) -> int:
    return run_node(
        control_loop,
        args,
        spin=_spin,
        close=_close,
        config_hint='Fix config/natnet.yaml, valve.yaml, control.yaml or the --ros-args overrides.',
    )


if __name__ == '__main__':
    sys.exit(main())
