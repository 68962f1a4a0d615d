"""sim_graph: the simulation graph composed in one process, lockstep by direct calls.

    ros2 launch equimus_bringup sim.launch.py                 # composed:=true is the default
    ros2 launch equimus_bringup sim.launch.py composed:=false # one process per node

The same nodes as the split sim graph (sim, valve_driver on its simulated board, estimator,
controller, reference, state_publisher and, with record:=true, recorder; same names, parameters,
services and topics) under one executor, plus a small `sim_graph` node that reports the
hand-off. A frame runs in a fixed order by direct calls with plain values, as the fused control
loop does for the rig, with no executor wake-up and no DDS hop:

    sim frame -> SimGraph.frame_started: its time kept for the lockstep nodes (FrameTime); the
    driver's watchdog, the controller's stale-state guard, the reference's tick (all on sim
    time; the sample and its preview to the controller) -> the mocap poses (SimGraph.poses)
    -> estimator -> controller (its ControlStep) -> valve driver (its SafetyFilter) -> the
    simulated valves (the next frame's pressures); the joint state and the poses to the state
    publisher

Each node still publishes every message it would publish alone, after it has passed the values
on, pre-serialised (equimus_ros.cdr's writers) where the message changes every frame. rclpy has
no intra-process transport, so `InProcessBus` plays its part (what rclcpp's intra-process
communication does in a component container): every publisher of these nodes is routed through
it; a message is kept for the recorder in this process with the frame's sim time (handed to the
bag writer every FLUSH_FRAMES frames) and published on DDS only while a subscriber outside the
process exists (checked every `outside_check_period` wall seconds), so `ros2 topic echo` and
other tools see the usual graph. A subscription of these nodes to a topic published here is
served by the bus (`attach`), or by the direct calls above for what a frame carries. Why: the
split graph spends its time in DDS hops and executor wake-ups, and the composed one did in
message objects passed between its nodes (docs/benchmarks.md, issues 13 and 30). The order
also makes a run deterministic: the same seed, configuration and reference give byte-identical
bag payloads (tests/bringup/test_sim_graph.py), on an idle machine as with every core busy.

The rule that keeps it so: the simulator owns time, so in this graph every decision that can
change a message is made on sim time or by the frame sequence (the valve driver and the
controller run with `lockstep=True`; the reference is ticked by the frames), never by a timer on
the wall clock, whose lateness depends on the machine's load. Wall-clock timers remain only where
they change nothing but /diagnostics, /rosout and what goes on DDS (rates, the graph's publishers,
the bag's flushes, /clock repeats while paused). While paused nothing runs on sim time, so nothing
vents: nothing physical moves either.

Topics published in this process are delivered inside it only: an outside publisher on, for
example, /valve/command is not heard by the composed valve driver, which names it on
/diagnostics (docs/reliability.md, "One commander").
"""

from __future__ import annotations

import collections
import dataclasses
import math
import sys
import threading
import time
from collections.abc import Callable
from itertools import islice, repeat
from typing import Any

from rclpy.clock import Clock as RosClock
from rclpy.clock import ClockType
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from rclpy.serialization import deserialize_message, serialize_message
from rclpy.subscription import Subscription
from rclpy.time import Time
from rclpy.time_source import TimeSource
from std_msgs.msg import Bool

