"""Turns the graph description into launch_ros actions (used by launch/*.launch.py only).

Imports `launch` and `launch_ros`, so it is only imported on a machine with a ROS 2 install.

The managed nodes (graph.MANAGED_NODES) are `LifecycleNode` actions: a ChangeState(configure)
event is emitted at start and each one is activated when it reaches `inactive`, as the supervisor
does over the same lifecycle_msgs services (ManagedNode: a transition pending when the launch
stops is abandoned, not a traceback). Before any action is created, the launch arguments
and every parameter file are checked (equimus_bringup.prestart): a bad one ends the launch with
one line, nothing started. When a required process (graph.REQUIRED_PROCESSES: the valve driver,
the bridge, the process holding them, or the emulated rig) exits, the valve driver is asked to
deactivate (vent) and the launch shuts down; the driver also vents on the SIGINT of the shutdown.
With check:=true the rig check (graph.ProcessSpec.gate) runs after the rig emulator, if any, and
the rest of the graph is started only when it exits 0; otherwise the launch ends with one line.
"""

import faulthandler
import os
import threading
import time
from pathlib import Path

# mypy resolves `launch` to src/equimus_bringup/launch/ (the launch files, on mypy_path), not
# to ROS's launch package, which it cannot see.
from launch import LaunchDescription  # type: ignore[attr-defined]
from launch.actions import (
    DeclareLaunchArgument,
    EmitEvent,
    ExecuteProcess,
    OpaqueFunction,
    RegisterEventHandler,
    TimerAction,
)
from launch.conditions import IfCondition
from launch.event_handlers import OnProcessExit, OnShutdown
from launch.events import Shutdown, matches_action
from launch.logging import get_logger
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import LifecycleNode, Node
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from launch_ros.substitutions import ExecutableInPackage, FindPackageShare
from lifecycle_msgs.msg import Transition
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

from equimus_bringup import prestart
from equimus_bringup.graph import ARGUMENTS, parameter_layers
from equimus_bringup.prestart import StartError
from equimus_bringup.supervisor import (
    DISCOVERY_SETTLE_S,
    driver_enclaves,
    graph_enclave,
    other_graph_problem,
    other_graphs,
)


class _Stop:
    """What the required processes' exit handlers share: which of them have exited, and whether
    one has already stopped the launch (two exiting together each stopped it: a second Shutdown
    fails in launch_ros with "Cannot shutdown a ROS adapter that is not running")."""

    def __init__(self) -> None:
        self.exited: set[str] = set()
        self.sent = False

    def shutdown(self, context, reason: str) -> None:
        """End the launch once, from any thread."""

        def _once() -> None:
            if not (context.is_shutdown or self.sent):
                self.sent = True
                context.emit_event_sync(Shutdown(reason=reason))

        context.asyncio_loop.call_soon_threadsafe(_once)


#: s the guard keeps looking for another graph's driver once its own is listed, before the
#: first transition: another graph's can be listed after this one's although it joined the
#: domain seconds earlier (0.1 s later in 1 of 10 tries with both cores busy). And never before
#: the launch's own ROS node has been on the domain for the supervisor's DISCOVERY_SETTLE_S,
#: longer than Fast DDS's participant announcement period (the race the supervisor lost once).
LISTED_SETTLE_S = 1.0


