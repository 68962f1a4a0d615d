"""controller node: one valve command per /joint_states message (the mocap frame clocks the loop).

A thin adapter around `step.ControlStep` (the one control cycle): messages and parameters in,
`/valve/command` and `/diagnostics` out. The controller (parameter `controller`: pid | mpc |
sampling | open_loop) and its settings come from config dataclasses (`controllers.kinds()`,
`supervisor.SafetyConfig`) through equimus_ros.params; the guard range, stale timeout, p_max and
the PID gains follow `ros2 param set`, everything else is read-only. The model-based controllers
get their plant model from the `equimus.plant_models` entry point (equimus_sim registers it).
Each time the valve driver (re)arms (/valve/armed true) the controller starts afresh
(`ControlStep.reset`): what it integrated while the valves were vented never reaches them.

The stale-state guard's clock: the steady clock, checked by a 20 Hz timer (the rig, the split
graph, the fused loop: a state that stops coming is noticed in wall seconds, also under a paused
/clock). In the composed sim graph (`lockstep=True`) the simulator owns time: a guard on the wall
clock would vent whenever the process gets its CPU late, and a vent resets the controller, so
every later command would differ from run to run. There the guard runs on the node clock (sim
time) and the graph calls `on_frame()` at each frame after the first: it vents when no valid
state came for stale_timeout of sim time, at the same frame in every run.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from rclpy.clock import Clock, ClockType, ROSClock
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray

from equimus_description.config import with_check
from equimus_description.interface import (
    DIAGNOSTICS,
    JOINT_STATES,
    REFERENCE,
    REFERENCE_PREVIEW,
    VALVE_ARMED,
    VALVE_COMMAND,
)
from equimus_description.leg import load_leg
from equimus_description.statics import StaticParams
from equimus_ros.arrays import float_array
from equimus_ros.cdr import ArrayWriter
from equimus_ros.clocks import time_reader
from equimus_ros.diagnostics import Diagnostics, Level
from equimus_ros.executors import timer_callback
from equimus_ros.main import run_node
from equimus_ros.params import bind
from equimus_ros.qos import publisher, subscription

from .controllers import (
    ControllerChoice,
    build_limb_controller,
    controller_kind,
    is_rig_leg,
)
from .pid import PIDGains, check_joint_count
from .plant import plant_factory
from .step import Command, ControlStep, stamp_seconds
from .supervisor import SafetyConfig, check_joints

#: logged once the commands follow the reference (`rig_session` arms a phase on it)
FOLLOWING = 'following the reference'
STALE_CHECK_S = 0.05  # s, steady-clock period of the stale-state guard (not in lockstep)
DIAG_PERIOD_S = 1.0


class ControllerNode(Node):
    """`subscribe_state=False`, `subscribe_armed=False` and `downstream` are for the fused control
    loop: states and the driver's armed state come by call (`on_joints`, `on_valves_armed`) and
    each command's pressures go to `downstream` before its message is built and published. The
    node's lock makes those calls safe from another thread than the executor's. `lockstep=True`
    is for the composed sim graph: the stale-state guard runs on sim time, called by the graph
    (`on_frame`), not by a steady-clock timer (see the module docstring), and `frame_time` is
    the graph's frame time, read in place of the node clock (equimus_ros.clocks)."""

    def __init__(
        self,
        subscribe_state: bool = True,
        downstream: Callable[[list[float]], None] | None = None,
        subscribe_armed: bool = True,
        lockstep: bool = False,
        frame_time: Callable[[], int] | None = None,
    ) -> None:
        super().__init__('controller')
        self.downstream = downstream
        self._lock = threading.Lock()
        choice = bind(self, ControllerChoice()).config
        kind = controller_kind(choice.controller)
        leg = load_leg(
            choice.leg_description or None,
            choice.leg_overrides or None,
            parameter_set=choice.leg_parameter_set or None,
        )
        rig_leg = is_rig_leg(leg)
        params = StaticParams.from_leg(leg, pressure_sign=choice.pressure_sign) if rig_leg else None
        safety = bind(self, SafetyConfig(), apply=self._apply_safety)
        settings = bind(
            self,
            kind.config(),
            prefix=kind.prefix,
            apply=self._apply_controller if kind.apply is not None else None,
        )
        self._kind_apply = kind.apply
        t0 = time.perf_counter()
        if params is not None:
            controller = kind.build(
                settings.config, params, leg, lambda: plant_factory(choice.plant_model)
            )
        else:
            controller = build_limb_controller(
                choice.controller, settings.config, leg, choice.pressure_sign
            )
        self.get_logger().info(
            f'{choice.controller} controller ready in {time.perf_counter() - t0:.1f} s'
        )
        self.kind = choice.controller
        # One value per joint, checked on every later `ros2 param set` too.
        n = len(leg.joints)
        safety.config = with_check(safety.config, lambda c: check_joints(c, n))
        if isinstance(settings.config, PIDGains):
            settings.config = with_check(settings.config, lambda c: check_joint_count(c, n))
        self.actuator_names = list(leg.actuators)
        self.layout = ','.join(self.actuator_names)
        self.step = ControlStep(
            controller, safety.config, n_joints=len(leg.joints), n_valves=len(leg.actuators)
        )
        self._spare: tuple[ControlStep, ControlStep] | None = None  # (its original, `rehearse`'s)
        self.compute: collections.deque[float] = collections.deque(
            maxlen=1000
        )  # recent cycles only
        #: s each recent state was old when its command went out (wall-clock graphs only)
        self.state_age: collections.deque[float] = collections.deque(maxlen=1000)
        clock = self.get_clock()
        self.ros_clock = clock if isinstance(clock, ROSClock) else None  # sim time: no ages
        self.cycles = 0
        self.states_heard = 0  # joint states received, valid or not
        self.subscribe_state = subscribe_state
        self.saturated = np.zeros(len(self.actuator_names), int)
        self.last_reason: str | None = None
        self.valves_armed: bool | None = None  # None: no word from the valve driver yet
        # Said once, in a graph of separate processes: discovery can hold a new node's inputs
        # back for seconds, and a commander armed before it has them holds the leg where it is.
        self.following = lockstep
        self.arm_resets = 0
        self.pub = publisher(self, Float64MultiArray, VALVE_COMMAND)
        self.out = ArrayWriter(self.pub, float_array([0.0] * len(self.actuator_names), self.layout))
        self.diagnostics = Diagnostics(self, DIAGNOSTICS, 'controller', hardware_id=self.kind)
        if subscribe_state:
            subscription(self, JointState, JOINT_STATES, self.on_state)
        subscription(self, JointState, REFERENCE, self._on_ref)
        subscription(self, Float64MultiArray, REFERENCE_PREVIEW, self._on_preview)
        if subscribe_armed:
            subscription(self, Bool, VALVE_ARMED, lambda m: self.on_valves_armed(m.data))
        self.steady = Clock(clock_type=ClockType.STEADY_TIME)
        # The guard's clock in lockstep: sim time (the graph's frame time, else this node's
        # clock); off lockstep the steady clock (`_now`).
        self.sim_ns = time_reader(self.get_clock(), frame_time)
        self.lockstep = lockstep
        if not lockstep:
            self.create_timer(STALE_CHECK_S, timer_callback(self._stale_check), clock=self.steady)
        self.create_timer(DIAG_PERIOD_S, timer_callback(self._diag), clock=self.steady)

    # ----- parameters ------------------------------------------------------------------------
    def _apply_safety(self, cfg: SafetyConfig) -> None:
        with self._lock:
            self.step.reconfigure(cfg)

    def _apply_controller(self, cfg: Any) -> None:
        assert self._kind_apply is not None
        with self._lock:
            self._kind_apply(self.step.controller, cfg)

    # ----- the cycle ---------------------------------------------------------------------------
    def _now(self) -> float:
        """s on the guard's clock; off lockstep read as time.monotonic(), the same
        CLOCK_MONOTONIC as rcl's steady clock without a Time object every cycle."""
        if self.lockstep:
            return self.sim_ns() * 1e-9
        return time.monotonic()

    def _on_ref(self, msg: JointState) -> None:
        stamp = msg.header.stamp
        self.on_reference(stamp.sec * 1_000_000_000 + stamp.nanosec, msg.position, msg.velocity)

    def on_reference(
        self, stamp_ns: int, position: Sequence[float], velocity: Sequence[float]
    ) -> None:
        """A reference sample: from /reference/joint, or by call in the composed sim graph."""
        with self._lock:
            self.step.set_reference(
                position, velocity, stamp_seconds(*divmod(stamp_ns, 1_000_000_000))
            )

    def _on_preview(self, msg: Float64MultiArray) -> None:
        n, dims = self.step.n, msg.layout.dim
        cols = 1 + 2 * n
        rows = np.asarray(msg.data, float)
        ok = len(dims) == 2 and dims[1].size == cols and rows.size == dims[0].size * cols
        self.on_preview(rows.reshape(-1, cols) if ok else None)

    def on_preview(self, rows: np.ndarray | None) -> None:
        """The reference's own future, rows (t, angles, velocities): from /reference/preview,
        or by call in the composed sim graph; ControlStep.set_preview ignores a malformed one
        (None: one whose layout was not rows of that many columns)."""
        n = self.step.n
        cols = 1 + 2 * n
        with self._lock:
            ok = (
                rows is not None
                and rows.ndim == 2
                and rows.shape[1] == cols
                and self.step.set_preview(rows[:, 0], rows[:, 1 : 1 + n], rows[:, 1 + n :])
            )
            if not ok:
                self.get_logger().warning(
                    f'a /reference/preview that is not rows of {cols} columns (t, {n} angles, '
                    f'{n} velocities), ascending in t and finite: ignored',
                    throttle_duration_sec=5.0,
                )

    def on_valves_armed(self, armed: bool) -> None:
        """The valve driver's armed state; at each arm the controller starts afresh."""
        with self._lock:
            self.valves_armed = bool(armed)
            if armed:
                self.step.reset()
                self.arm_resets += 1
        if armed:
            self.get_logger().info('valves armed: controller state reset')
        self._diag()

    def on_state(self, msg: JointState) -> None:
        """A joint state from /joint_states (the split graph)."""
        self.on_joints(
            msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec,
            msg.position,
            msg.velocity,
        )

    def on_joints(
        self, stamp_ns: int, position: Sequence[float], velocity: Sequence[float]
    ) -> None:
        """One control cycle: a joint state (stamped on the node clock) -> one valve command."""
        t0 = time.perf_counter()
        self.states_heard += 1
        with self._lock:
            t = stamp_seconds(*divmod(stamp_ns, 1_000_000_000))
            cmd = self.step.step(position, velocity, t, self._now())
        self._publish(cmd)
        if not cmd.vented and not self.following:
            self._announce_following()
        if not cmd.vented:
            self.cycles += 1
            self.saturated += cmd.saturated
            self.compute.append(time.perf_counter() - t0)
            # wall stamps only (never in lockstep, whose stamps are sim time)
            if not self.lockstep and (
                self.ros_clock is None or not self.ros_clock.ros_time_is_active
            ):
                self.state_age.append(time.time() - stamp_ns * 1e-9)
        self._reason_changed()

    def rehearse(
        self, stamp: float, position: Sequence[float], velocity: Sequence[float]
    ) -> list[float]:
        """The fused loop's rehearsal (control_loop): the control step for this state on a
        spare copy of the step, following this one's reference, so its code is in the caches
        when the next frame's state comes; nothing of this node changes, nothing is sent. The
        pressures the copy would command."""
        with self._lock:
            spare = self._spare
            if spare is None or spare[0] is not self.step:
                spare = self._spare = (self.step, self.step.spare())
            spare[1].follow(self.step)
        return spare[1].step(position, velocity, stamp, self._now()).pressures.tolist()

    def _announce_following(self) -> None:
        """Log FOLLOWING once the commands follow a reference received (and its preview, when
        a reference node publishes one), not the hold of the leg where it is."""
        step = self.step
        if step.ref_stamp is None:
            return
        if not step.previewed and self.count_publishers(REFERENCE_PREVIEW.name) > 0:
            return
        self.following = True
        preview = 'with its preview' if step.previewed else 'without a preview'
        self.get_logger().info(f'{FOLLOWING} ({preview})')

    def on_frame(self) -> None:
        """Lockstep: the stale-state guard at a frame of the composed sim graph (its clock set to
        the frame's sim time), before the frame's state arrives."""
        self._stale_check()

    def _stale_check(self) -> None:
        with self._lock:
            cmd = self.step.check_stale(self._now())
        if cmd is not None:
            self._publish(cmd)
            self._reason_changed()

    def _publish(self, cmd: Command) -> None:
        pressures = cmd.pressures.tolist()
        if self.downstream is not None:  # before the message is built
            self.downstream(pressures)
        try:
            self.out.write(pressures)
        except RuntimeError:  # rclpy's RCLError or InvalidHandle
            if self.context.ok():  # asked only then: a signal may have shut ROS down already
                raise

    # ----- diagnostics -------------------------------------------------------------------------
    def _reason_changed(self) -> None:
        sup = self.step.supervisor
        if sup.reason != self.last_reason:
            self.last_reason = sup.reason
            if sup.venting:
                self.get_logger().warning(f'venting: {sup.reason}{self._unheard()}')
            self._diag()

    def _unheard(self) -> str:
        """What a stale state with nothing ever received says about the input: a state that
        never came from a graph with no estimator, or one whose messages do not reach this node
        (discovery has not matched it, or the transport loses them)."""
        if not (self.subscribe_state and self.states_heard == 0):
            return ''
        if not self.step.supervisor.reason.startswith('stale'):
            return ''
        n = self.count_publishers(JOINT_STATES.name)
        if n == 0:
            return f'; nothing publishes {JOINT_STATES.name} yet: is the estimator running?'
        return (
            f'; {JOINT_STATES.name} has {n} publisher(s) but none of their messages has arrived '
            'yet (discovery still matching, or the transport losing them)'
        )

    def _diag(self) -> None:
        sup = self.step.supervisor
        level = Level.ERROR if sup.venting else (Level.WARN if self.saturated.any() else Level.OK)
        self.diagnostics.publish(
            level,
            f'venting: {sup.reason}' if sup.venting else 'controlling',
            {
                'controller': self.kind,
                'cycles': self.cycles,
                'joint_states_heard': self.states_heard,
                **{
                    f'saturated_cycles_{a}': int(n)
                    for a, n in zip(self.actuator_names, self.saturated, strict=True)
                },
                'trips_joint_limit': sup.trips['joint_limit'],
                'trips_invalid': sup.trips['invalid'],
                'trips_stale': sup.trips['stale'],
                'p_max_kpa': f'{sup.cfg.p_max:g}',
                'valves_armed': 'unknown'
                if self.valves_armed is None
                else str(self.valves_armed).lower(),
                'arm_resets': self.arm_resets,
                'reference_preview': 'on' if self.step.previewed else 'off',
                **_percentiles_ms('compute', self.compute),
                **_percentiles_ms('state_age', self.state_age),
            },
        )


def _percentiles_ms(name: str, seconds: collections.deque[float]) -> dict[str, str]:
    """`name`_p50_ms and _p99_ms of recent values in s, for /diagnostics ('nan' for none)."""
    if not seconds:
        return {f'{name}_p{q}_ms': 'nan' for q in (50, 99)}
    p50, p99 = np.percentile(np.array(seconds) * 1e3, (50, 99))  # one call: numpy's is costly
    return {f'{name}_p50_ms': f'{p50:.3f}', f'{name}_p99_ms': f'{p99:.3f}'}


def main(args: Any = None) -> int:
    return run_node(
        ControllerNode, args, config_hint='Fix config/control.yaml or the --ros-args overrides.'
    )


if __name__ == '__main__':
    sys.exit(main())
