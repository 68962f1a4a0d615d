"""valve_driver: pressure commands (kPa) -> safety filter -> DAC codes -> DAC board.

Thin rclpy wrapper around safety.SafetyFilter, calibration.ValveCalibration and a board
(board.Board): the serial DAC board (link.BoardLink, `board: serial`) on the rig, or the simulated
board (board.SimBoard, `board: sim`) in the sim graph, where the pressures the codes regulate to go
on /valve/applied and the sim node's valves follow them. The safety layer is the same on both legs.

A managed (lifecycle) node: `configure` opens the board (serial port or simulated board) and
starts the keep-alive and watchdog ticks, venting; `activate` accepts commands and arms when
auto_arm is true; `deactivate` disarms and vents (`ros2 lifecycle set /valve_driver deactivate`);
`cleanup` vents and closes the port; `shutdown` (and any exit) vents and closes. The launch files
and the supervisor take it to active; `autostart: true` does so alone (a bare `ros2 run`).

When active it is DISARMED until `/valve_driver/arm` is called (or the parameter auto_arm is true,
as the sim graph sets it) AND a fresh command arrives: output 0 kPa. Every arm (and a reconnect)
starts the output from 0 kPa, slew-limited up from there: the slew's time restarts, so a time
spent inactive never counts as slew allowance. /valve/armed (latched) says whether the valves
follow the commands, on every change and at every arm; the controller starts afresh at each
true, so nothing it wound up while the valves were vented reaches them (`armed_listeners`: the
same by direct call, for the fused control loop).
One commander (safety.CommanderGuard), by publisher GID: arming is refused while more than one
node publishes /valve/command; the first command after arming binds its sender as the commander
if it is the only publisher, and from then on no other publisher is obeyed while the commander is
on the graph, however long it is silent (a stalled controller: the watchdog vents and the valves
stay vented). Each other sender is named in an ERROR at its first command. When the commander
leaves the graph the driver disarms; `~/hand_over` (its supervisor saw its process exit) forgets
it at once. Either way a new publisher is obeyed only after the next `~/arm`.
In the composed sim graph and the fused control loop (`in_process_commanders`, set by
equimus_bringup.sim_graph and .control_loop) commands come from the controller in the same
process only; a publisher outside the process is never heard: it is named in an ERROR in the log
and on /diagnostics, control goes on, and arming is refused while it exists (docs/reliability.md,
"One commander").
The clock of the safety decisions (watchdog, freshness after an arm, slew): on the rig and in the
split graph the timers and the watchdog run on the steady clock, never on sim time: a paused
/clock must not stop the keep-alive or the watchdog. In the composed sim graph (`lockstep=True`,
set by equimus_bringup.sim_graph) the simulator owns time and each frame waits for its command,
so nothing moves between frames however late the wall clock is: there every decision that can
change a message is made on the node clock (sim time), and the graph calls `on_frame()` at each
frame after the first in place of the steady tick, so the watchdog vents when no command came for
command_timeout_s of sim time, at the same frame in every run. The wall-clock timers left there
(the graph's publishers, diagnostics) change nothing but /diagnostics in a healthy run: the
commander is in the same process and never leaves the graph. With the simulated board the slew
limit follows the node's clock (sim time in the sim graph), and /valve/applied carries one message
per command plus the safety layer's own changes (vents), never a keep-alive: each one is a step of
the lockstep simulation.
On shutdown (Ctrl-C, SIGTERM, or a normal exit) it writes SET all-zero and waits briefly for the
ACK before the port closes.
On the serial board each channel has its own calibration: the settings of config/valve.yaml with
the rig's measured DAC gain and offset from `calibration_file` (`equimus check rig` writes it);
without one it refuses to start unless `require_calibration` is false.
"""

from __future__ import annotations

import copy
import functools
import math
import sys
import threading
import time
from collections.abc import Callable, Sequence

from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import Trigger

from equimus_description.config import ConfigError
from equimus_description.interface import (
    ACTUATORS,
    DIAGNOSTICS,
    VALVE_APPLIED,
    VALVE_ARMED,
    VALVE_COMMAND,
    VALVE_PRESSURE,
)
from equimus_description.leg import load_leg
from equimus_ros.cdr import PressureStateWriter
from equimus_ros.clocks import time_reader
from equimus_ros.diagnostics import Diagnostics, Level
from equimus_ros.executors import info_callback, timer_callback
from equimus_ros.lifecycle import bring_up
from equimus_ros.main import run_node
from equimus_ros.params import bind
from equimus_ros.qos import publisher, subscription