class DriverGuard:
    """Checked before each transition of the valve driver: a lifecycle request by name reaches
    every node of that name, so none is sent while another graph's driver is on the domain (a
    graph started there within the seconds of DDS discovery, after prestart listened). The
    graph's nodes run in `enclave`, which tells this graph's driver from another's; `before`:
    the drivers prestart found listed but silent (killed, within their DDS lease)."""

    def __init__(self, enclave: str, before: list[str], domain: str, stop: _Stop) -> None:
        self.enclave, self.before, self.domain, self.stop = enclave, before, domain, stop
        self._refused = threading.Lock()
        self._settled = False
        self.joined: float | None = None  # monotonic s by which the launch's node was on the domain

    def node_joined(self) -> None:
        """The launch's own ROS node is on the domain by now (noted once)."""
        if self.joined is None:
            self.joined = time.monotonic()

    def problem(self, node, stopping) -> str:
        """'' when only this graph's driver is new on the domain (waits until it is listed),
        else the one line saying why no request is sent."""
        while self.enclave and self.enclave not in driver_enclaves(node):
            if stopping():
                return ''
            time.sleep(0.05)
        now = time.monotonic()
        joined = now if self.joined is None else self.joined
        settle = now if self._settled else max(now + LISTED_SETTLE_S, joined + DISCOVERY_SETTLE_S)
        while True:
            others = other_graphs(driver_enclaves(node), self.before, self.enclave)
            if others:
                return other_graph_problem(self.domain, others[0])
            if time.monotonic() >= settle or stopping():
                self._settled = True
                return ''
            time.sleep(0.05)

    def refuse(self, context, problem: str) -> None:
        """Say why and end the launch, once: another graph's transition events (same topic
        name) can start a second transition that the guard refuses too."""
        if self._refused.acquire(blocking=False):
            get_logger('launch.user').error(f'equimus: {problem}')
            self.stop.shutdown(context, problem)


#: s a worker thread that found launch_ros's node destroyed waits to see the launch stopping.
#: launch runs the newest event handlers first: the ROS adapter's (it destroys that node) runs
#: before the launch service's own, which marks the context as shut down (seen in a CI run).
STOP_NOTICE_S = 5.0


def _stopping(context, wait_s: float = STOP_NOTICE_S) -> bool:
    """Whether the launch is stopping, waiting up to `wait_s` for it to say so."""
    end = time.monotonic() + wait_s
    while not context.is_shutdown and time.monotonic() < end:
        time.sleep(0.01)
    return bool(context.is_shutdown)


#: s after its stop by which a launch has always ended: its nodes have the Ctrl-C, launch sends
#: SIGTERM 5 s later and SIGKILL 5 s after that (its default sigterm_timeout and
#: sigkill_timeout). A launch still running then is stuck in its own code; it prints where each
#: of its threads stands (one launch in a CI run printed nothing for 40 s after its Ctrl-C, so
#: the next one says where it stood).
STOP_STALL_S = 20.0


def _watch_the_stop(context) -> None:
    """Once per launch, from its first managed node on: at the stop, arm the stall report.

    Registered after launch_ros's ROS adapter, whose shutdown (joining its executor thread)
    is the one step of the stop that can hold launch's loop; launch runs the newest handlers
    first, so this one is armed before that step. faulthandler's timer thread needs no GIL."""
    if getattr(context.locals, 'equimus_stop_watched', False):
        return
    context.extend_globals({'equimus_stop_watched': True})
    context.register_event_handler(
        OnShutdown(on_shutdown=lambda event, ctx: faulthandler.dump_traceback_later(STOP_STALL_S))
    )