from equimus_bringup.bag_process import BagWriterProcess
from equimus_bringup.graph import SPEED_PREFIX
from equimus_control.controller_node import ControllerNode
from equimus_control.estimator_node import EstimatorNode
from equimus_control.reference_node import ReferenceNode
from equimus_description.config import param, validate_fields
from equimus_description.interface import (
    CLOCK,
    DIAGNOSTICS,
    FRAME_MOCAP,
    JOINT_STATES,
    REFERENCE,
    REFERENCE_PREVIEW,
    VALVE_APPLIED,
    mocap_pose,
)
from equimus_hw.valve.driver_node import ValveDriver, vent_on_exit
from equimus_record.recorder_node import Recorder, qos_dicts
from equimus_ros.cdr import MessageEncoder
from equimus_ros.clocks import FrameTime
from equimus_ros.diagnostics import Diagnostics, Level
from equimus_ros.executors import timer_callback
from equimus_ros.lifecycle import bring_up
from equimus_ros.main import run_node
from equimus_ros.params import bind
from equimus_ros.qos import TolerantPublisher
from equimus_sim.sim_node import SimNode
from equimus_tf.state_publisher import StatePublisher

PAUSED_CLOCK_PERIOD_S = 0.5  # wall s between /clock repeats on DDS while paused
#: Frames whose messages go to the bag writer in one call (0.1 sim s at 120 Hz); a pause and
#: the end of the run hand over what is left.
FLUSH_FRAMES = 12
#: Frames between two readings of the process's CPU time for the speed report: a reading walks
#: every thread of the process (rclpy's and the middleware's), about 18 µs of a frame's
#: ~330 when it was taken every frame (py-spy).
CPU_SAMPLE_FRAMES = 60
#: Frames between two settings of the nodes' clocks (0.1 sim s at 120 Hz; also at every frame
#: while paused, at the frame it pauses at and when time goes back). The lockstep nodes read the
#: frame's time from the graph (`FrameTime`), so the clocks serve only their timers (1 s
#: diagnostics) and the stamps of /diagnostics and /rosout. Set every frame, the seven clocks
#: cost a frame about 60 µs of CPU, half of it in the executor's timer thread that each setting
#: wakes (docs/benchmarks.md, issue 30).
CLOCK_FRAMES = 12


@dataclasses.dataclass(frozen=True)
class SimGraphConfig:
    """Parameters of the `sim_graph` node (the composition itself)."""

    record: bool = param(False, 'also run the recorder in this process (record:=true)')
    outside_check_period: float = param(
        0.5,
        'wall s between checks for subscribers outside this process; a topic without one is '
        'not published on DDS',
        range=(0.01, 60.0),
    )

    outside_clock_period: float = param(
        0.01,
        'wall s between /clock messages on DDS for subscribers outside this process (every '
        'frame is delivered inside it and recorded); 0 = every frame',
        range=(0.0, 1.0),
    )

    def __post_init__(self) -> None:
        validate_fields(self)


def type_name(msg_type: type) -> str:
    """'std_msgs/msg/Float64MultiArray' of a generated message class."""
    return f'{msg_type.__module__.split(".")[0]}/msg/{msg_type.__name__}'


