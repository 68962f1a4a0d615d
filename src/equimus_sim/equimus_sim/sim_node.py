"""ROS 2 node `sim`: the simulated leg behind the same topics as the real rig.

A thin wrapper over `simulator.LegSimulator` (physics, valves) and `mocap.VirtualMocap` (what the
NatNet bridge would publish). The node owns sim time: it publishes /clock and stamps everything
with sim time, and never uses sim time itself.

Its valves follow /valve/applied: the pressures the valve driver (`board: sim`) applies after its
safety layer, exactly as the rig's valves follow the driver's DAC codes. The node applies no
safety rule of its own; pressures no valve could produce are refused (counted, logged) and the
valves keep their setpoint.

Threads: one executor thread (rclpy's C++ events executor where rclpy has it) receives
/valve/applied and serves the services; the main thread runs the loop (one tick = one mocap frame
= 1/mocap_rate sim seconds), publishes, and answers ~/step, a coroutine, when its frames are done,
so a step never holds up the /valve/applied answers its lockstep frames wait for. (rclpy's
MultiThreadedExecutor, used here before, offers a callback again and again until a worker starts
it, holding the GIL while it does: the split lockstep graph ran at 0.15-0.18x real time with
it, 2.15-2.19x with one events-executor thread; benchmarks/bench_bringup.py --lockstep.) A lock
guards the simulator; it is not held while publishing, so a subscriber in the same process (the
composed graph) may answer at once.
- realtime: ticks on absolute wall deadlines t0 + k·period/real_time_factor (monotonic clock, no
  drift); real_time_factor <= 0 runs as fast as possible, FREE_RUN_FRAMES frames a turn (their
  physics, then their outputs: see run_frames). The newest pressures are held between ticks.
- lockstep: each /valve/applied message (the driver's answer to a command, or a vent of its
  safety layer) advances exactly one tick and then that frame's outputs are published. With no
  message for `lockstep_timeout` wall seconds (a dropped mocap frame broke the loop, or the
  controller is not up yet or has stopped) it advances anyway, holding the last pressures.
  The valves' setpoint is always the newest /valve/applied, set when it arrives: a message
  only paces the loop, so a vent that follows a frame's answer is never undone by it.
  real_time_factor > 0 caps the speed here too.

Control surface (docs/interfaces.md, docs/simulation.md): ~/pause, ~/resume, ~/step (advances
`step_frames` frames, returns when they are done, then stays paused), ~/reset (to `reset_pose`),
the runtime `real_time_factor`, `pause_at`; the achieved real-time factor is on /diagnostics.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.task import Future
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from equimus_description.interface import (
    CLOCK,
    DIAGNOSTICS,
    FRAME_MOCAP,
    SIM_JOINT_STATES,
    VALVE_APPLIED,
    VALVE_PRESSURE,
    mocap_pose,
)
from equimus_description.motive import DEFAULT_UP_AXIS, motive_to_ros
from equimus_ros.cdr import ClockWriter, JointStateWriter, PoseWriter, PressureStateWriter
from equimus_ros.diagnostics import Diagnostics, Level
from equimus_ros.executors import single_thread_executor, spin_until_shutdown, timer_callback
from equimus_ros.main import is_shutting_down, run_node
from equimus_ros.params import bind, refuse_value
from equimus_ros.qos import publisher, subscription

from .config import SimConfig
from .mocap import VirtualMocap
from .pacing import JitterStats, Pacer
from .simulator import make_simulator

# Frames a free-running loop (realtime, real_time_factor <= 0) runs per turn: see run_frames.
FREE_RUN_FRAMES = 8
#: wall s between two questions to rclpy's context in `running` (a signal's shutdown is seen
#: at most that much later)
OK_PERIOD_S = 0.01


class FrameHook(Protocol):
    """What a composing process does at each frame, by direct call (sim_graph): the frame's time
    before its messages go out, and each released mocap frame's poses right after theirs."""

    def frame_started(self, t_ns: int) -> None: ...

    def poses(self, capture_ns: int, bodies: list[str], poses: list[tuple]) -> None: ...