class ManagedNode(LifecycleNode):
    """launch_ros's LifecycleNode, except that a transition still waiting for the node's
    change_state service when the launch stops is abandoned with one line, and that the valve
    driver's transitions are not sent while another graph's driver is on the domain
    (`DriverGuard`: the launch then ends with one line).

    launch_ros waits for that service in a worker thread and destroys its own ROS node when the
    launch ends; a wait still running then raises InvalidHandle, which launch reports as "Caught
    exception" and exit code 1. It happens whenever the launch stops before a managed node is up:
    a Ctrl-C during start-up, or a required process dying then (seen on a loaded machine, and
    whenever the emulated rig cannot open its ports), also while the guard is still listening."""

    def __init__(self, *, guard: DriverGuard | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self._guard = guard

    def execute(self, context):
        actions = super().execute(context)  # launch_ros's ROS node exists from here on
        _watch_the_stop(context)
        if self._guard is not None:
            self._guard.node_joined()
        return actions

    def _call_change_state(self, request, context) -> None:
        try:
            if self._guard is not None:  # it lists the domain's nodes through the same ROS node
                from launch_ros.ros_adapters import get_ros_node

                problem = self._guard.problem(get_ros_node(context), lambda: context.is_shutdown)
                if problem:
                    self._guard.refuse(context, problem)
                    return
            super()._call_change_state(request, context)
        except _rclpy.InvalidHandle:
            if not _stopping(context):
                raise
            get_logger('launch.user').warning(
                f'{self.node_name}: transition {request.transition.id} abandoned, the launch is '
                'stopping'
            )


def lifecycle_actions(node: LifecycleNode) -> list:
    """Configure at start; activate once inactive (the launch_ros equivalent of bring_up)."""
    return [
        RegisterEventHandler(
            OnStateTransition(
                target_lifecycle_node=node,
                goal_state='inactive',
                entities=[
                    EmitEvent(
                        event=ChangeState(
                            lifecycle_node_matcher=matches_action(node),
                            transition_id=Transition.TRANSITION_ACTIVATE,
                        )
                    )
                ],
                handle_once=True,
            )
        ),
        EmitEvent(
            event=ChangeState(
                lifecycle_node_matcher=matches_action(node),
                transition_id=Transition.TRANSITION_CONFIGURE,
            )
        ),
    ]


#: s a required process's exit waits before it stops the launch. A terminal's Ctrl-C reaches
#: the nodes and launch at once, and a loaded machine can let launch see a node's exit before
#: its own SIGINT: a stop sent then (a ChangeState to an exiting driver, a second Shutdown)
#: fails with a traceback. Launch cancels the timer when it shuts down; the valves do not wait
#: for it (the controller's stale guard and the driver's watchdog vent within 0.25 s).
STOP_GRACE_S = 1.0


#: The graph's valve driver process (graph.describe_graph's name for it).
DRIVER = 'valve_driver'


def shutdown_on_exit(
    action, name: str, driver: LifecycleNode | None, stop: _Stop
) -> RegisterEventHandler:
    """A required process exited on its own: vent the valve driver (deactivate) unless it has
    exited too, then end the launch, once. Not when the launch is stopping (Ctrl-C), which it
    may only learn of within STOP_GRACE_S: every node then has its SIGINT, the driver vents on
    it, and a transition or a second Shutdown sent to exiting processes would only fail."""

    def _exited(context) -> list:
        stop.exited.add(name)
        return []

    def _stop(context) -> list:
        if context.is_shutdown or stop.sent:
            return []
        stop.sent = True
        events = []
        if driver is not None and driver is not action and DRIVER not in stop.exited:
            events.append(
                EmitEvent(
                    event=ChangeState(
                        lifecycle_node_matcher=matches_action(driver),
                        transition_id=Transition.TRANSITION_DEACTIVATE,
                    )
                )
            )
        events.append(EmitEvent(event=Shutdown(reason=f'{name} exited: the graph stops')))
        return events

    return RegisterEventHandler(
        OnProcessExit(
            target_action=action,
            on_exit=[
                OpaqueFunction(function=_exited),
                TimerAction(period=STOP_GRACE_S, actions=[OpaqueFunction(function=_stop)]),
            ],
        )
    )


def generate(mode: str) -> LaunchDescription:
    """Declare every graph argument, then build the nodes once the arguments are known."""
    declared = [
        DeclareLaunchArgument(name, default_value=default, description=text)
        for name, (default, text) in ARGUMENTS.items()
    ]

    def _actions(context):
        values = {name: LaunchConfiguration(name).perform(context) for name in ARGUMENTS}
        log_level = values['log_level'] or 'info'
        try:
            # Refused before any action exists: nothing is started, no bag is made.
            start = prestart.check(mode, values)
        except StartError as exc:
            raise RuntimeError(f'equimus: not started: {exc}') from None
        specs = start.specs
        managed = next((s for s in specs if s.name == DRIVER), None)
        env = {**os.environ, **(managed.env if managed else {})}
        guard = DriverGuard(
            graph_enclave(), start.drivers_listed, env.get('ROS_DOMAIN_ID', '0'), _Stop()
        )
        gate = next((i for i, s in enumerate(specs) if s.gate), None)
        if gate is None:
            return _graph_actions(specs, log_level, guard)
        # The rig check: the rest starts when it has exited 0; any other exit ends the launch.
        check = _process(specs[gate])
        rest = _graph_actions(specs[gate + 1 :], log_level, guard)

        def _after_check(event, context) -> list:
            if context.is_shutdown:  # Ctrl-C during the check: nothing more to start
                return []
            if event.returncode != 0:
                raise RuntimeError(
                    f'equimus: not started: {specs[gate].name} failed (exit code '
                    f'{event.returncode}); its lines above say what to fix'
                )
            return rest

        return [
            *_graph_actions(specs[:gate], log_level, guard),
            check,
            RegisterEventHandler(OnProcessExit(target_action=check, on_exit=_after_check)),
        ]

    return LaunchDescription([*declared, OpaqueFunction(function=_actions)])


def _process(spec) -> ExecuteProcess:
    """A plain process of the graph (not a ROS node)."""
    return ExecuteProcess(
        cmd=[ExecutableInPackage(spec.executable, spec.package), *spec.arguments],
        prefix=' '.join(spec.prefix) or None,
        additional_env=spec.env or None,
        name=spec.name,
        output='screen',
    )


def _graph_actions(specs, log_level: str, guard: DriverGuard) -> list:
    """The actions of these processes: ROS nodes (managed ones brought up; in the graph's
    enclave), plain processes, and the handlers that end the launch when a required one
    exits."""
    actions: list = []
    required: list = []
    driver = None
    enclave = ['--enclave', guard.enclave] if guard.enclave else []
    for spec in specs:
        if spec.is_ros_node:
            # A multi-node process keeps its nodes' own names (no name remap); its launch
            # arguments are node-scoped in the last parameter file. Managed nodes are
            # LifecycleNode actions.
            kind = ManagedNode if spec.managed else Node
            extra: dict = {'namespace': ''} if spec.managed else {}
            if spec.name == DRIVER:
                extra['guard'] = guard
            action = kind(
                package=spec.package,
                executable=spec.executable,
                name=None if spec.nodes else spec.name,
                parameters=[Path(p) for p in parameter_layers(spec)],
                ros_arguments=['--log-level', log_level, *enclave],
                prefix=' '.join(spec.prefix) or None,
                additional_env=spec.env or None,
                output='screen',
                emulate_tty=True,
                **extra,
            )
            actions.append(action)
            if spec.managed:
                actions += lifecycle_actions(action)
                if spec.name == DRIVER:
                    driver = action
        else:
            action = _process(spec)
            actions.append(action)
        if spec.required:
            required.append((action, spec.name))
    return actions + [shutdown_on_exit(a, name, driver, guard.stop) for a, name in required]


RVIZ_CONFIG = ('viewers', 'equimus.rviz')  # in equimus_bringup's share folder


def viewer_actions() -> list:
    """`rviz:=true`: RViz with the leg's config (robot model from /robot_description, /tf).

    Without rviz2 installed (a headless machine) the graph runs without it, with one line saying
    how to install it, rather than the launch failing on a viewer."""

    def _rviz(context) -> list:
        from ament_index_python.packages import PackageNotFoundError, get_package_prefix
        from launch.logging import get_logger

        if IfCondition(LaunchConfiguration('rviz')).evaluate(context) is False:
            return []
        try:
            get_package_prefix('rviz2')
        except PackageNotFoundError:
            distro = os.environ.get('ROS_DISTRO') or '<distro>'
            get_logger('launch.user').warning(
                f'rviz:=true: rviz2 is not installed here (apt install ros-{distro}-rviz2); '
                'the graph runs without RViz'
            )
            return []
        return [
            Node(
                package='rviz2',
                executable='rviz2',
                name='rviz',
                arguments=[
                    '-d',
                    PathJoinSubstitution([FindPackageShare('equimus_bringup'), *RVIZ_CONFIG]),
                ],
                output='screen',
            )
        ]

    return [
        DeclareLaunchArgument(
            'rviz', default_value='false', description='start RViz with viewers/equimus.rviz'
        ),
        OpaqueFunction(function=_rviz),
    ]
