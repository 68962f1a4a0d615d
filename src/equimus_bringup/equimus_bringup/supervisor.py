"""Runs the graph description as processes where `ros2 launch` is not available.

Each node is its own process started with the same parameters `launch_ros` would give it. Output
is prefixed with the node name. The managed (lifecycle) nodes, valve_driver and natnet_bridge,
start unconfigured; the supervisor configures and activates them over their lifecycle_msgs
services, as the launch files do with ChangeState events. Ctrl-C (or SIGTERM) stops the nodes one
at a time in shutdown order, so the valve driver vents last; if any node dies on its own, the
valve driver is deactivated (it vents) first, then the rest are stopped and the supervisor
reports failure.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from equimus_bringup.graph import (
    GRAPH_DDS_ENV,
    ProcessSpec,
    participant_environment,
    realtime_problem,
    ros_arguments,
)
from equimus_ros.owner import OWNER_ENV

#: s a managed node may take to offer its lifecycle services after its process started (imports,
#: DDS discovery on a loaded machine), and to answer one transition.
LIFECYCLE_SERVICE_TIMEOUT_S = 30.0
LIFECYCLE_CALL_TIMEOUT_S = 10.0
#: s the supervisor's own node has been on the domain before it trusts its list of valve drivers:
#: a node discovers the participants already running only as their replies come in, which a
#: loaded machine delayed past this graph's own driver's start (a second graph's supervisor saw
#: its own driver, not yet the first graph's, and sent its lifecycle requests). A new node
#: hears a running participant at that one's next periodic announcement: every second in the
#: graph's DDS profiles, every 3 s in Fast DDS's defaults (a graph given the user's own
#: profile), which this is longer than (2 s missed one in a loaded CI run).
DISCOVERY_SETTLE_S = 3.5
#: s at most the list is waited for to stop changing: with both cores busy the first graph's
#: nodes were still not listed after DISCOVERY_SETTLE_S while nodes kept coming in.
DISCOVERY_MAX_S = 10.0
#: s a hung process gets to print its stacks before it is killed.
STACK_DUMP_WAIT_S = 1.0
#: s gdb may take to attach to a live process and print its threads' native stacks
NATIVE_STACKS_TIMEOUT_S = 30.0
#: innermost frames kept of each thread's native stack
NATIVE_FRAMES = 8


_GRAPHS = itertools.count(1)  # graphs started by this process: their enclaves


class GraphError(RuntimeError):
    """A node could not be started or died while the graph was running."""


_GDB_THREAD = re.compile(r'^Thread \d+ \(.*?(LWP \d+)\)(?: "(.*)")?')
_GDB_FRAME = re.compile(r'^#\d+\s+(?:0x[0-9a-fA-F]+ in )?(.+?) \(')


def native_stacks(pid: int, timeout: float = NATIVE_STACKS_TIMEOUT_S) -> list[str]:
    """One line per thread of process `pid`, its innermost NATIVE_FRAMES functions from gdb's
    backtrace: a thread stuck inside the middleware (a lock a DDS thread holds) shows only
    there, not in Python's stack dump. One line saying why not where gdb is missing or may not
    attach (Yama's ptrace_scope)."""
    gdb = shutil.which('gdb')
    if gdb is None:
        return ['native stacks: gdb is not installed']
    cmd = [gdb, '-p', str(pid), '-batch', '-nx', '-iex', 'set debuginfod enabled off']
    for line in ('set pagination off', 'set print frame-arguments none'):
        cmd += ['-ex', line]
    cmd += ['-ex', f'thread apply all bt {NATIVE_FRAMES}']
    try:
        run = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return [f'native stacks: gdb did not answer within {timeout:g} s']
    threads: list[str] = []
    for line in run.stdout.splitlines():
        if m := _GDB_THREAD.match(line):
            threads.append(f'{m.group(1)} "{m.group(2) or ""}":')
        elif threads and (m := _GDB_FRAME.match(line)):
            threads[-1] += f' {m.group(1)} <'
    if not threads:
        why = (run.stderr.strip().splitlines() or ['no output'])[-1]
        return [f'native stacks: gdb could not attach to {pid}: {why}']
    return [t.rstrip(' <') for t in threads]


def find_executable(package: str, executable: str) -> str:
    """Where launch_ros would find it: <prefix>/lib/<package>/<executable>."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_prefix
    except ImportError as exc:
        raise GraphError(
            'ament_index_python is missing: run `bash scripts/setup.sh` and '
            '`source scripts/env.sh` first'
        ) from exc
    try:
        prefix = get_package_prefix(package)
    except PackageNotFoundError as exc:
        raise GraphError(
            f'package {package!r} is not installed in the sourced workspace: run '
            '`bash scripts/setup.sh` and `source scripts/env.sh`'
        ) from exc
    path = os.path.join(prefix, 'lib', package, executable)
    if not os.access(path, os.X_OK):
        found = shutil.which(executable)
        if found:
            return found
        raise GraphError(f'{path} does not exist: rebuild the workspace (`bash scripts/setup.sh`)')
    return path


def command_for(spec: ProcessSpec, log_level: str = 'info') -> list[str]:
    cmd = [*spec.prefix, find_executable(spec.package, spec.executable), *spec.arguments]
    if spec.is_ros_node:
        cmd += ros_arguments(spec, log_level)
    return cmd


def graph_context(env: Mapping[str, str], domain: int | None = None, profile_loaded: bool = False):
    """A new rclpy Context on the DDS domain and discovery range that `env` gives a graph's
    processes (the caller's own may differ: the soak), or on `domain`. `profile_loaded`: this
    process read the graph's DDS profile at its start (`command_environment`), so it joins
    exactly as a graph process does, over UDP only."""
    import rclpy
    from rclpy.context import Context

    context = Context()
    saved = {k: os.environ.get(k) for k in GRAPH_DDS_ENV}
    if profile_loaded:
        os.environ.update({k: env[k] for k in GRAPH_DDS_ENV if k in env})
    else:
        os.environ.update(participant_environment(env))
    if domain is not None:
        os.environ['ROS_DOMAIN_ID'] = str(domain)
    try:
        rclpy.init(context=context, args=[])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return context


def valve_drivers(node) -> list[str]:
    """The nodes named valve_driver that `node`'s view of the ROS graph lists (a killed
    process's stay listed for its DDS lease)."""
    return [f'{ns.rstrip("/")}/{name}' for name, ns, _ in _drivers(node)]


def driver_enclaves(node) -> list[str]:
    """The enclave of each listed valve_driver: which graph it belongs to (`Supervisor.enclave`;
    '/' for one started otherwise)."""
    return [enclave for _, _, enclave in _drivers(node)]


def graph_enclave() -> str:
    """A ROS enclave of its own for one graph's processes: a name in the ROS graph that tells
    its nodes from another graph's of the same names. '' where ROS security is on (an enclave
    then needs keys)."""
    if os.environ.get('ROS_SECURITY_ENABLE', '').lower() == 'true':
        return ''
    return f'/equimus_{os.getpid()}_{next(_GRAPHS)}'


def other_graphs(listed: Sequence[str], before: Sequence[str], own: str) -> list[str]:
    """The enclaves of valve drivers that belong to another graph: `listed` now, less those
    listed `before` this graph started (killed ones within their DDS lease) and this graph's
    `own` (without enclaves: one of the drivers in '/')."""
    others = collections.Counter(listed) - collections.Counter(before)
    if own:
        others.pop(own, None)
    else:
        others -= collections.Counter({'/': 1})
    return sorted(others)


def other_graph_problem(domain: str, enclave: str) -> str:
    """Why no lifecycle request is sent while another graph's driver is on the domain."""
    return (
        f'another graph started on ROS_DOMAIN_ID={domain} meanwhile (its valve_driver is in '
        f'enclave {enclave}): no lifecycle request is sent, since it would reach that graph '
        'too; stop it, or run each graph on its own ROS_DOMAIN_ID'
    )


def _drivers(node) -> list[tuple[str, str, str]]:
    return [
        (name, ns, enclave)
        for name, ns, enclave in node.get_node_names_and_namespaces_with_enclaves()
        if name == 'valve_driver'
    ]


class LifecycleClient:
    """Calls the lifecycle_msgs services of the graph's managed nodes (own rclpy context, so it
    never touches a context of the caller)."""

    _made = 0

    def __init__(self, env: dict[str, str], profile_loaded: bool = False) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        self._rclpy = rclpy
        self.context = graph_context(env, profile_loaded=profile_loaded)
        LifecycleClient._made += 1  # several in one process (tests): distinct node names
        self.node = rclpy.create_node(
            f'equimus_supervisor_{os.getpid()}_{LifecycleClient._made}',
            context=self.context,
            start_parameter_services=False,
        )
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._clients: dict[str, Any] = {}
        self.since = time.monotonic()  # on the domain since (DISCOVERY_SETTLE_S)

    def _client(self, node: str, srv=None):
        from lifecycle_msgs.srv import ChangeState

        srv = srv or ChangeState
        key = f'/{node}/{"get_state" if srv is not ChangeState else "change_state"}'
        if key not in self._clients:
            self._clients[key] = self.node.create_client(srv, key)
        return self._clients[key]

    def wait_for(self, node: str, alive: Callable[[], bool], timeout: float) -> None:
        """Until `node` answers get_state. A service listed is not enough: a killed process's
        stays listed for its DDS lease, and a request sent then would be lost."""
        from lifecycle_msgs.srv import GetState

        client = self._client(node, GetState)
        end = time.monotonic() + timeout
        while True:
            if not alive():
                raise GraphError(f'{node} exited before offering its lifecycle services')
            if time.monotonic() > end:
                raise GraphError(f'{node} did not answer /{node}/get_state within {timeout:g} s')
            if client.wait_for_service(timeout_sec=0.2):
                future = client.call_async(GetState.Request())
                self.executor.spin_until_future_complete(future, timeout_sec=1.0)
                if future.done():
                    return

    def change(self, node: str, transition: int, label: str, timeout: float) -> None:
        """One transition; GraphError if the node refuses it or does not answer."""
        from lifecycle_msgs.srv import ChangeState

        request = ChangeState.Request()
        request.transition.id = transition
        client = self._client(node)
        end = time.monotonic() + timeout
        # get_state answering does not mean change_state is discovered too (a separate service):
        # a request sent before it is matched is lost, which a loaded machine made happen ("did
        # not answer configure within 10 s" in a CI soak at load ~14).
        while not client.wait_for_service(timeout_sec=0.2):
            if time.monotonic() > end:
                raise GraphError(f'{node} did not offer /{node}/change_state within {timeout:g} s')
        future = client.call_async(request)
        self.executor.spin_until_future_complete(
            future, timeout_sec=max(end - time.monotonic(), 1.0)
        )
        if not future.done():
            raise GraphError(f'{node} did not answer {label} within {timeout:g} s')
        if not future.result().success:
            raise GraphError(f'{node} refused {label}: see its log above')

    def trigger(
        self, service: str, timeout: float, again_every: float | None = None
    ) -> tuple[bool, str]:
        """Call a std_srvs/Trigger service (e.g. /valve_driver/arm): (success, message).

        again_every: for a service that may be called twice (disarm, estop), the request is
        sent again after that many seconds without an answer, until `timeout`. The service
        can take a request before its reply writer has matched this client's reader, and
        rmw_fastrtps then gives up on the reply after 100 ms (a loaded run: `equimus valve
        estop` unanswered for 10 s); a new request is answered once they have matched."""
        from std_srvs.srv import Trigger

        client = self._clients.get(service)
        if client is None:
            client = self._clients[service] = self.node.create_client(Trigger, service)
        end = time.monotonic() + timeout
        if not client.wait_for_service(timeout_sec=timeout):
            return False, f'{service} is not offered'
        while True:
            future = client.call_async(Trigger.Request())
            left = end - time.monotonic()
            self.executor.spin_until_future_complete(
                future, timeout_sec=max(min(left, again_every or left), 0.0)
            )
            if future.done() or again_every is None or time.monotonic() >= end:
                break
            client.remove_pending_request(future)
        if not future.done():
            return False, f'{service} did not answer within {timeout:g} s'
        result = future.result()
        if result is None:
            return False, f'{service} answered nothing'
        return bool(result.success), str(result.message)

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self._rclpy.try_shutdown(context=self.context)


#: Lines of a process's output that `Supervisor.poll` quotes when it ended.
LAST_LINES = 12
#: At most this many lines of a crash's report (every thread's stack).
CRASH_LINES = 120


def last_words(lines: Sequence[str], code: int) -> str:
    """What to quote of a process that ended: its last LAST_LINES lines, or, after a signal
    (a native crash), its fault handler's whole report from "Fatal Python error", every
    thread's stack: the last lines alone showed only the crashing thread's frames, not what
    the others were doing (a node's SIGSEGV at start-up, docs/reliability.md)."""
    start = max(0, len(lines) - LAST_LINES)
    if code < 0:
        for i in range(len(lines) - 1, -1, -1):
            if lines[i].startswith('Fatal Python error'):
                start = min(start, max(i, len(lines) - CRASH_LINES))
                break
    return ''.join(lines[start:]).rstrip()


class Supervisor:
    """Start, watch and stop the processes of one graph."""

    def __init__(
        self,
        specs: Sequence[ProcessSpec],
        log_level: str = 'info',
        stop_timeout: float = 5.0,
        echo: bool = True,
        env: dict[str, str] | None = None,
        drivers_listed: Sequence[str] | None = None,
    ):
        self.specs = list(specs)
        #: The enclaves of the valve_driver nodes the domain listed before this graph started
        #: (prestart.check_domain: killed ones, within their DDS lease). A valve driver listed
        #: later in another enclave is another graph's, which a lifecycle request by name would
        #: reach too. None: not checked (the soak, on a domain of its own).
        self.drivers_listed = None if drivers_listed is None else list(drivers_listed)
        #: This graph's ROS enclave (`--enclave`): a name in the ROS graph that tells its nodes
        #: from another graph's of the same names. Not set where ROS security is on (an enclave
        #: then needs keys).
        self.enclave = graph_enclave()
        self.log_level = log_level
        self.stop_timeout = stop_timeout
        self.echo = echo
        self.env = dict(os.environ if env is None else env)
        self.env.setdefault('PYTHONUNBUFFERED', '1')
        self.env[OWNER_ENV] = str(os.getpid())  # its processes stop once this one is gone
        self.procs: dict[str, subprocess.Popen] = {}
        self.failed: str | None = None
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self.output: dict[str, list[str]] = {}
        self._lifecycle: LifecycleClient | None = None

    def check_realtime(self) -> None:
        """Refuse to start a graph whose real-time processes could not get their priority."""
        prio = max((s.rt_priority for s in self.specs), default=0)
        problem = realtime_problem(prio)
        if problem:
            raise GraphError(f'rt_priority:={prio} is not available here: {problem}')

    def start(self) -> None:
        """Start every process and bring the managed nodes up. If a step fails (GraphError,
        Ctrl-C), what was started is stopped before the error propagates: a failed start leaves
        no node behind on the domain, where a later graph's lifecycle requests would reach it."""
        self.check_realtime()
        try:
            if self.drivers_listed is not None and any(s.managed for s in self.specs):
                # On the domain before the processes start: they take seconds to come up,
                # time this node spends discovering who else is there (DISCOVERY_SETTLE_S).
                _ = self.lifecycle
            for spec in self.specs:
                self.output[spec.name] = []
                proc, t = self._spawn(spec)
                if spec.gate:
                    self._pass_gate(spec.name, proc, t)
            for spec in self.specs:
                self.bring_up(spec.name)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, spec: ProcessSpec) -> tuple[subprocess.Popen, threading.Thread]:
        """Start one process of the graph, its output pumped into `output[spec.name]`."""
        proc = subprocess.Popen(
            self.command(spec),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**self.env, **spec.env},
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self.procs[spec.name] = proc
        self.output.setdefault(spec.name, [])
        t = threading.Thread(target=self._pump, args=(spec.name, proc), daemon=True)
        t.start()
        self._threads.append(t)
        return proc, t

    def _pass_gate(self, name: str, proc: subprocess.Popen, pump: threading.Thread) -> None:
        """Wait for a gate process (the rig check) to end: exit 0 lets the graph go on, any
        other exit is a GraphError; it is no longer one of the graph's running processes."""
        code = proc.wait()
        pump.join(timeout=1.0)
        del self.procs[name]
        if code != 0:
            raise GraphError(
                f'{name} failed (exit code {code}): the rest of the graph was not started; '
                'its lines above say what to fix'
            )

    def command(self, spec: ProcessSpec) -> list[str]:
        """The process's command line, its ROS nodes in this graph's enclave."""
        cmd = command_for(spec, self.log_level)
        if spec.is_ros_node and self.enclave:
            cmd += ['--enclave', self.enclave]
        return cmd

    @property
    def lifecycle(self) -> LifecycleClient:
        if self._lifecycle is None:
            spec_env = next((s.env for s in self.specs if s.managed), {})
            self._lifecycle = LifecycleClient({**self.env, **spec_env})
        return self._lifecycle

    def bring_up(self, name: str) -> None:
        """Configure and activate `name` over its lifecycle services if it is a managed node."""
        from equimus_ros.lifecycle import BRING_UP

        spec = next(s for s in self.specs if s.name == name)
        if not spec.managed:
            return
        proc = self.procs[name]
        if name == 'valve_driver' and self.drivers_listed is not None:
            # get_state below is answered by any node of that name: first this graph's own
            # driver must be listed, and no other graph's.
            self._wait_own_driver(lambda: proc.poll() is None)
            self._refuse_other_driver()
        self.lifecycle.wait_for(name, lambda: proc.poll() is None, LIFECYCLE_SERVICE_TIMEOUT_S)
        for transition, label in BRING_UP:
            try:
                self.lifecycle.change(name, transition, label, LIFECYCLE_CALL_TIMEOUT_S)
            except GraphError as exc:
                # A refusal with another graph's driver listed by now: that is the reason.
                problem = self.other_driver() if name == 'valve_driver' else ''
                if problem:
                    raise GraphError(problem) from exc
                raise

    def _refuse_other_driver(self) -> None:
        """GraphError if another graph's valve_driver is listed, watched until this node has
        been on the domain for DISCOVERY_SETTLE_S and the nodes it lists have not changed for
        as long (discovery still under way), DISCOVERY_MAX_S at most."""
        since = self.lifecycle.since
        node = self.lifecycle.node
        listed = None
        changed = since
        while True:
            problem = self.other_driver()
            if problem:
                raise GraphError(problem)
            now = time.monotonic()
            names = {tuple(n) for n in node.get_node_names_and_namespaces_with_enclaves()}
            if listed is None:
                listed = names  # listed before this look: as old as the node, at most
            elif names != listed:
                listed, changed = names, now
            if now >= max(since, changed) + DISCOVERY_SETTLE_S or now >= since + DISCOVERY_MAX_S:
                return
            time.sleep(0.05)

    def vent_first(self) -> None:
        """Deactivate (vent) a running valve driver before the rest stops: a node died."""
        from lifecycle_msgs.msg import Transition

        spec = next((s for s in self.specs if s.name == 'valve_driver' and s.managed), None)
        proc = self.procs.get('valve_driver')
        if spec is None or proc is None or proc.poll() is not None:
            return
        problem = self.other_driver()
        if problem:  # the request would reach it too; this graph's driver vents on its SIGINT
            print(f'[equimus] {problem}', file=sys.stderr)
            return
        try:
            self.lifecycle.change(
                'valve_driver', Transition.TRANSITION_DEACTIVATE, 'deactivate', 2.0
            )
        except GraphError as exc:  # it still vents when it is stopped below
            print(f'[equimus] {exc}', file=sys.stderr)

    def arm_driver(self, timeout: float, watch: bool = True) -> None:
        """Arm the valve driver (/valve_driver/arm), asked again every 0.2 s while it refuses (a
        commander that has just gone is still on its view of the graph); GraphError after
        `timeout` s, or at once when a process of the graph has ended (`watch`; the soak, which
        kills its own, does not watch)."""
        end = time.monotonic() + timeout
        while True:
            failed = self.poll() if watch else None
            if failed:
                raise GraphError(failed)
            ok, message = self.lifecycle.trigger('/valve_driver/arm', timeout)
            if ok:
                return
            if time.monotonic() > end:
                raise GraphError(f'valve_driver did not arm: {message}')
            time.sleep(0.2)

    def _wait_own_driver(self, alive: Callable[[], bool]) -> None:
        end = time.monotonic() + LIFECYCLE_SERVICE_TIMEOUT_S
        while self.enclave and self.enclave not in driver_enclaves(self.lifecycle.node):
            if not alive():
                raise GraphError('valve_driver exited before offering its lifecycle services')
            if time.monotonic() > end:
                raise GraphError(
                    f'valve_driver did not appear on the ROS graph within '
                    f'{LIFECYCLE_SERVICE_TIMEOUT_S:g} s'
                )
            time.sleep(0.05)

    def other_driver(self) -> str:
        """'' unless another graph's valve_driver is on this graph's domain (see
        `drivers_listed`); then why lifecycle requests are not sent, in one line."""
        if self.drivers_listed is None:
            return ''
        others = other_graphs(
            driver_enclaves(self.lifecycle.node), self.drivers_listed, self.enclave
        )
        if not others:
            return ''
        env = {**self.env, **next((s.env for s in self.specs if s.managed), {})}
        return other_graph_problem(env.get('ROS_DOMAIN_ID', '0'), others[0])

    def _pump(self, name: str, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.output[name].append(line)
            if self.echo:
                sys.stdout.write(f'[{name}] {line}')
                sys.stdout.flush()

    def poll(self) -> str | None:
        """Name and exit code of the first process that ended while the graph runs, else None."""
        if self._stopping:
            return None
        for name, proc in self.procs.items():
            code = proc.poll()
            if code is not None:
                time.sleep(0.2)  # let the pump thread collect its last words
                tail = last_words(self.output.get(name, []), code)
                self.failed = f'{name} exited with code {code}' + (
                    f'; its last output:\n{tail}' if tail else ''
                )
                return self.failed
        return None

    def stop(self) -> dict[str, int]:
        """Interrupt each process in shutdown order and wait for it; returns exit codes."""
        if self.failed:
            self.vent_first()
        self._stopping = True
        codes: dict[str, int] = {}
        for spec in sorted(self.specs, key=lambda s: s.shutdown_rank):
            proc = self.procs.get(spec.name)  # a gate that has passed is gone
            if proc is None:
                continue
            if proc.poll() is None:
                self._signal(proc, signal.SIGINT)
                try:
                    proc.wait(self.stop_timeout)
                except subprocess.TimeoutExpired:
                    self._signal(proc, signal.SIGTERM)
                    try:
                        proc.wait(2.0)
                    except subprocess.TimeoutExpired:
                        self._kill_showing_stacks(proc)
            codes[spec.name] = proc.returncode
        for t in self._threads:
            t.join(timeout=1.0)
        if self._lifecycle is not None:
            self._lifecycle.close()
            self._lifecycle = None
        return codes

    def dump_stacks(self, names: Sequence[str]) -> dict[str, list[str]]:
        """Have the running processes `names` print their threads' Python stacks into their
        output (a node's STACK_DUMP_SIGNAL), and give them STACK_DUMP_WAIT_S to: where a live
        but silent node stands. Returns each one's `native_stacks`."""
        from equimus_ros.main import STACK_DUMP_SIGNAL

        running = {n: p for n in names if (p := self.procs.get(n)) is not None and p.poll() is None}
        for proc in running.values():
            self._signal(proc, STACK_DUMP_SIGNAL)
        if running:
            time.sleep(STACK_DUMP_WAIT_S)
        return {n: native_stacks(p.pid) for n, p in running.items()}

    @classmethod
    def _kill_showing_stacks(cls, proc: subprocess.Popen) -> None:
        """A process deaf to SIGINT and SIGTERM prints its threads' stacks into its log first,
        so the log says where it hung."""
        from equimus_ros.main import STACK_DUMP_SIGNAL

        cls._signal(proc, STACK_DUMP_SIGNAL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(STACK_DUMP_WAIT_S)
        cls._signal(proc, signal.SIGKILL)
        proc.wait()

    @staticmethod
    def _signal(proc: subprocess.Popen, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)

    def run_until(self, done=lambda: False, timeout: float | None = None) -> int:
        """Block until Ctrl-C/SIGTERM, `done()`, a node dying or `timeout`; then stop in order.

        Returns 0 for a clean run, 1 if a node died on its own.
        """
        interrupted = threading.Event()

        def _on_signal(signum, frame):
            interrupted.set()

        old = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        start = time.monotonic()
        try:
            while not interrupted.is_set() and not done():
                if self.poll():
                    break
                if timeout is not None and time.monotonic() - start > timeout:
                    break
                time.sleep(0.05)
        finally:
            codes = self.stop()
            for s, h in old.items():
                signal.signal(s, h)
        if self.failed:
            print(f'[equimus] graph stopped: {self.failed}', file=sys.stderr)
            return 1
        bad = {n: c for n, c in codes.items() if c not in (0, -signal.SIGINT, 130)}
        if bad:
            print(f'[equimus] unclean exits on shutdown: {bad}', file=sys.stderr)
        return 0