from .board import Board, SimBoard
from .calibration import ValveCalibration
from .config import DriverConfig
from .link import BoardLink
from .safety import CommanderGuard, SafetyFilter


def _serialised(method):
    """Hold the driver's lock: its safety filter and link are driven from the executor (timers,
    services) and, in the fused control loop, from the NatNet receive thread (on_pressures)."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return call


#: logged, with the commander's name, at the first command obeyed after an arm (`rig_session`
#: starts a phase's clock on it)
COMMANDER_BOUND = 'commander: '
#: s a /valve/pressure stamp may lag the previous one and still be held at it (a read-back
#: whose arrival its starved reader thread noted late); a larger step back is the clock itself
#: (a system clock set back, sim time restarted) and passes.
MAX_HELD_BACK_S = 0.5


def ordered_stamp_ns(ns: int, last_ns: int) -> int:
    """A read-back's stamp (ns) in order after the previous one's `last_ns`: held at it when
    it lags by less than MAX_HELD_BACK_S, else as it is."""
    return last_ns if 0 < last_ns - ns < MAX_HELD_BACK_S * 1e9 else ns


def _channels(p: DriverConfig) -> tuple[str, ...]:
    """Valve channel names: the rig's ACTUATORS, or the muscles of `leg_description`."""
    if not p.leg_description:
        return ACTUATORS
    names = tuple(load_leg(p.leg_description).actuator_names)
    if p.board != 'sim' and names != ACTUATORS:
        raise ConfigError(
            f'leg_description={p.leg_description!r} has muscles {list(names)}: board '
            f"{p.board!r} drives the rig's valves {list(ACTUATORS)}; another limb runs with "
            'board:=sim only'
        )
    return names