class _Route:
    """One publisher's `publish`, replaced: record, deliver in process, DDS if needed."""

    def __init__(self, bus: InProcessBus, pub: Any, node: Node) -> None:
        self.bus = bus
        self.pub = pub
        self.topic: str = pub.topic_name
        self.msg_type = pub.msg_type
        self.dds_publish: Callable[[Any], None] = pub.publish
        if isinstance(pub, TolerantPublisher):  # its refusals counted by the bus, not warned
            pub.on_refused = lambda line: bus.dds_refused(self.topic, line, time.monotonic())
        self.refused: Callable[[], int] = lambda: getattr(pub, 'refused', 0)
        self.encode = MessageEncoder(self.msg_type).encode  # for the bag: 2-5x rclpy's speed
        self.local: list[tuple[Callable[..., None], bool]] = bus.subscribers.setdefault(
            self.topic, []
        )
        # What a callback taking message info gets: a sender id per publishing node, as the
        # publisher gid of a DDS delivery (the valve driver's one-commander guard reads it).
        self.info = {'publisher_gid': {'data': node.get_fully_qualified_name().encode()}}
        self.outside = True  # a subscriber outside this process (InProcessBus.check_outside)
        self.dds_period = 0.0  # wall s between DDS publishes (the /clock route: see SimGraph)
        self.next_dds = 0.0
        #: whether `last` keeps the last message (the /clock route's, sent again while paused:
        #: SimGraph); such a route always takes the whole path of `publish`
        self.keep_last = False
        self.last: Any = None

    def choose(self) -> None:
        """The publisher's `publish`: straight into the bag's queue where that is all a message
        needs (recording; no subscriber in this process, none outside, nothing kept), else this
        route's `publish`. Chosen again whenever one of those changes (InProcessBus.rewire)."""
        pending = self.bus.pending
        if pending is None or self.local or self.outside or self.keep_last:
            self.pub.publish = self.publish
        else:
            self.pub.publish = _queue(pending.append, self.topic, self.encode)

    def publish(self, msg: Any) -> None:
        bus = self.bus
        self.last = msg
        raw = isinstance(msg, bytes)
        pending = bus.pending
        if pending is not None:  # recording: logged at the frame's sim time (InProcessBus.flush)
            pending.append((self.topic, msg if raw else self.encode(msg)))
        else:  # counted by the flush when recording
            bus.handed_off += 1
        if self.local:
            obj = deserialize_message(msg, self.msg_type) if raw else msg
            for callback, with_info in self.local:
                if with_info:
                    callback(obj, self.info)
                else:
                    callback(obj)
        if self.outside:
            self._to_dds(msg)

    def _to_dds(self, msg: Any) -> None:
        """The DDS copy for subscribers outside the process, at most every `dds_period`."""
        bus, now = self.bus, time.monotonic()
        if now >= self.next_dds:
            self.next_dds = now + self.dds_period
            refused = self.refused()
            try:
                self.dds_publish(msg)
            except _rclpy.RCLError as exc:  # a plain rclpy publisher's (any rcl error: the
                # message was delivered in the process already)
                bus.dds_refused(self.topic, str(exc).splitlines()[0], now)
            else:
                if self.refused() == refused:
                    bus.dds_published += 1


def _queue(append: Callable[[Any], None], topic: str, encode: Callable[[Any], bytes]):
    """A routed publisher's `publish` that only queues the message for the bag (_Route.choose):
    bytes from the packed writers as they are, a message object encoded."""

    def publish(msg: Any) -> None:
        append((topic, msg if msg.__class__ is bytes else encode(msg)))

    return publish