def ros_pose(position, quat_wxyz) -> tuple:
    """A virtual-mocap pose (Motive's default Y-up stream) as the bridge publishes it: in the
    Z-up frame `mocap` (REP-103), by the bridge's own conversion; quaternion w, x, y, z."""
    w, x, y, z = quat_wxyz
    pos, (qx, qy, qz, qw) = motive_to_ros(position, (x, y, z, w), DEFAULT_UP_AXIS)
    return pos, (qw, qx, qy, qz)


def _sim_time_refusal(value: Any) -> str:
    """The sim owns /clock: it cannot run on the clock it publishes (false is accepted)."""
    if value is False:
        return ''
    return (
        f'use_sim_time={value!r} refused: the sim node publishes /clock and runs on wall time; '
        'set use_sim_time on the other nodes only'
    )


class SimNode(Node):
    """The `sim` node; see the module docstring."""

    def __init__(self, **kwargs):
        super().__init__('sim', **kwargs)
        if self.get_parameter('use_sim_time').value:
            self.get_logger().warning(
                'use_sim_time=true ignored: the sim node publishes /clock and '
                'must run on wall time; set use_sim_time only on the other nodes'
            )
            self.set_parameters([Parameter('use_sim_time', Parameter.Type.BOOL, False)])
        # From here on, also refused while running (`ros2 param set /sim use_sim_time true`);
        # added last, so it runs before the TimeSource's own callback switches the clock.
        self.add_on_set_parameters_callback(refuse_value('use_sim_time', _sim_time_refusal))
        self.params = bind(self, SimConfig(), apply=self._apply)
        p = self.params.config
        self.mode = p.mode
        self.real_time_factor = p.real_time_factor
        self.lockstep_timeout = p.lockstep_timeout
        self.rate = p.mocap_rate
        self.diag_period = p.diagnostics_period
        self.realtime_priority = p.realtime_priority

        self.sim = make_simulator(
            leg_path=p.leg_description or None,
            overrides=p.parameter_overrides or None,
            variant=p.variant,
            timestep=p.timestep or None,
            valve=p.valve_model,
            initial_pressures=list(p.initial_pressures),
            initial_q=None if p.initial_equilibrium else list(p.initial_q),
        )
        # Names from the description (the rig's leg: interface.JOINTS, ACTUATORS, BODIES).
        self.joint_names = list(self.sim.leg.joint_names)
        self.actuator_names = list(self.sim.leg.actuator_names)
        self.bodies = list(self.sim.leg.leg.bodies)
        self.mocap = VirtualMocap(p.mocap(), bodies=self.bodies)

        # Re-entrant: a subscriber in this process may answer (on_applied) from inside a publish.
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.answers = 0  # lockstep: /valve/applied messages not yet taken as a frame's answer
        self.in_process = False  # set by compose(): answers arrive during the frame's publishing
        self.frame = 0
        self.lockstep_timeouts = 0
        self.lockstep_discarded = 0
        self.commands = 0
        self.work = JitterStats(2400)
        self.pacer = Pacer(self._period(self.real_time_factor))
        self.paused = p.start_paused
        self.steps_left = 0  # frames still to run for ~/step calls
        self._step_calls: list[tuple[int, float, Future]] = []  # (frame, wall deadline, answer)
        self.pause_at_ns = self._pause_at_ns(p.pause_at)
        self._stop = threading.Event()
        self._next_ok = 0.0  # monotonic s: when `running` asks rclpy's context again
        self._last_resets = 0
        self._diag_wall = time.monotonic()
        self._diag_sim = 0.0

        self.pub_clock = publisher(self, Clock, CLOCK)
        self.pub_joints = publisher(self, JointState, SIM_JOINT_STATES)
        self.pub_pose = {b: publisher(self, PoseStamped, mocap_pose(b)) for b in self.bodies}
        self.pub_pressure = publisher(self, JointState, VALVE_PRESSURE)
        self.diagnostics = Diagnostics(self, DIAGNOSTICS, 'sim: simulator', 'mujoco')
        subscription(self, JointState, VALVE_APPLIED, self.on_applied)
        self.create_service(Trigger, '~/reset', self._on_reset)
        self.create_service(Trigger, '~/pause', self._on_pause)
        self.create_service(Trigger, '~/resume', self._on_resume)
        # Its own group: rclpy's Python executors hold a callback's group until its coroutine
        # ends, and the frames a step waits for need /valve/applied (the default group).
        self.create_service(
            Trigger, '~/step', self._on_step, callback_group=MutuallyExclusiveCallbackGroup()
        )
        self.create_timer(self.diag_period, timer_callback(self._publish_diagnostics))
        # The frame's messages, pre-serialised (equimus_ros.cdr): bytes to the middleware.
        self.out_clock = ClockWriter(self.pub_clock)
        self.out_joints = JointStateWriter(self.pub_joints, self.joint_names)
        self.out_pose = {b: PoseWriter(self.pub_pose[b], FRAME_MOCAP) for b in self.bodies}
        self.out_pressure = PressureStateWriter(self.pub_pressure, tuple(self.actuator_names))
        self.frame_hook: FrameHook | None = None
        rtf = self.real_time_factor
        self.get_logger().info(
            f'sim: {p.variant} model, Δt={self.sim.dt * 1e3:.4f} ms, {self.mode}'
            + (f' x{rtf:g}' if rtf > 0 else ' as fast as possible')
            + (f' (timeout {self.lockstep_timeout:g} s)' if self.mode == 'lockstep' else '')
            + f', {self.rate:g} Hz frames, θ0={np.round(self.sim.initial_q, 4).tolist()} rad; '
            f'valves follow {VALVE_APPLIED.name}' + ('; PAUSED' if self.paused else '')
        )

    def compose(self, hook: FrameHook) -> None:
        """Run inside the composed graph: `hook` hears each frame's time and poses by direct
        call, and the valve driver answers each frame during them, so lockstep never waits for
        an answer. The messages still go out (to the composing process's hand-off)."""
        if self.mode != 'lockstep':
            raise ValueError('the composed sim graph needs mode lockstep')
        self.in_process = True
        self.frame_hook = hook

    def _period(self, rtf: float) -> float:
        return 1.0 / (self.rate * rtf) if rtf > 0 else 0.0

    def _pause_at_ns(self, pause_at: float) -> int:
        return int(round(pause_at * 1e9)) if pause_at > 0 else 0

    def _apply(self, cfg: SimConfig) -> None:
        """Runtime parameters (already validated): pacing and pause_at from the next frame."""
        with self.cond:
            if cfg.real_time_factor != self.real_time_factor:
                self.real_time_factor = cfg.real_time_factor
                self.pacer.period = self._period(cfg.real_time_factor)
                self.pacer.restart()
            self.pause_at_ns = self._pause_at_ns(cfg.pause_at)
            self.cond.notify_all()

    # ----- callbacks (executor thread) ------------------------------------------------------
    def on_applied(self, msg: JointState) -> None:
        self.take_applied(list(msg.effort))

    def take_applied(self, kpa: list[float]) -> None:
        """The valve driver's output (kPa per valve): from /valve/applied, or by direct call in
        the composed graph."""
        with self.cond:
            self.commands += 1
            problem = self.sim.set_command(kpa)
            if self.mode == 'lockstep':
                self.answers += 1
                self.cond.notify_all()
        if problem:
            self.get_logger().warning(
                f'refused {VALVE_APPLIED.name} {kpa}: {problem}; the valves keep '
                f'{self.sim.command.tolist()} kPa',
                throttle_duration_sec=1.0,
            )

    def _on_reset(self, request, response):
        cfg = self.params.config
        with self.lock:
            sim = self.sim
            try:
                p = np.asarray(cfg.reset_pressures, float)
                if cfg.reset_pose == 'initial':
                    q, p = sim.initial_q, sim.initial_pressures
                elif cfg.reset_pose == 'equilibrium':
                    q = sim.equilibrium(p)
                else:
                    q = np.asarray(cfg.reset_q, float)
                sim.place(q, p)
            except ValueError as exc:
                response.success = False
                response.message = f'reset to {cfg.reset_pose} refused: {exc}'
                self.get_logger().warning(response.message)
                return response
            self.mocap.clear_pending()
            self.answers = 0
            t = self.frame / self.rate
        response.success = True
        response.message = (
            f'leg reset ({cfg.reset_pose}) to θ={np.round(q, 4).tolist()} '
            f'rad, p={p.tolist()} kPa at t={t:.4f} s'
        )
        self.get_logger().info(response.message)
        return response

    def _on_pause(self, request, response):
        with self.cond:
            self.paused = True
            self.steps_left = 0
            t = self.frame / self.rate
        response.success = True
        response.message = f'paused at t={t:.4f} s (frame {self.frame})'
        return response

    def _on_resume(self, request, response):
        with self.cond:
            was = self.paused
            self.paused = False
            self.steps_left = 0
            self.cond.notify_all()
            t = self.frame / self.rate
        response.success = True
        response.message = f'resumed at t={t:.4f} s' if was else f'running (t={t:.4f} s)'
        return response

    async def _on_step(self, request, response):
        """Advance `step_frames` frames (as fast as possible), answer when done, stay paused.
        A coroutine the loop thread completes (_settle_steps): the executor thread stays free
        for the /valve/applied answers the lockstep frames wait for."""
        n = self.params.config.step_frames
        limit = n * (self.lockstep_timeout + 1.0) + 5.0  # wall s; a stalled loop fails the call
        answer: Future = Future()
        with self.cond:
            self.paused = True
            self.steps_left += n
            deadline = time.monotonic() + limit
            self._step_calls.append((self.frame + self.steps_left, deadline, answer))
            self.cond.notify_all()
        done = await answer
        with self.cond:
            t = self.frame / self.rate
        response.success = done
        response.message = (
            f'stepped {n} frames to t={t:.4f} s (frame {self.frame}); paused'
            if done
            else f'step of {n} frames not finished within {limit:g} s (frame {self.frame})'
        )
        return response

    # ----- the loop (main thread) -----------------------------------------------------------
    def time_ns(self, frame: int) -> int:
        return int(round(frame * 1e9 / self.rate))

    def tick(self) -> None:
        """Advance one frame and publish its outputs."""
        self.run_frames(1)

    def run_frames(self, n: int) -> None:
        """Advance n frames and publish their outputs: the physics of all n first (each frame's
        state kept), then their virtual mocap, then their messages. Each phase runs its own
        code n times in a row (MuJoCo's, the Python outputs', the middleware's): interleaved
        frame by frame the three evict each other from the CPU's caches, which costs a
        free-running node a quarter of its speed on a busy host (docs/benchmarks.md, issue 30)."""
        t0 = time.perf_counter()
        with self.lock:
            states = []
            for _ in range(n):
                self.frame += 1
                t_ns = self.time_ns(self.frame)
                self.sim.advance_to(t_ns * 1e-9)
                states.append(self._frame_state(t_ns))
            self._drop_unanswered_commands()
            outs = [self._frame_outputs(*state) for state in states]
            resets = self.sim.resets
        for out in outs:
            self._publish_frame(*out)
        self.work.add((time.perf_counter() - t0) / n)
        if resets != self._last_resets:
            self._last_resets = resets
            self.get_logger().error(
                f'simulation reset ({resets} so far): {self.sim.last_reset_reason}'
            )
            self._publish_diagnostics()

    def _frame_state(self, t_ns: int) -> tuple:
        """What a frame's outputs need of the physics (copies): stamp, θ, θ̇, the bodies' world
        poses, the valve pressures."""
        return (t_ns, *self.sim.frame_state(self.bodies))

    def _frame_outputs(self, t_ns: int, q, qd, body_pos, body_quat, pressures) -> tuple:
        """The frame's messages' contents from its state (under the lock: the mocap's queue).
        Each released frame's poses in body order (the mocap's, as self.bodies)."""
        t = t_ns * 1e-9
        self.mocap.capture_arrays(t, body_pos, body_quat)
        poses = [
            (
                int(round(f.capture_time * 1e9)),
                [ros_pose(p.position, p.orientation) for p in f.bodies.values()],
            )
            for f in self.mocap.release(t)
        ]
        return t_ns, q, qd, poses, pressures

    def _publish_frame(self, t_ns: int, q, qd, poses, pressures) -> None:
        hook = self.frame_hook
        if hook is not None:
            hook.frame_started(t_ns)
        self.out_clock.write(t_ns)
        self.out_joints.write(t_ns, q, qd)
        out_pose = self.out_pose
        for cap_ns, bodies in poses:
            for name, (position, orientation) in zip(self.bodies, bodies, strict=True):
                out_pose[name].write(cap_ns, position, orientation)
            if hook is not None:
                hook.poses(cap_ns, self.bodies, bodies)
        self.out_pressure.write(t_ns, pressures)

    def _drop_unanswered_commands(self) -> None:
        # Lockstep: only a command sent after a frame was published answers that frame. Commands
        # queued earlier (start-up vents, a late answer after a timeout) would otherwise keep the
        # loop permanently that many frames behind, varying from run to run.
        if self.mode == 'lockstep':
            self.lockstep_discarded += self.answers
            self.answers = 0

    def publish_initial(self) -> None:
        with self.lock:
            self._drop_unanswered_commands()
            out = self._frame_outputs(*self._frame_state(self.time_ns(0)))
        self._publish_frame(*out)

    def running(self) -> bool:
        """Not stopped, and the context up: asked of rclpy at most every OK_PERIOD_S wall s (a
        lock and a handle each time, at every frame a few per cent of a composed one's CPU)."""
        if self._stop.is_set():
            return False
        now = time.monotonic()
        if now >= self._next_ok:
            if not self.context.ok():
                return False
            self._next_ok = now + OK_PERIOD_S
        return True

    def run(self, others: Sequence[Node] = ()) -> None:
        """Main loop until shutdown; the executor (this node and `others`, the composed graph's
        nodes) runs in a background thread."""
        # One executor thread (a second one only competes for the GIL): the C++ events executor
        # where rclpy has it (equimus_ros.executors: its wake-ups cost a tenth).
        executor = single_thread_executor(self.context)
        for node in (self, *others):
            executor.add_node(node)
        spinner = threading.Thread(target=self._spin, args=(executor,), daemon=True)
        if self.mode == 'realtime':
            self._set_priority(self.realtime_priority)
        try:
            # Frame 0 before any timer can run: a composed controller's stale-state guard must
            # not find "no state yet" at start (a wall-clock race, so not deterministic).
            self.publish_initial()
            spinner.start()
            self.pacer.restart()
            while self.running():
                try:
                    stepping = self._gate()
                    if stepping is None:
                        break
                    if not stepping:
                        self.pacer.wait()
                    if self.mode == 'realtime':
                        self.run_frames(self._frames_this_turn(stepping))
                    else:
                        self._lockstep_once()
                    self._frame_done(stepping)
                except Exception:
                    if self.context.ok():
                        raise
                    break  # shut down (SIGINT/SIGTERM) while publishing: leave quietly
        finally:
            self._stop.set()
            with self.cond:
                self._settle_steps(stopping=True)
                self.cond.notify_all()
            if spinner.is_alive():
                spinner.join(timeout=2.0)
            for node in (self, *others):
                executor.remove_node(node)
            executor.shutdown(timeout_sec=0.5)

    def _settle_steps(self, stopping: bool = False) -> None:
        """Answer the ~/step calls whose frames are done (True), or whose time is up or whose
        node stops (False). The loop thread calls it with the lock held."""
        if not self._step_calls:
            return
        now, left = time.monotonic(), []
        for target, deadline, answer in self._step_calls:
            if self.frame >= target:
                answer.set_result(True)
            elif stopping or now > deadline:
                answer.set_result(False)
            else:
                left.append((target, deadline, answer))
        self._step_calls = left

    def _frames_this_turn(self, stepping: bool) -> int:
        """Realtime mode: one frame a turn when paced or stepping; free-running, up to
        FREE_RUN_FRAMES, never past pause_at (commands, ~/pause and ~/reset then take effect
        between turns: at most FREE_RUN_FRAMES - 1 frames later, far under a wall millisecond)."""
        if stepping or self.pacer.period > 0.0:
            return 1
        n, stop = 1, self.pause_at_ns
        while n < FREE_RUN_FRAMES and not (stop and self.time_ns(self.frame + n) >= stop):
            n += 1
        return n

    def _gate(self) -> bool | None:
        """Wait while paused. True: the next frame is a ~/step frame (not paced); None: stop."""
        waited = False
        with self.cond:
            while self.paused and self.steps_left == 0:
                if not self.running():
                    return None
                waited = True
                self.cond.wait(0.1)
                self._settle_steps()
            stepping = self.steps_left > 0
        if waited:
            self.pacer.restart()
        return stepping

    def _frame_done(self, stepping: bool) -> None:
        with self.cond:
            if stepping and self.steps_left > 0:
                self.steps_left -= 1
            self._settle_steps()
            if self.pause_at_ns and self.time_ns(self.frame) >= self.pause_at_ns:
                self.pause_at_ns = 0
                if not self.paused:
                    self.paused = True
                    self.get_logger().info(
                        f'paused at t={self.frame / self.rate:.4f} s (pause_at); '
                        'call ~/resume or ~/step'
                    )
            self.cond.notify_all()

    def _set_priority(self, prio: int) -> None:
        if prio <= 0:
            return
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(prio))  # this thread only
            self.get_logger().info(f'loop thread runs SCHED_FIFO priority {prio}')
        except (OSError, AttributeError) as e:
            self.get_logger().warning(
                f'realtime_priority={prio} not applied ({e}); running with normal '
                'scheduling. Grant CAP_SYS_NICE or an rtprio limit to use it.'
            )

    def _lockstep_once(self) -> None:
        # In the composed graph the answer (if any) arrived while the frame was published.
        deadline = time.monotonic() + (0.0 if self.in_process else self.lockstep_timeout)
        with self.cond:
            while not self.answers and not self._stop.is_set() and self.context.ok():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.cond.wait(min(remaining, 0.1))
            if self.answers:
                self.answers -= 1
            else:
                if self._stop.is_set() or not self.context.ok():
                    return
                self.lockstep_timeouts += 1
        self.tick()

    def _spin(self, executor) -> None:
        try:
            spin_until_shutdown(executor, self.context, self._stop.is_set)
        except (ExternalShutdownException, KeyboardInterrupt):
            pass
        except RuntimeError:
            # a signal shut the context down between the check and spin_once: leave quietly
            if not is_shutting_down():
                raise
        finally:
            self._stop.set()
            with self.cond:
                self.cond.notify_all()

    def stop(self) -> None:
        self._stop.set()

    # ----- diagnostics ----------------------------------------------------------------------
    def _publish_diagnostics(self) -> None:
        now = time.monotonic()
        with self.lock:
            sim = self.sim
            sim_t = self.frame / self.rate
            wall = now - self._diag_wall
            rtf = (sim_t - self._diag_sim) / wall if wall > 0 else math.nan
            self._diag_wall, self._diag_sim = now, sim_t
            jit = self.pacer.jitter.summary()
            self.pacer.jitter.clear()
            work = self.work.summary()
            self.work.clear()
            values = {
                'mode': self.mode,
                'real_time_factor_target': f'{self.real_time_factor:g}',
                'paused': str(self.paused).lower(),
                'sim_time': f'{sim_t:.6f}',
                'frames': str(self.frame),
                'real_time_factor': f'{rtf:.4f}',
                'jitter_p50_us': f'{jit["p50"] * 1e6:.1f}',
                'jitter_p99_us': f'{jit["p99"] * 1e6:.1f}',
                'jitter_max_us': f'{jit["max"] * 1e6:.1f}',
                'jitter_samples': str(jit['n']),
                'tick_work_p50_us': f'{work["p50"] * 1e6:.1f}',
                'tick_work_p99_us': f'{work["p99"] * 1e6:.1f}',
                'overruns': str(self.pacer.overruns),
                'applied_received': str(self.commands),
                'lockstep_timeouts': str(self.lockstep_timeouts),
                'lockstep_discarded': str(self.lockstep_discarded),
                'refused_pressures': str(sim.rejected),
                'last_refusal': sim.last_reject_reason,
                'resets': str(sim.resets),
                'last_reset_reason': sim.last_reset_reason,
                'mocap_dropped_frames': str(self.mocap.dropped),
                'mocap_occluded_poses': str(self.mocap.occluded),
                'valve_pressure_kpa': str(np.round(sim.pressures, 3).tolist()),
                'valve_setpoint_kpa': str(np.round(sim.command, 3).tolist()),
            }
            level = Level.OK
            message = f'{self.mode}, real-time factor {rtf:.2f}' + (
                ', paused' if self.paused else ''
            )
            if sim.resets:
                level, message = Level.WARN, f'{message}; {sim.resets} unstable-state resets'
            if sim.rejected:
                level, message = (
                    Level.WARN,
                    f'{message}; {sim.rejected} impossible pressures refused',
                )
        self.diagnostics.publish(level, message, values)


def main(args=None) -> int:
    return run_node(
        SimNode,
        args,
        spin=SimNode.run,
        close=SimNode.stop,
        config_hint='Fix config/sim.yaml or the --ros-args overrides.',
    )


if __name__ == '__main__':
    sys.exit(main())