class ValveDriver(LifecycleNode):
    """`subscribe=False` is for the fused control loop: commands come by call (`on_pressures`)
    from the controller in the same process; /valve/command is then published, not read.
    `lockstep=True` is for the composed sim graph: the safety filter runs on sim time and the
    graph calls `on_frame()` instead of a steady-clock tick (see the module docstring);
    `frame_time` is the graph's frame time, read in place of the node clock (equimus_ros.clocks).
    """

    def __init__(
        self,
        subscribe: bool = True,
        lockstep: bool = False,
        frame_time: Callable[[], int] | None = None,
        **kwargs,
    ):
        super().__init__('valve_driver', **kwargs)
        # ns on the node clock, or the composing graph's frame time
        self._clock_ns = time_reader(self.get_clock(), frame_time)
        self._lock = threading.RLock()
        self.params = bind(self, DriverConfig(), apply=self._apply)
        p = self.params.config
        self.simulated = p.board == 'sim'
        self.channels = _channels(p)
        self.subscribed = subscribe
        self.lockstep = lockstep
        # The composed sim graph's in-process publishers of /valve/command (None: every publisher
        # is heard over DDS); any other publisher the graph shows is outside and never heard.
        self.in_process_commanders: set[str] | None = None
        self.outside_commanders: list[str] = []
        self.active = False
        # Called with the armed state on every change and at every arm (the fused loop's
        # controller); /valve/armed carries the same.
        self.armed_listeners: list[Callable[[bool], None]] = []
        self._armed_reported: bool | None = None
        self.board: Board | None = None
        self._board_timers: list = []
        self._sub = None
        self._closing = False
        self._reset(p)
        self.pub_applied = publisher(self, JointState, VALVE_APPLIED)
        self.out_applied = PressureStateWriter(self.pub_applied, self.channels)
        # Called with each output's pressures before /valve/applied goes out (the composed sim
        # graph's simulated valves).
        self.applied_listeners: list[Callable[[list[float]], None]] = []
        self.pub_armed = publisher(self, Bool, VALVE_ARMED)
        # The simulated leg's measured pressures come from the sim node itself.
        self.pub_pressure = None if self.simulated else publisher(self, JointState, VALVE_PRESSURE)
        # Pre-serialised, as /valve/applied: the tick publishes it at up to its rate, on the
        # executor thread whose GIL a frame of the fused control loop may be waiting for.
        self.out_pressure = (
            None
            if self.pub_pressure is None
            else PressureStateWriter(self.pub_pressure, self.channels)
        )
        self.diagnostics = Diagnostics(
            self, DIAGNOSTICS, 'valve_driver: DAC board', 'sim' if self.simulated else p.port
        )
        self.create_service(Trigger, '~/arm', self._srv_arm)
        self.create_service(Trigger, '~/disarm', self._srv_disarm)
        self.create_service(Trigger, '~/estop', self._srv_estop)
        self._report_armed()
        self.create_service(Trigger, '~/hand_over', self._srv_hand_over)
        self.get_logger().info('unconfigured: the board is closed until configure')

    def _reset(self, p: DriverConfig) -> None:
        """Fresh safety state from the current parameters (at construction and each configure).
        The calibration file is read here: a ValueError says why it cannot be used."""
        self.cal = p.calibration()
        self.rig_calibration = p.calibration_of_rig(self.channels)
        self.cals = p.channel_calibrations(self.channels, self.rig_calibration)
        self.safety = SafetyFilter(
            len(self.channels), p.max_kpa, p.slew_rate_kpa_s, p.command_timeout_s
        )
        self.guard = CommanderGuard()
        self._others: list[str] = []
        self.keepalive_s = p.keepalive_period_s
        self.shutdown_ack_timeout_s = p.shutdown_ack_timeout_s
        self.last_write_ns = 0
        self.last_write_cpu_ns = 0  # the writing thread's CPU time then (thread_time_ns)
        self._last_sent: list[int] | None = None
        #: (the safety filter it copies, the copy) for `rehearse`
        self._spare_safety: tuple[SafetyFilter, SafetyFilter] | None = None
        # (calibrations, kPa, codes) of the last `_codes` answer
        self._code_memo: tuple[tuple[ValveCalibration, ...], list[float], list[int]] | None = None
        self._last_send_t = 0.0
        self._slew_t: float | None = None
        self._slew_stamp_ns: int | None = None
        self._generation = 0
        self._measured_count = 0
        self._pressure_stamp_ns = 0  # the last /valve/pressure stamp (ns)
        self._last_commanded = [math.nan] * len(self.channels)
        self._diag_key: tuple[str, bool, bool, bool, bool] | None = None
        self._last_warn_t = -math.inf

    # ----------------------------------------------------------------- lifecycle
    @_serialised
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Open the board and start the ticks; the output is vented (disarmed)."""
        p = self.params.config
        try:
            self._reset(p)
        except ValueError as exc:
            self.get_logger().error(f'configure failed: {exc}')
            return TransitionCallbackReturn.FAILURE
        self._closing = False
        board: Board = (
            SimBoard(len(self.channels), self.cal)
            if self.simulated
            else BoardLink(
                p.port,
                len(self.channels),
                self.cal,
                baud=p.baud,
                ack_timeout_s=p.ack_timeout_s,
                link_timeout_s=p.link_timeout_s,
                backoff_min_s=p.reconnect_backoff_min_s,
                backoff_max_s=p.reconnect_backoff_max_s,
                log=self._link_log,
            )
        )
        try:
            board.start()
        except OSError as exc:
            self.get_logger().error(f'configure failed: cannot open {p.port}: {exc}')
            return TransitionCallbackReturn.FAILURE
        self.board = board
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        if self.subscribed:
            # Each command's MessageInfo: the one-commander guard reads its publisher's gid.
            self._sub = subscription(
                self, Float64MultiArray, VALVE_COMMAND, info_callback(self._on_topic_command)
            )
        self._board_timers.append(
            self.create_timer(0.2, timer_callback(self._count_commanders), clock=steady)
        )
        if not self.lockstep:
            self._board_timers.append(
                self.create_timer(1.0 / p.rate_hz, timer_callback(self._tick), clock=steady)
            )
        self._board_timers.append(
            self.create_timer(1.0, timer_callback(self._publish_diagnostics), clock=steady)
        )
        self.get_logger().info(
            f'configured: board {p.board}'
            + ('' if self.simulated else f' on {p.port}')
            + f', max {self.cal.max_kpa:g} kPa = DAC code '
            + '/'.join(str(c.max_code) for c in self.cals)
            + f', watchdog {p.command_timeout_s:g} s, slew {p.slew_rate_kpa_s:g} kPa/s; '
            + f'{self._calibration_note()}; vented'
        )
        if self.rig_calibration is None and not self.simulated:
            self.get_logger().warning(
                'no calibration_file (require_calibration=false): the nominal datasheet '
                'calibration; each valve is off by its DAC chain error (run `equimus check rig`)'
            )
        return TransitionCallbackReturn.SUCCESS

    @_serialised
    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Accept commands; arm at once when auto_arm is true (else wait for ~/arm)."""
        self.active = True
        if self.params.config.auto_arm:
            # No graph check here: the claim binds the first command's sender only while it is
            # the only publisher (a SIGKILLed controller stays listed for its 20 s DDS lease).
            self._arm(self._now())
            self.get_logger().warning(
                'active, auto_arm=true: ARMED; valves follow '
                f'{VALVE_COMMAND.name} as soon as a command arrives'
            )
        else:
            self.get_logger().info('active, DISARMED (0 kPa); call /valve_driver/arm to enable')
        self._report_armed(rearmed=self.params.config.auto_arm)
        self._publish_diagnostics()
        return TransitionCallbackReturn.SUCCESS

    @_serialised
    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Disarm and vent; commands are ignored until the next activate."""
        self.active = False
        self._vent('deactivated')
        return TransitionCallbackReturn.SUCCESS

    @_serialised
    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._close_board('cleaned up')
        return TransitionCallbackReturn.SUCCESS

    @_serialised
    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._close_board('shut down')
        return TransitionCallbackReturn.SUCCESS

    @_serialised
    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._close_board('error')
        return TransitionCallbackReturn.SUCCESS

    def _vent(self, why: str) -> None:
        self.safety.disarm()
        self._report_armed()
        if self.board is not None:
            now = self._now()
            self._send(self.safety.step(now, 0.0), now)  # a vent: no slew
            self._publish_diagnostics()
        self.get_logger().info(f'{why}: disarmed, all channels vented to 0 kPa')

    def _calibration_note(self) -> str:
        rig = self.rig_calibration
        if rig is not None:
            fits = ', '.join(
                f'{n} gain {rig.channels[n].dac_gain:.4f} offset '
                f'{rig.channels[n].dac_offset_kpa:+.2f} kPa'
                for n in self.channels
            )
            return f'calibration {rig.path} of {rig.written or "unknown date"} ({fits})'
        return 'nominal calibration' if self.simulated else 'NOMINAL calibration (no file)'

    def not_active_reason(self) -> str:
        """Why commands and arming are refused, with the transition valid from this state."""
        state = self._state_machine.current_state[1]
        cmd = f'ros2 lifecycle set {self.get_fully_qualified_name()}'
        if state == 'unconfigured':
            return f'valve_driver is unconfigured; `{cmd} configure`, then `{cmd} activate`'
        if state == 'inactive':
            return f'valve_driver is inactive; `{cmd} activate` first'
        if state == 'finalized':
            return 'valve_driver is finalized (shut down): no transition leaves it; restart it'
        return f'valve_driver is {state}: wait for that transition to end, then try again'

    def _close_board(self, why: str) -> None:
        """Vent, close the port and stop the ticks (back to unconfigured)."""
        self.active = False
        acked = self.vent_and_close()
        self._report_armed()
        for timer in self._board_timers:
            self.destroy_timer(timer)
        self._board_timers.clear()
        if self._sub is not None:
            self.destroy_subscription(self._sub)
            self._sub = None
        self.board = None
        self.get_logger().info(
            f'{why}: vented ({"acknowledged" if acked else "not acknowledged"}), board closed'
        )

    @_serialised
    def _apply(self, cfg: DriverConfig) -> None:
        """A runtime parameter changed (already validated): the new limits hold from now on."""
        self.safety.configure(cfg.max_kpa, cfg.slew_rate_kpa_s, cfg.command_timeout_s)
        self.cal = cfg.calibration()
        self.cals = cfg.channel_calibrations(self.channels, self.rig_calibration)
        if self.board is not None:
            self.board.cal = self.cal  # the next tick clamps the output to a lower ceiling

    def _arm(self, now: float) -> None:
        """Arm the safety filter; the output restarts from 0 kPa (see `_restart_slew`)."""
        self.safety.arm(now)
        self.guard.arm()
        self._restart_slew()

    def _require_fresh_command(self, now: float) -> None:
        self.safety.require_fresh_command(now)
        self._restart_slew()

    def _restart_slew(self) -> None:
        """The next command's slew step counts from itself: none of the time before (inactive,
        disarmed, disconnected) is allowance, so the output rises from 0 kPa at the slew rate."""
        self._slew_t = None

    def _report_armed(self, rearmed: bool = False) -> None:
        """/valve/armed and the listeners, when the state changed or the driver (re)armed."""
        armed = self.active and self.safety.armed
        if armed == self._armed_reported and not rearmed:
            return
        self._armed_reported = armed
        for listener in self.armed_listeners:
            listener(armed)
        if self.context.ok():
            self.pub_armed.publish(Bool(data=armed))

    @property
    def valves_armed(self) -> bool:
        """Whether the valves follow the commands now (what /valve/armed said last)."""
        return bool(self._armed_reported)

    def _now(self) -> float:
        """s: the time of the safety decisions: sim time (the node clock) in lockstep, else the
        steady clock."""
        if self.lockstep:
            return self._clock_ns() * 1e-9
        return time.monotonic()

    def _slew_elapsed(self) -> float:
        """Time for the slew limit with the simulated board: the node clock (sim time). The
        reading also stamps the /valve/applied message of this step (`_send`)."""
        ns = self._clock_ns()
        t = ns * 1e-9
        elapsed = 0.0 if self._slew_t is None else max(0.0, t - self._slew_t)
        self._slew_t = t
        self._slew_stamp_ns = ns
        return elapsed

    # ----------------------------------------------------------------- commands and output
    @_serialised
    def _count_commanders(self) -> None:
        """The graph's publishers of /valve/command, by GID, to the guard (and in a composed or
        fused process, the ones outside it to the log and /diagnostics)."""
        infos = self.get_publishers_info_by_topic(VALVE_COMMAND.name)
        graph = {
            bytes(i.endpoint_gid): f'{i.node_namespace.rstrip("/")}/{i.node_name}' for i in infos
        }
        local = self.in_process_commanders
        if local is not None:
            outside = sorted(n for n in graph.values() if n not in local)
            if outside and outside != self.outside_commanders:
                self.get_logger().error(self._outside_note(outside))
            self.outside_commanders = outside
            # The in-process hand-off names its sender by node (no DDS GID): see sim_graph.
            graph = {n.encode(): n for n in graph.values() if n in local}
        if not self.subscribed:
            return
        if self.guard.publishers(graph) == 'lost':
            self._disarm_now()
            # WARN, not ERROR: a clean stop of the graph stops the controller before the driver.
            self.get_logger().warning(
                f'the commander left the ROS graph: disarmed, vented; call /valve_driver/arm to '
                f'accept a new one ({VALVE_COMMAND.name})'
            )
        self._report_conflict()

    def _report_conflict(self) -> None:
        """One ERROR each time the set of publishers that are not obeyed changes."""
        others = self.guard.others() if self.guard.conflict else []
        if others and others != self._others:
            self.get_logger().error(self.guard.reason())
        self._others = others

    def _disarm_now(self) -> None:
        now = self._now()
        self.safety.disarm()
        self._report_armed()
        self._send(self.safety.step(now, 0.0), now)  # a vent: no slew
        self._publish_diagnostics()

    def _outside_note(self, outside: list[str]) -> str:
        return (
            f'not obeyed: {len(outside)} publisher(s) of {VALVE_COMMAND.name} outside this '
            f'process ({", ".join(outside)}); here only '
            f'{", ".join(sorted(self.in_process_commanders or ()))} commands the valves (stop '
            'the other one)'
        )

    @_serialised
    def _on_topic_command(self, msg: Float64MultiArray, info) -> None:
        """/valve/command from the graph: only the commander is obeyed (CommanderGuard)."""
        gid = (info or {}).get('publisher_gid') or {}
        verdict = self.guard.heard(bytes(gid.get('data', b'')))
        if verdict == 'bound':
            self._count_commanders()  # its name, if the graph had not listed it yet
            self.get_logger().info(f'{COMMANDER_BOUND}{self.guard.commander_name}')
        if verdict in ('accept', 'bound'):
            self.on_command(msg)
        elif verdict == 'intruder':
            self._report_conflict()
            self.get_logger().error(self.guard.reason())  # at its first command, named
            self._publish_diagnostics()

    def on_command(self, msg: Float64MultiArray) -> None:
        self.on_pressures(msg.data)

    @_serialised
    def on_pressures(self, kpa: Sequence[float]) -> None:
        """One command (kPa per channel): through the safety filter to the board."""
        now = self._now()
        if not self.active or self.board is None:
            if now - self._last_warn_t > 1.0:
                self._last_warn_t = now
                self.get_logger().warning(f'command ignored: {self.not_active_reason()}')
            return
        self._check_reconnect(now)
        self._last_commanded = list(kpa)
        res = self.safety.command(kpa, now)
        if res.warnings and now - self._last_warn_t > 1.0:
            self._last_warn_t = now
            self.get_logger().warning('; '.join(res.warnings))
        if self.simulated:
            self._send(self.safety.step(now, self._slew_elapsed()), now, self._slew_stamp_ns)
        else:
            self._send(self.safety.step(now, None), now)

    @_serialised
    def rehearse(self, kpa: Sequence[float]) -> bytes:
        """The fused loop's rehearsal (control_loop): a command through a spare copy of the
        safety filter, the calibrations and the board's encoder, so that code is in the caches
        when the next frame's command comes; nothing is written and nothing of this driver
        changes. The frame that would have gone out."""
        if self.board is None:
            return b''
        spare = self._spare_safety
        if spare is None or spare[0] is not self.safety:
            spare = self._spare_safety = (self.safety, copy.deepcopy(self.safety))
        now = self._now()
        spare[1].command(kpa, now)
        out = spare[1].step(now, None)
        return self.board.rehearse(
            [cal.kpa_to_code(p) for cal, p in zip(self.cals, out, strict=True)]
        )

    def _check_reconnect(self, now: float) -> None:
        """After every (re)connect, vent until a command newer than the connect arrives."""
        if self.board is not None and self.board.generation != self._generation:
            self._generation = self.board.generation
            if self._generation > 1:
                self.get_logger().warning(
                    'DAC board reconnected: venting until a fresh command arrives'
                )
            self._require_fresh_command(now)
            self._last_sent = None

    def on_frame(self) -> None:
        """Lockstep: the tick, at a frame of the composed sim graph (its clock set to the frame's
        sim time), in place of the steady-clock timer."""
        self._tick()

    def _tick(self) -> None:
        """The tick; its read-back is published after the driver's lock is let go, so a frame
        of the fused control loop that arrives meanwhile waits for the safety filter's step, not
        for a publication (the only thread that publishes /valve/pressure is this one)."""
        readback = self._tick_locked()
        if readback is not None and self.out_pressure is not None and self.context.ok():
            self.out_pressure.write(*readback)

    @_serialised
    def _tick_locked(self):
        """The safety filter's step and its output; the read-back to publish (stamp ns, kPa), if
        a new one came."""
        board = self.board
        if board is None:
            return None
        now = self._now()
        self._check_reconnect(now)
        # The simulated board: the slew advances with the commands only (in sim time), so a tick
        # changes the output only when the safety layer vents.
        out = self.safety.step(now, 0.0 if self.simulated else None)
        codes = self._codes(out)
        if codes != self._last_sent or (
            board.needs_keepalive and now - self._last_send_t >= self.keepalive_s
        ):
            self._send(out, now)
        # What follows publishes only on a new read-back or a changed state, and a signal may
        # have shut ROS down already: the context is asked then, not at every tick.
        readback = None
        if (
            self.out_pressure is not None
            and board.measured_count != self._measured_count
            and board.measured_kpa
        ):
            if not self.context.ok():
                return None
            self._measured_count = board.measured_count
            at = getattr(board, 'measured_at', None)  # the read-back's own time, if known
            # In order after the previous read-back's stamp (see ordered_stamp_ns)
            ns = ordered_stamp_ns(self._stamp_ns(at), self._pressure_stamp_ns)
            self._pressure_stamp_ns = ns
            readback = (ns, [float(v) for v in board.measured_kpa])
        key = (
            board.state,
            self.safety.armed,
            self.safety.estopped,
            self.safety.watchdog_active,
            self.guard.conflict,
        )
        if key != self._diag_key and self.context.ok():
            self._report_armed()
            self._publish_diagnostics()
        return readback

    def _codes(self, kpa: Sequence[float]) -> list[int]:
        """Each channel's DAC code for its pressure, through that channel's calibration. The
        last answer is kept: each tick asks again for the output a command just set (every
        frame of the composed sim graph), and the calibrations cost more than the comparison."""
        cals, key = self.cals, list(kpa)
        memo = self._code_memo
        if memo is not None and memo[0] is cals and memo[1] == key:
            return memo[2]
        codes = [cal.kpa_to_code(p) for cal, p in zip(cals, key, strict=True)]
        self._code_memo = (cals, key, codes)
        return codes

    def _send(self, out_kpa: list[float], now: float, stamp_ns: int | None = None) -> None:
        """Write the pressures; /valve/applied is stamped at the instant the output was decided
        (the slew limit's own clock reading, or `now` on the steady clock), not when it is
        published, so a preemption between the two cannot make a ramp look steeper than it was."""
        if self.board is None:
            return
        codes = [0] * len(self.channels) if self._closing else self._codes(out_kpa)
        seq = self.board.send_codes(codes)
        if seq is not None and not self.simulated:  # written: the fused loop's latency ends here
            self.last_write_ns = time.perf_counter_ns()
            self.last_write_cpu_ns = time.thread_time_ns()
        self._last_sent = codes
        self._last_send_t = now
        applied = (
            [cal.code_to_kpa(c) for cal, c in zip(self.cals, codes, strict=True)]
            if seq is not None
            else [0.0] * len(self.channels)
        )
        self._applied(applied, stamp_ns, None if self.lockstep else now)

    def _applied(self, kpa: list[float], stamp_ns: int | None, taken_at: float | None) -> None:
        """The pressures now applied: to the listeners, then on /valve/applied stamped
        `stamp_ns`, else by `_stamp_ns(taken_at)`."""
        for listener in self.applied_listeners:
            listener(kpa)
        try:
            self.out_applied.write(self._stamp_ns(taken_at) if stamp_ns is None else stamp_ns, kpa)
        except RuntimeError:  # rclpy's RCLError or InvalidHandle: the serial side still runs
            if self.context.ok():  # asked only then: a signal may have shut ROS down already
                raise

    def _stamp_ns(self, taken_at: float | None = None) -> int:
        """Now on the node clock (sim time in the sim graph: the frame it answers), less the
        age of a read-back taken at monotonic time `taken_at`. The age is measured right beside
        the clock reading, so a preemption before it cannot move the stamp later (that put
        successive /valve/pressure stamps out of order under load)."""
        ns = self._clock_ns()
        # a steady-clock age comes off a node clock that runs with it, not off sim time
        if taken_at is not None and not getattr(self.get_clock(), 'ros_time_is_active', False):
            age_s = time.monotonic() - taken_at
            if age_s > 0.0:
                ns = max(0, ns - int(age_s * 1e9))
        return ns

    # ----------------------------------------------------------------- services
    @_serialised
    def _srv_arm(self, request, response):
        now = self._now()
        if not self.active or self.board is None:
            response.success = False
            response.message = f'not armed: {self.not_active_reason()}'
            self.get_logger().error(response.message)
            return response
        if self.subscribed:
            self._count_commanders()
            refusal = self.guard.arm_refusal()
            if self.outside_commanders and not refusal:
                refusal = f'refused to arm: {self._outside_note(self.outside_commanders)}'
            if refusal:
                response.success = False
                response.message = refusal
                self.get_logger().error(refusal)
                self._publish_diagnostics()
                return response
        self._arm(now)
        self._send(self.safety.step(now, 0.0), now)  # a vent: no slew
        self._report_armed(rearmed=True)
        link = (
            'board connected'
            if self.board.connected
            else f'WARNING: board not connected ({self.board.last_error or self.board.state})'
        )
        response.success = True
        response.message = f'armed; output stays 0 kPa until the next command ({link})'
        self.get_logger().info(response.message)
        self._publish_diagnostics()
        return response

    @_serialised
    def _srv_disarm(self, request, response):
        now = self._now()
        self.safety.disarm()
        self._send(self.safety.step(now, 0.0), now)  # a vent: no slew
        self._report_armed()
        response.success = True
        response.message = 'disarmed: all channels vented to 0 kPa'
        self.get_logger().info(response.message)
        self._publish_diagnostics()
        return response

    @_serialised
    def _srv_estop(self, request, response):
        now = self._now()
        self.safety.estop()
        self._send(self.safety.step(now, 0.0), now)  # a vent: no slew
        self._report_armed()
        response.success = True
        response.message = (
            'EMERGENCY STOP latched: all channels vented to 0 kPa; call /valve_driver/arm to re-arm'
        )
        self.get_logger().error(response.message)
        self._publish_diagnostics()
        return response

    @_serialised
    def _srv_hand_over(self, request, response):
        """The commander's process has exited (its supervisor saw it end): forget it now, not
        after its DDS lease; disarmed until the next arm, which binds the next lone publisher."""
        name = self.guard.hand_over()
        self._disarm_now()
        response.success = True
        response.message = (
            f'commander {name or "(none)"} forgotten: disarmed, vented; call /valve_driver/arm '
            'to accept the next one'
        )
        self.get_logger().warning(response.message)
        return response

    # ----------------------------------------------------------------- diagnostics
    def _link_log(self, level: str, text: str) -> None:
        # rclpy requires one severity per call site, hence one call per level.
        if level == 'error':
            self.get_logger().error(text)
        elif level == 'warn':
            self.get_logger().warning(text)
        else:
            self.get_logger().info(text)

    def _publish_diagnostics(self) -> None:
        lk = self.board
        if lk is None or not self.context.ok():
            return
        s, st = self.safety, lk.stats
        self._diag_key = (lk.state, s.armed, s.estopped, s.watchdog_active, self.guard.conflict)
        if s.estopped:
            level, message = Level.ERROR, 'EMERGENCY STOP latched (vented)'
        elif self.guard.conflict:
            level, message = Level.ERROR, self.guard.reason()
        elif lk.state != 'connected':
            level, message = Level.ERROR, f'DAC board {lk.state}: {lk.last_error}'
        elif not self.active:
            level, message = Level.OK, 'inactive (vented); activate to accept commands'
        elif not s.armed:
            level, message = Level.OK, 'disarmed (vented); call /valve_driver/arm'
        elif s.watchdog_active:
            level, message = Level.WARN, 'command watchdog tripped: vented'
        else:
            level, message = Level.OK, 'armed'
        outside = self.outside_commanders
        if outside and level < Level.ERROR:
            level, message = Level.ERROR, self._outside_note(outside)
        elif outside:
            message = f'{message}; {self._outside_note(outside)}'
        lat = lk.latency_percentiles_ms()
        info = lk.info
        values = {
            'link': lk.state,
            'port': lk.port,
            'last_error': lk.last_error,
            'firmware': '.'.join(map(str, info.firmware)) if info else '',
            'board_watchdog_ms': str(info.watchdog_ms) if info else '',
            'armed': str(s.armed).lower(),
            'estopped': str(s.estopped).lower(),
            'watchdog_active': str(s.watchdog_active).lower(),
            'watchdog_trips': str(s.watchdog_trips),
            'board_watchdog_vents': str(st.board_watchdog_vents),
            'board_bad_frame_vents': str(st.board_bad_frame_vents),
            'frames_sent': str(st.frames_sent),
            'set_encoder': lk.set_encoder,
            'acks': str(st.acks),
            'naks': str(sum(st.naks.values())),
            'nak_reasons': ','.join(f'{k}={v}' for k, v in sorted(st.naks.items())),
            'ack_timeouts': str(st.ack_timeouts),
            'rx_rejected': str(st.rx_rejected),
            'ack_latency_p50_ms': f'{lat["p50"]:.3f}' if lat else '',
            'ack_latency_max_ms': f'{lat["max"]:.3f}' if lat else '',
            'reconnects': str(st.reconnects),
            'connect_failures': str(st.connect_failures),
            'saturations': str(s.saturation_count),
            'nonfinite_commands': str(s.nonfinite_count),
            'rejected_commands': str(s.rejected_count),
            'command_publishers': str(self.guard.graph_publishers),
            'commander': self.guard.commander_name,
            'commander_conflicts': str(self.guard.conflicts),
            'commands_ignored_conflict': str(self.guard.ignored),
            'outside_command_publishers': ','.join(outside),
            'commanded_kpa': ','.join(f'{v:.3f}' for v in self._last_commanded),
            'output_kpa': ','.join(f'{v:.3f}' for v in s.output),
            'board_codes': ','.join(map(str, lk.board_codes or [])),
            'measured_kpa': ','.join(f'{v:.3f}' for v in (lk.measured_kpa or [])),
        }
        self.diagnostics.publish(level, message, values)

    # ----------------------------------------------------------------- shutdown
    def vent_and_close(self) -> bool:
        """Vent every channel and close the port; safe to call more than once."""
        self._closing = True
        self.safety.disarm()
        if self.board is None:
            return True  # unconfigured: the port is closed (the board vents by its watchdog)
        acked = self.board.vent_and_close(self.shutdown_ack_timeout_s)
        if acked:
            self._applied([0.0] * len(self.channels), None, None)
        return acked


def vent_on_exit(node: ValveDriver) -> None:
    opened = node.board is not None
    acked = node.vent_and_close()
    if not opened:
        print('valve_driver: stopped before configure (the board was never opened)', flush=True)
        return
    print(
        'valve_driver: vented on shutdown ('
        + ('acknowledged' if acked else 'NOT acknowledged: board unreachable, its watchdog vents')
        + ')',
        flush=True,
    )


def valve_driver() -> ValveDriver:
    """The node; taken to active here only with `autostart: true` (else by launch/supervisor)."""
    node = ValveDriver()
    if node.params.config.autostart:
        bring_up(node)
    return node


def main(args=None) -> int:
    return run_node(
        valve_driver,
        args,
        close=vent_on_exit,
        config_hint='Fix config/valve.yaml or the --ros-args overrides.',
    )


if __name__ == '__main__':
    sys.exit(main())