class InProcessBus:
    """In-process hand-off between nodes of one process (see the module docstring)."""

    #: s between two warnings about refused DDS publications (one a second at most)
    WARN_PERIOD_S = 1.0

    def __init__(
        self,
        recorder: Recorder | None,
        outside_check_period: float = 0.5,
        frame_time: FrameTime | None = None,
    ) -> None:
        self.recorder = recorder
        self.outside_check_period = outside_check_period
        # topic -> (callback, whether it takes message info as its second argument)
        self.subscribers: dict[str, list[tuple[Callable[..., None], bool]]] = {}
        self.routes: list[_Route] = []
        self.handed_off = 0  # messages routed (those recorded counted at each flush)
        self.dds_published = 0
        self.dds_failed = 0
        self.failure = ''  # the last refused DDS publication (for /diagnostics)
        self.warn: Callable[[str], object] = print
        self._warned_at: float = -math.inf
        # Sim time of the current frame: the log time of what it records, and "now" for the
        # lockstep nodes given it.
        self.time = frame_time if frame_time is not None else FrameTime()
        self._since_clocks = CLOCK_FRAMES  # frames since the clocks were set: the first sets them
        self.time_sources: list[TimeSource] = []
        #: What is kept for the bag, in the order published: (topic, bytes), and at each frame
        #: its sim time (an int), the log time of what follows it. Appended by any thread
        #: without a lock (a deque's append and popleft are atomic; a lock a message cost the
        #: frame more than the encoding), taken by `flush`: log times never go back between
        #: frames, whichever thread published.
        self.pending: collections.deque[int | tuple[str, bytes]] | None = (
            None if recorder is None else collections.deque()
        )
        self._log_ns = self.time.ns  # the log time of what precedes the first frame's time
        # One flush at a time (the frames' and a paused graph's timer), each in order.
        self._flush_lock = threading.Lock()
        self._unflushed = 0  # frames since the last flush
        self._next_outside_check = 0.0  # monotonic s

    def dds_refused(self, topic: str, first_line: str, now: float) -> None:
        """The DDS copy for outside subscribers was refused (Fast DDS: "cannot publish data",
        seen when an outside reliable reader fell behind on a loaded machine). The frame has been
        recorded and delivered in this process already, so the graph runs on; counted on
        /diagnostics and warned about at most once a second."""
        self.dds_failed += 1
        self.failure = f'{topic}: {first_line}'
        if now - self._warned_at >= self.WARN_PERIOD_S:
            self._warned_at = now
            self.warn(
                f'{self.dds_failed} publication(s) to outside subscribers refused by DDS, last '
                f'{self.failure}; the graph runs on and the bag has every message (a slow '
                'subscriber outside this process: rqt, a remote machine)'
            )

    def check_outside(self, now: float) -> None:
        """Which topics have a subscriber outside this process (published on DDS only then):
        every `outside_check_period` wall s, at a frame or, while paused, at the paused graph's
        timer."""
        if now >= self._next_outside_check:
            self._next_outside_check = now + self.outside_check_period
            changed = False
            for route in self.routes:
                outside = route.pub.get_subscription_count() > 0
                changed |= outside != route.outside
                route.outside = outside
            if changed:
                self.rewire()

    def rewire(self) -> None:
        """Each route's `publish` chosen again (_Route.choose): after a change of the
        subscribers in this process or outside it."""
        for route in self.routes:
            route.choose()

    def flush(self) -> None:
        """The kept messages to the bag writer, in the order they were published (every
        FLUSH_FRAMES frames, while paused, and before the recorder closes); the sim time of
        the frame is their log time (the recorder's own clock, without asking it)."""
        recorder, pending = self.recorder, self.pending
        if recorder is None or pending is None:
            return
        with self._flush_lock:
            # popleft as many times as there are entries now, called from C (islice)
            entries = list(islice(iter(pending.popleft, None), len(pending)))
            self._unflushed = 0
            # the messages among the frames' times (ints), counted in C
            self.handed_off += len(entries) - sum(map(isinstance, entries, repeat(int)))
            if not entries or recorder.error:
                return
            try:
                self._log_ns = recorder.writer.write_logged(entries, self._log_ns)
            except OSError as exc:
                recorder.stop_recording(exc)

    def record_latched(self, topic: str, msg: Any) -> None:
        """Record a message published before `attach` (a latched one) at the current time."""
        if self.pending is not None:
            # The encoder's padding is zero; rclpy's may hold leftovers (not deterministic).
            self.pending.append((topic, MessageEncoder(type(msg)).encode(msg)))

    def frame(self, t_ns: int, set_clocks: bool = False) -> None:
        """A frame starts at sim time `t_ns`, before its messages: the FLUSH_FRAMES frames before
        it go to the bag once they are that many (each message logged at its frame's time), the
        time is kept (`time`), and the nodes' clocks are set to it every CLOCK_FRAMES frames,
        when time goes back (a reset) or when `set_clocks`; the outside subscribers are looked
        for when due."""
        self.check_outside(time.monotonic())
        self._unflushed += 1
        if self._unflushed > FLUSH_FRAMES:
            self.flush()
        back = t_ns < self.time.ns
        if self.pending is not None:
            self.pending.append(t_ns)  # before the time changes: see `pending`
        self.time.ns = t_ns
        self._since_clocks += 1
        if set_clocks or back or self._since_clocks >= CLOCK_FRAMES:
            self.set_clocks()

    def set_clocks(self) -> None:
        """Every node's clock to the current frame's time (what each node's TimeSource does with
        a /clock message)."""
        self._since_clocks = 0
        self._set_clocks(self.time.ns)

    def attach(self, nodes: list[Node]) -> None:
        """Route every publisher of `nodes`; serve their subscriptions to those topics here."""
        for node in nodes:
            for pub in node.publishers:
                route = _Route(self, pub, node)
                # The instance attribute (`_Route.choose`'s) shadows Publisher.publish for every
                # caller of this publisher (the nodes keep their own references to it).
                self.routes.append(route)
                if self.recorder is not None:
                    self.recorder.writer.add_topic(
                        route.topic,
                        type_name(route.msg_type),
                        qos_dicts([pub.qos_profile]),
                        sample=serialize_message(route.msg_type()),
                    )
                    self.recorder.exclude.add(route.topic)
        for node in nodes:
            # The recorder's own subscriptions are raw (bytes as received) and stay on DDS for
            # topics from outside; its clock's /clock subscription is served here like the rest.
            for sub in list(node.subscriptions):
                if sub.topic_name in self.subscribers and not sub.raw:
                    with_info = sub._callback_type == Subscription.CallbackType.WithMessageInfo
                    self.subscribers[sub.topic_name].append((sub.callback, with_info))
                    node.destroy_subscription(sub)
        self._take_time_sources()
        recorder = self.recorder
        if recorder is not None:
            # Topics the recorder found on DDS before this hand-off existed (/diagnostics,
            # /parameter_events at start-up): it records them from here now, so its DDS copy
            # would write each message twice (and keep them published on DDS for itself).
            for topic in [t for t in recorder.subs if t in self.subscribers]:
                recorder.destroy_subscription(recorder.subs.pop(topic))
        self.rewire()

    def _take_time_sources(self) -> None:
        """The nodes' TimeSource /clock callbacks, taken off the hand-off: `set_clocks` sets
        their clocks by direct call (one Time for every node's clock)."""
        callbacks = self.subscribers.get(CLOCK.name, [])
        self.time_sources = [
            getattr(cb, '__self__')  # noqa: B009 (a bound method's instance; mypy sees Callable)
            for cb, _ in callbacks
            if getattr(cb, '__func__', None) is TimeSource.clock_callback
        ]
        callbacks[:] = [
            (cb, i) for cb, i in callbacks if getattr(cb, '__self__', None) not in self.time_sources
        ]

    def served_by_call(self, topics: list[str]) -> None:
        """These topics' subscribers in the process are called directly by the graph (with the
        values, before the message is built): the hand-off records and publishes them only."""
        for topic in topics:
            self.subscribers.get(topic, [])[:] = []
        self.rewire()

    def _set_clocks(self, t_ns: int) -> None:
        t = Time(nanoseconds=t_ns, clock_type=ClockType.ROS_TIME)
        point = t._time_handle
        for source in self.time_sources:
            source._last_time_set = t  # as its clock_callback: a clock attached later starts here
            for clock in source._associated_clocks:
                # Clock.set_ros_time_override without its type check (t is a Time): 7 a setting.
                handle = clock.handle
                with handle:
                    handle.set_ros_time_override(point)

    def subscribe(self, topic: str, callback: Callable[[Any], None]) -> None:
        """An in-process subscriber of the graph itself (after the nodes' own)."""
        self.subscribers.setdefault(topic, []).append((callback, False))
        self.rewire()


class SimGraph(Node):
    """Node `sim_graph`: builds and wires the composed graph, reports its hand-off."""

    def __init__(self) -> None:
        super().__init__('sim_graph')
        self.cfg = bind(self, SimGraphConfig()).config
        self.nodes: list[Node] = []
        # The frame's time, kept by the hand-off (`InProcessBus.frame`), read by the nodes that
        # run on it in place of their clocks.
        frame_time = FrameTime()
        try:
            self.recorder = (
                Recorder(writer=BagWriterProcess, frame_time=frame_time)
                if self.cfg.record
                else None
            )
            if self.recorder is not None:
                self.nodes.append(self.recorder)
            # The slow constructions first (model, equilibrium, the triangle's poses), so the
            # first frame follows the controller's and the driver's start closely.
            self.sim = SimNode()
            self.nodes.append(self.sim)
            self.sim.compose(self)
            self.reference = ReferenceNode(paced=False, frame_time=frame_time)
            self.nodes.append(self.reference)
            # The control chain by direct calls, as in the fused control loop: the estimator's
            # joint state to the controller, its command to the driver's safety filter (each
            # message published after it was passed on), the driver's armed state back.
            self.driver = ValveDriver(lockstep=True, subscribe=False, frame_time=frame_time)
            self.nodes.append(self.driver)
            bring_up(self.driver)  # managed: active in-process, before the hand-off is wired
            self.controller = ControllerNode(
                lockstep=True,
                subscribe_state=False,
                subscribe_armed=False,
                downstream=self.driver.on_pressures,
                frame_time=frame_time,
            )
            self.nodes.append(self.controller)
            self.driver.armed_listeners.append(self.controller.on_valves_armed)
            # Its only command source; a publisher of /valve/command elsewhere is named, not heard.
            self.driver.in_process_commanders = {self.controller.get_fully_qualified_name()}
            self.estimator = EstimatorNode(
                subscribe=False, downstream=self._joints, frame_time=frame_time
            )
            self.nodes.append(self.estimator)
            # Last: its /joint_states and pose callbacks run after the control path's.
            self.state_publisher = StatePublisher()
            self.nodes.append(self.state_publisher)
        except BaseException:
            self.close()
            for node in self.nodes:
                node.destroy_node()
            raise
        self.diagnostics = Diagnostics(self, DIAGNOSTICS, 'sim_graph: in-process hand-off')
        self.bus = InProcessBus(self.recorder, self.cfg.outside_check_period, frame_time)
        if self.recorder is not None:
            self.recorder.before_write = self.bus.flush
        self.bus.warn = self.get_logger().warning
        self.bus.attach([*self.nodes, self])
        # What a frame carries reaches its subscribers here by call, with the values, before
        # the message goes out: the poses (`poses`), the reference and its preview, the joint
        # state (`_joints`), the driver's output to the simulated valves.
        self.reference.listeners.append(self.controller.on_reference)
        self.reference.preview_listeners.append(self.controller.on_preview)
        self.driver.applied_listeners.append(self.sim.take_applied)
        self.bus.served_by_call(
            [
                *(mocap_pose(b).name for b in self.sim.bodies),
                REFERENCE.name,
                REFERENCE_PREVIEW.name,
                JOINT_STATES.name,
                VALVE_APPLIED.name,
            ]
        )
        # Published at construction, before the hand-off existed: on DDS (latched) but not in
        # the bag, whose recorder skips topics published in this process. Record them at t=0.
        armed = Bool(data=self.driver.valves_armed)
        for pub, msg in (*self.state_publisher.latched, (self.driver.pub_armed, armed)):
            self.bus.record_latched(pub.topic_name, msg)
        # The driver armed before the controller existed: its /valve/armed by a direct call
        # (later ones reach the controller through the hand-off).
        self.controller.on_valves_armed(armed.data)
        rate = self.reference.params.config.rate
        self.ref_period_ns = int(round(1e9 / rate))
        self.next_ref_ns: int | None = None
        self.create_timer(1.0, timer_callback(self._diag))
        # While paused, /clock is sent again on DDS every PAUSED_CLOCK_PERIOD_S wall seconds (as
        # Gazebo does): a tool that subscribed after the last frame (DDS discovery takes longer
        # than a fast run) still learns the time. Not recorded, not delivered in the process.
        self.clock_route = next(r for r in self.bus.routes if r.topic == CLOCK.name)
        self.clock_route.keep_last = True
        self.clock_route.choose()
        # /clock outside at a wall-clock rate (as Gazebo's 10 Hz default): at 20x real time,
        # every frame would be 2400 messages a second for each outside tool to take in.
        self.clock_route.dds_period = self.cfg.outside_clock_period
        self.create_timer(
            PAUSED_CLOCK_PERIOD_S,
            timer_callback(self._clock_while_paused),
            clock=RosClock(clock_type=ClockType.STEADY_TIME),
        )
        self._wall0 = time.monotonic()
        # The speed report: (sim ns, wall s, process CPU s) at the first frame and at the last
        # of every CPU_SAMPLE_FRAMES; (sim ns, wall s) at the last frame.
        self.first_frame: tuple[int, float, float] | None = None
        self.cpu_frame: tuple[int, float, float] | None = None
        self.last_frame: tuple[int, float] | None = None
        self._since_cpu = 0
        self.get_logger().info(
            f'composed: {", ".join(n.get_name() for n in self.nodes)}; '
            f'{len(self.bus.routes)} publishers through the in-process hand-off'
        )

    def frame_started(self, t: int) -> None:
        """A frame at sim time `t` ns, before its messages (SimNode's FrameHook): its time kept
        (the nodes' clocks set every CLOCK_FRAMES frames), then the timers that can change a
        message, in sim time: the driver's watchdog and the controller's stale-state guard (from
        the second frame on: they look back over the frames before), and the reference's tick
        on each frame a period has elapsed by. None of them waits for the wall clock (module
        docstring)."""
        sim = self.sim
        pausing = bool(sim.pause_at_ns) and t >= sim.pause_at_ns
        # A ~/step frame (run while paused) or the frame it pauses at: the clocks show it.
        self.bus.frame(t, set_clocks=pausing or sim.paused)
        wall = time.perf_counter()
        if self.first_frame is None:
            self.first_frame = self.cpu_frame = (t, wall, time.process_time())
        else:
            self.driver.on_frame()
            self.controller.on_frame()
            self._since_cpu += 1
            if self._since_cpu >= CPU_SAMPLE_FRAMES:
                self._since_cpu = 0
                self.cpu_frame = (t, wall, time.process_time())
        self.last_frame = (t, wall)
        if pausing:
            self.clock_route.next_dds = 0.0  # the frame it pauses at: on DDS, not throttled
        if self.next_ref_ns is None:
            self.next_ref_ns = t
        if t >= self.next_ref_ns:
            self.reference.tick(t)
            while self.next_ref_ns <= t:
                self.next_ref_ns += self.ref_period_ns

    def poses(self, capture_ns: int, bodies: list[str], poses: list[tuple]) -> None:
        """A released mocap frame (SimNode's FrameHook), after its pose messages: to the
        estimator as one frame (and on through the control chain), then to the state
        publisher; positions and x, y, z, w quaternions as the messages carry them (the plain
        floats of `ros_pose`, passed on as they are)."""
        frame = [
            (name, (position, (x, y, z, w)))
            for name, (position, (w, x, y, z)) in zip(bodies, poses, strict=True)
        ]
        self.estimator.on_frame(capture_ns, frame)
        self.state_publisher.on_mocap_frame(FRAME_MOCAP, capture_ns, frame)

    def _joints(self, stamp_ns: int, position: list[float], velocity: list[float]) -> None:
        """The estimator's joint state: to the controller (and on to the valves), then to the
        state publisher."""
        self.controller.on_joints(stamp_ns, position, velocity)
        self.state_publisher.on_joints(stamp_ns, self.estimator.joint_names, position)

    def _clock_while_paused(self) -> None:
        if self.sim.paused:
            self.bus.set_clocks()  # paused by ~/pause between two settings: the last frame's time
            self.bus.check_outside(time.monotonic())  # no frame does it while paused
            self.bus.flush()  # what the nodes' timers published since the last frame
        route = self.clock_route
        last = route.last
        if self.sim.paused and last is not None and route.pub.get_subscription_count() > 0:
            route.dds_publish(last)

    def _diag(self) -> None:
        bus = self.bus
        self.diagnostics.publish(
            Level.OK,
            f'{len(self.nodes)} nodes composed',
            {
                'nodes': ','.join(n.get_name() for n in self.nodes),
                'messages_handed_off': bus.handed_off,
                'messages_on_dds': bus.dds_published,
                'messages_refused_by_dds': bus.dds_failed,
                'last_refused': bus.failure,
                'topics_with_outside_subscribers': ','.join(
                    sorted({r.topic for r in bus.routes if r.outside})
                ),
            },
        )

    def spin(self) -> None:
        self.sim.run(others=[n for n in (*self.nodes, self) if n is not self.sim])

    def close(self) -> None:
        """Stop the frames first, then vent, then close the bag: before the nodes' teardown,
        which run_node cuts short if the middleware hangs in it (TEARDOWN_LIMIT_S)."""
        for node in self.nodes:
            if isinstance(node, SimNode):
                node.stop()
        for node in self.nodes:
            if isinstance(node, ValveDriver):
                vent_on_exit(node)
        if hasattr(self, 'bus'):
            self.bus.flush()  # the last frame's messages, before the recorder closes its bag
        recorder = getattr(self, 'recorder', None)
        if recorder is not None:
            recorder.close()
        speed = self.speed_report()
        if speed:
            print(speed, flush=True)

    def speed_report(self) -> str:
        """The run's speed from its first frame to its last, measured here (`make run` reads
        it; a watcher's /clock depends on when DDS discovery found it), and per CPU second up to
        the last frame the CPU time was read at; '' before two frames."""
        a, b = getattr(self, 'first_frame', None), getattr(self, 'last_frame', None)
        c = getattr(self, 'cpu_frame', None)
        if a is None or b is None or c is None or b[0] <= a[0] or b[1] <= a[1]:
            return ''
        sim_s, wall = (b[0] - a[0]) * 1e-9, b[1] - a[1]
        cpu_sim_s, cpu = (c[0] - a[0]) * 1e-9, c[2] - a[2]
        per_cpu = f'{cpu_sim_s / cpu:.1f}' if cpu > 0 and cpu_sim_s > 0 else 'nan'
        return (
            f'{SPEED_PREFIX} {sim_s:.4f} sim s in {wall:.4f} wall s (first to last frame): '
            f'{sim_s / wall:.2f}x real time, {per_cpu}x per CPU second ({cpu_sim_s:.4f} sim s '
            f'in {cpu:.4f} CPU s)'
        )

    def all_nodes(self) -> list[Node]:
        """This node first, the recorder last (the order they are destroyed in)."""
        return [self, *(n for n in self.nodes if n is not self.recorder), *self._recorder()]

    def _recorder(self) -> list[Node]:
        return [] if self.recorder is None else [self.recorder]


def sim_graph() -> list[Node]:
    graph = SimGraph()
    return graph.all_nodes()


def _spin(nodes: list[Node]) -> None:
    graph = nodes[0]
    assert isinstance(graph, SimGraph)
    graph.spin()


def _close(nodes: list[Node]) -> None:
    graph = nodes[0]
    assert isinstance(graph, SimGraph)
    graph.close()


def main(args: Any = None) -> int:
    return run_node(
        sim_graph,
        args,
        spin=_spin,
        close=_close,
        config_hint='Fix config/sim.yaml, valve.yaml, control.yaml, recorder.yaml or the '
        '--ros-args overrides.',
    )


if __name__ == '__main__':
    sys.exit(main())
