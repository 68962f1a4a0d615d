"""The launch files run by the real ros2/launch and launch_ros code, as `ros2 launch` runs them.

Each variant is started with ../shared/tools/ros2_launch.py (the vendored launch code) on a DDS
domain of its own (claimed per test: nothing left over from another test or session can talk to
it), watched from this process on that domain, then stopped as a terminal's Ctrl-C stops it:
SIGINT to the launch process and every node at once. Passing means: no process died, the
graph's topics flowed, launch exited 0 and the valves were vented. Skipped, with the reason,
where ../shared is absent.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rosproc import vented_on_stop

from equimus_description.interface import ACTUATORS, JOINT_STATES, VALVE_APPLIED

pytestmark = pytest.mark.slow

HOLD_S = 1.0  # s the graph runs on once its topics flow, before the Ctrl-C
RUN_MAX_S = 60.0  # s at most waiting for its topics to flow (start-up on a loaded machine)
STOP_TIMEOUT_S = 40.0  # launch: SIGINT, then its own SIGTERM after 5 s and SIGKILL after 10 s
CHECK_MAX_S = 120.0  # s more with check:=true (the check holds 6 levels of 1.5 s per valve)
LAUNCH_ABORT_S = 5.0  # s for launch to print its threads' stacks on SIGABRT and end


@pytest.fixture(scope='module')
def ros2_launch():
    # EQUIMUS_SHARED is set by conftest.py when ../shared exists; these tests skip without it
    shared = os.environ.get('EQUIMUS_SHARED')
    tool = Path(shared) / 'tools' / 'ros2_launch.py' if shared else None
    if tool is None or not tool.is_file():
        pytest.skip(f'{tool or "../shared"} not found: the real launch code comes with ../shared')
    probe = subprocess.run(
        [sys.executable, str(tool), '--help'], capture_output=True, text=True, timeout=60
    )
    if probe.returncode != 0:
        pytest.fail(
            'the vendored launch code does not import (its PyPI dependencies are in '
            f'requirements-dev.txt: run scripts/setup.sh):\n{probe.stderr[-1500:]}'
        )
    return tool


@pytest.fixture
def watcher(private_node):
    """The test's node on a domain of its own; the launch started by `_launch` gets the same
    ROS_DOMAIN_ID."""
    return private_node


def _natnet_ports() -> list[str]:
    """Command and data ports free right now, not fixed ones: another session running the same
    test at the same time must not stream into this one's bridge."""
    from equimus_hw.natnet.ports import free_udp_ports

    ports = free_udp_ports(2)
    return [f'natnet_command_port:={ports[0]}', f'natnet_data_port:={ports[1]}']


def _flowing(seen: dict[str, list]) -> bool:
    applied = seen[VALVE_APPLIED.name]
    return (
        len(seen[JOINT_STATES.name]) > 50
        and len(applied) > 20
        and max(max(m.effort) for m in applied) > 1.0
    )


def _watch(ros_node, hold_s: float, run_max_s: float = RUN_MAX_S) -> dict[str, list]:
    """Messages of the graph seen from outside it until they flow as `_assert_clean` expects (at
    most `run_max_s`), and `hold_s` more: the graph keeps running in steady state before the test
    acts on it (a fixed run would only idle a graph that starts fast, or cut off a slow one)."""
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import JointState

    from equimus_ros.qos import qos_for

    seen: dict[str, list] = {JOINT_STATES.name: [], VALVE_APPLIED.name: []}
    for topic in (JOINT_STATES, VALVE_APPLIED):
        ros_node.create_subscription(
            JointState, topic.name, seen[topic.name].append, qos_for(topic)
        )
    executor = SingleThreadedExecutor(context=ros_node.context)
    executor.add_node(ros_node)
    start = time.monotonic()
    while not _flowing(seen) and time.monotonic() < start + run_max_s:
        executor.spin_once(timeout_sec=0.1)
    end = time.monotonic() + hold_s
    while time.monotonic() < end:
        executor.spin_once(timeout_sec=0.1)
    executor.remove_node(ros_node)
    return seen


def _start(
    tool, ros_node, file: str, *args: str, env: dict[str, str] | None = None, cwd=None
) -> subprocess.Popen[str]:
    """`ros2 launch equimus_bringup FILE ARGS` on the watcher's domain, in a session of its own
    (its process group is what a terminal's Ctrl-C reaches)."""
    return subprocess.Popen(
        # -X faulthandler: launch's own threads' stacks on the SIGABRT of _kill_and_show
        [sys.executable, '-X', 'faulthandler', str(tool), 'equimus_bringup', file, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=dict(
            os.environ,
            PYTHONUNBUFFERED='1',
            ROS_DOMAIN_ID=str(ros_node.context.get_domain_id()),
            **(env or {}),
        ),
        cwd=cwd,
    )


def _kill_and_show(proc: subprocess.Popen[str]) -> None:
    """A test that failed while its launch ran: the launch killed, what it printed shown with
    the failure (pytest's captured stdout), which the assertion alone would not say. Launch
    itself first gets SIGABRT, on which it prints where each of its threads stands (a launch
    once printed nothing for 40 s after its Ctrl-C)."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):  # read on below, none of it lost
            proc.communicate(timeout=LAUNCH_ABORT_S)
    with contextlib.suppress(ProcessLookupError):  # launch and all of its processes have ended
        os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    print(f'--- the launch printed (last 6000 characters):\n{(out or "")[-6000:]}')


def _child(proc: subprocess.Popen[str], executable: str) -> int:
    """The pid of the launch's one child running `executable` (e.g. lib/equimus_hw/valve_driver):
    launch's own log names it, but the pipe holds that log until it is read at the end."""
    found = subprocess.run(
        ['pgrep', '-f', '-P', str(proc.pid), executable], capture_output=True, text=True
    ).stdout.split()
    assert len(found) == 1, (executable, found)
    return int(found[0])


def _launch(
    tool,
    ros_node,
    file: str,
    *args: str,
    env: dict[str, str] | None = None,
    run_max_s: float = RUN_MAX_S,
    cwd: Path | None = None,
) -> tuple[int, str, dict[str, list]]:
    """Run one launch, Ctrl-C it HOLD_S after its topics flow (waiting at most `run_max_s`);
    (launch's exit code, its output, what was seen)."""
    proc = _start(tool, ros_node, file, *args, env=env, cwd=cwd)
    try:
        seen = _watch(ros_node, HOLD_S, run_max_s)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        out, _ = proc.communicate(timeout=STOP_TIMEOUT_S)
    except BaseException:
        _kill_and_show(proc)
        raise
    return proc.returncode, out, seen


def _assert_clean(rc: int, out: str, seen: dict[str, list], processes: int) -> None:
    tail = out[-4000:]
    crash = out.find('Fatal Python error')  # a process's own stack (faulthandler) on a crash
    assert 'process has died' not in out, (out[crash : crash + 6000] if crash >= 0 else '') + tail
    assert 'Caught exception' not in out and 'Traceback' not in out, tail
    started = re.findall(r'\[INFO\] \[(\S+)\]: process started', out)
    assert len(started) == processes, (started, tail)
    finished = re.findall(r'\[INFO\] \[(\S+)\]: process has finished cleanly', out)
    assert sorted(finished) == sorted(started), tail
    assert len(seen[JOINT_STATES.name]) > 50, tail  # the estimator ran on the leg's poses
    assert len(seen[VALVE_APPLIED.name]) > 20, tail  # the driver applied the controller's commands
    assert max(max(m.effort) for m in seen[VALVE_APPLIED.name]) > 1.0, tail  # really driven
    assert vented_on_stop(out), tail
    assert rc == 0, tail


_PENDING_TRANSITION = """
import sys, threading, time
import rclpy
from launch import LaunchContext
from launch_ros.actions import LifecycleNode
from lifecycle_msgs.srv import ChangeState
from equimus_bringup.launch_common import ManagedNode

rclpy.init()
for kind in (LifecycleNode, ManagedNode):
    ros = rclpy.create_node('launch_ros_stand_in')  # launch_ros's own node, destroyed at the end
    action = kind(package='none', executable='none', name='nobody', namespace='')
    action._LifecycleNode__rclpy_change_state_client = ros.create_client(
        ChangeState, '/nobody/change_state'
    )  # set by execute(); the service never appears: the node is still starting
    action._Node__final_node_name = '/nobody'  # also set by execute()
    context = LaunchContext()

    def stop(context=context, ros=ros):  # the launch ends while the transition waits
        time.sleep(0.3)
        ros.destroy_node()  # launch runs the newest handler first: the ROS adapter's shutdown,
        time.sleep(0.2)
        context._set_is_shutdown(True)  # then the launch service's own

    threading.Thread(target=stop).start()
    request = ChangeState.Request()
    request.transition.id = 1
    try:
        action._call_change_state(request, context)
        print(kind.__name__, 'returned', flush=True)
    except Exception as exc:
        print(kind.__name__, 'raised', type(exc).__name__, exc, flush=True)
    time.sleep(0.5)
"""


def _with_launch_code(ros2_launch, script: str) -> subprocess.CompletedProcess:
    """`script` run by Python with the vendored launch code importable."""
    vendor = ros2_launch.parent.parent / 'vendor' / 'ros2-launch'
    path = os.pathsep.join([str(vendor), str(vendor / 'stubs'), os.environ.get('PYTHONPATH', '')])
    return subprocess.run(
        [sys.executable, '-c', script],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=path),
    )


def test_a_transition_pending_when_the_launch_stops_is_abandoned(ros2_launch):
    """launch_ros's own LifecycleNode raises when the launch ends while a ChangeState waits for
    a node's service (the traceback and exit code 1 of a launch stopped during start-up);
    launch_common.ManagedNode abandons the transition with one line instead, also when launch
    destroys its node before it marks itself as stopping (its order; a CI run's failure)."""
    run = _with_launch_code(ros2_launch, _PENDING_TRANSITION)
    out = run.stdout + run.stderr
    assert 'LifecycleNode raised InvalidHandle' in out, out[-3000:]  # the race, reproduced
    assert 'ManagedNode returned' in out, out[-3000:]
    assert '/nobody: transition 1 abandoned, the launch is stopping' in out, out[-3000:]


_HELD_STOP = """
import time
import launch
from launch.actions import EmitEvent, OpaqueFunction, TimerAction
from launch.event_handlers import OnShutdown
from launch.events import Shutdown
from equimus_bringup import launch_common

launch_common.STOP_STALL_S = 1.0

def held_at_the_stop(event, context):  # launch_ros's ROS adapter joining a thread that hangs
    time.sleep(3.0)

def managed_node_executes(context):  # the adapter's handler comes first, then the watch
    context.register_event_handler(OnShutdown(on_shutdown=held_at_the_stop))
    launch_common._watch_the_stop(context)
    return []

service = launch.LaunchService()
service.include_launch_description(launch.LaunchDescription([
    OpaqueFunction(function=managed_node_executes),
    TimerAction(period=0.5, actions=[EmitEvent(event=Shutdown(reason='the test stops it'))]),
]))
print('launch returned', service.run(), flush=True)
"""


def test_a_launch_held_at_its_stop_prints_where_its_threads_stand(ros2_launch):
    """A launch whose stop hangs in launch_ros's ROS adapter (the one blocking step of the stop,
    whose handler exists before any of ours) prints its threads' stacks STOP_STALL_S after the
    stop, with the frame that holds it; here the hang is 3 s and the report due after 1 s."""
    run = _with_launch_code(ros2_launch, _HELD_STOP)
    assert 'launch returned 0' in run.stdout, run.stdout + run.stderr[-3000:]
    assert 'Timeout (0:00:01)!' in run.stderr, run.stderr[-3000:]
    assert 'in held_at_the_stop' in run.stderr, run.stderr[-3000:]


_GUARD_SETTLE = """
import time
from equimus_bringup.launch_common import DriverGuard, LISTED_SETTLE_S, _Stop
from equimus_bringup.supervisor import DISCOVERY_SETTLE_S

class Graph:
    # What the launch's node lists: its own driver at once, another graph's from `late` s on
    # (a participant that joined earlier, heard at a later announcement).
    def __init__(self, late):
        self.t0, self.late = time.monotonic(), late
    def get_node_names_and_namespaces_with_enclaves(self):
        listed = [('valve_driver', '/', '/mine')]
        if time.monotonic() - self.t0 >= self.late:
            listed.append(('valve_driver', '/', '/theirs'))
        return listed

late = LISTED_SETTLE_S + 0.5 * (DISCOVERY_SETTLE_S - LISTED_SETTLE_S)
for joined_ago in (0.0, DISCOVERY_SETTLE_S):
    guard = DriverGuard('/mine', [], '0', _Stop())
    guard.node_joined()
    guard.joined -= joined_ago
    t = time.monotonic()
    problem = guard.problem(Graph(late), lambda: False)
    print(f'joined {joined_ago:g} s ago: {time.monotonic() - t:.2f} s, {problem or "no other"}')
"""


def test_the_driver_guard_listens_as_long_as_discovery_can_take(ros2_launch):
    """Before the driver's first transition the guard listens until the launch's node has been
    on the domain for the supervisor's DISCOVERY_SETTLE_S (past Fast DDS's announcement period),
    not only LISTED_SETTLE_S after its own driver is listed: another graph's driver listed later
    than that is found (the race the supervisor lost in a CI run); with the node on the domain
    for long enough, the guard ends LISTED_SETTLE_S after its own driver is listed."""
    run = _with_launch_code(ros2_launch, _GUARD_SETTLE)
    out = run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert run.returncode == 0 and len(lines) == 2, out[-3000:]
    assert lines[0].startswith('joined 0 s ago') and 'enclave /theirs' in lines[0], out
    assert lines[1].endswith('no other'), out
    assert 0.9 < float(lines[1].split(': ')[1].split(' s')[0]) < 2.0, out


def test_sim_launch_as_the_readme_gives_it(ros2_launch, watcher):
    """The headline command with no argument at all: the composed graph under PID."""
    rc, out, seen = _launch(ros2_launch, watcher, 'sim.launch.py')
    _assert_clean(rc, out, seen, processes=1)


def test_a_required_process_that_dies_ends_the_launch(ros2_launch, watcher):
    """The split sim graph with its valve driver SIGKILLed: launch stops every other node on its
    own (after its stop grace, launch_common.STOP_GRACE_S), cleanly, with no traceback."""
    proc = _start(ros2_launch, watcher, 'sim.launch.py', 'composed:=false')
    try:
        seen = _watch(watcher, 0.0)
        assert _flowing(seen), seen
        os.kill(_child(proc, 'lib/equimus_hw/valve_driver'), signal.SIGKILL)
        out, _ = proc.communicate(timeout=STOP_TIMEOUT_S)  # ends with no Ctrl-C from here
    except BaseException:
        _kill_and_show(proc)
        raise
    tail = out[-4000:]
    assert re.search(r'\[ERROR\] \[valve_driver-\d+\]: process has died', out), tail
    assert 'Caught exception' not in out and 'Traceback' not in out, tail
    started = re.findall(r'\[INFO\] \[(\S+)\]: process started', out)
    finished = re.findall(r'\[INFO\] \[(\S+)\]: process has finished cleanly', out)
    assert sorted(finished) == sorted(n for n in started if not n.startswith('valve_driver')), tail


def test_required_processes_stopped_together_end_the_launch_once(ros2_launch, watcher, tmp_path):
    """The hardware graph's bridge and valve driver killed in the same instant: launch stops the
    rest on its own, once, with no transition sent to the driver that has gone and no second
    Shutdown (launch_ros: "Cannot shutdown a ROS adapter that is not running"); the board's own
    watchdog vents."""
    proc = _start(
        ros2_launch, watcher, 'hardware.launch.py', 'emulator:=true',
        f'serial_port:={tmp_path / "dac"}', *_natnet_ports(), 'auto_arm:=true',
    )  # fmt: skip
    try:
        seen = _watch(watcher, 0.0)
        assert _flowing(seen), seen
        pids = [
            _child(proc, f'lib/equimus_hw/{name}') for name in ('natnet_bridge', 'valve_driver')
        ]
        # launch held while both die, so that it learns of both exits in one turn of its loop
        # (as a loaded machine made it do): their stop timers then expire together
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=STOP_TIMEOUT_S)  # ends with no Ctrl-C from here
    except BaseException:
        _kill_and_show(proc)
        raise
    tail = out[-4000:]
    assert 'Caught exception' not in out and 'Traceback' not in out, tail
    assert 'bandon' not in out, tail  # no transition sent to the driver that had exited
    assert "sending signal 'SIGINT' to process[rig_emulator" in out, tail  # stopped by launch
    started = re.findall(r'\[INFO\] \[(\S+)\]: process started', out)
    finished = re.findall(r'\[INFO\] \[(\S+)\]: process has finished cleanly', out)
    killed = ('natnet_bridge', 'valve_driver')
    assert len(started) == 7, tail
    assert sorted(finished) == sorted(n for n in started if not n.startswith(killed)), tail
    assert re.search(r'rig_emulator: .* outputs at stop \[0, 0\]', out), tail
    assert proc.returncode == 0, tail


def test_an_emulated_rig_that_cannot_start_ends_the_launch(ros2_launch, watcher, tmp_path):
    """hardware.launch.py emulator:=true with the NatNet data port already taken: the rig
    emulator says so in one line and exits, leaving no board link behind, and the launch ends on
    its own, every other process cleanly, also the transitions it had not sent yet. Before, the
    emulator's exit was not required: the graph idled, vented, waiting for poses that never
    came (a CI run's failure, when another process took a port the test had found free)."""
    import socket

    from equimus_hw.natnet.ports import free_udp_ports

    command, data = free_udp_ports(2)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(('127.0.0.1', data))
        proc = _start(
            ros2_launch, watcher, 'hardware.launch.py', 'emulator:=true', 'auto_arm:=true',
            f'serial_port:={tmp_path / "dac"}', f'natnet_command_port:={command}',
            f'natnet_data_port:={data}',
        )  # fmt: skip
        try:
            out, _ = proc.communicate(timeout=RUN_MAX_S)  # no Ctrl-C from here
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            pytest.fail(f'the launch did not end on its own:\n{out[-4000:]}')
    tail = out[-4000:]
    assert f'rig_emulator: cannot bind NatNet 127.0.0.1 ports {command}/{data}' in out, tail
    assert re.search(r'\[ERROR\] \[rig_emulator-\d+\]: process has died .*exit code 2', out), tail
    assert 'Caught exception' not in out and 'Traceback' not in out, tail
    started = re.findall(r'\[INFO\] \[(\S+)\]: process started', out)
    finished = re.findall(r'\[INFO\] \[(\S+)\]: process has finished cleanly', out)
    assert len(started) == 7, tail
    assert sorted(finished) == sorted(n for n in started if not n.startswith('rig_emulator')), tail
    assert not (tmp_path / 'dac').exists()


#: Put first on the launch's PYTHONPATH: its valve driver waits at interpreter start, before
#: it imports rclpy, until the file named by EQUIMUS_TEST_GO exists (the other processes go on).
_HOLD_DRIVER = """
import os, sys, time
if sys.argv and sys.argv[0].endswith('valve_driver'):
    go = os.environ['EQUIMUS_TEST_GO']
    open(go + '.held', 'w').close()
    while not os.path.exists(go):
        time.sleep(0.01)
"""


def test_a_graph_started_on_the_domain_meanwhile_is_never_driven(ros2_launch, watcher, tmp_path):
    """Another graph's valve driver joins the domain after this launch's prestart listened and
    before its own driver is up (held here before it joins DDS). Once its own is listed, the
    launch finds the other in another enclave: it sends no lifecycle request, which would reach
    both drivers by name, and ends with one line (launch_common.DriverGuard). Without the guard
    it configured and activated by name."""
    from equimus_bringup.graph import describe_graph
    from equimus_bringup.supervisor import Supervisor, driver_enclaves

    domain = str(watcher.context.get_domain_id())
    hold = tmp_path / 'hold'
    hold.mkdir()
    (hold / 'sitecustomize.py').write_text(_HOLD_DRIVER)
    go = tmp_path / 'go'
    env = {
        'PYTHONPATH': os.pathsep.join([str(hold), os.environ.get('PYTHONPATH', '')]),
        'EQUIMUS_TEST_GO': str(go),
    }
    proc = _start(
        ros2_launch, watcher, 'sim.launch.py', 'composed:=false', 'sim_mode:=realtime', env=env
    )
    other = None
    try:
        end = time.monotonic() + 90.0
        while not Path(f'{go}.held').exists():
            assert proc.poll() is None and time.monotonic() < end, 'no valve driver started'
            time.sleep(0.01)
        try:
            split = describe_graph('sim', {'composed': 'false'})
            driver = next(s for s in split if s.name == 'valve_driver')
            other = Supervisor([driver], echo=False, env=dict(os.environ, ROS_DOMAIN_ID=domain))
            other.start()  # brings its driver up; this launch's, held, is not on DDS yet
            end = time.monotonic() + 60.0
            while other.enclave not in driver_enclaves(watcher):
                assert time.monotonic() < end, 'the other graph never appeared'
                time.sleep(0.05)
        finally:
            go.touch()
        try:
            out, _ = proc.communicate(timeout=90.0)  # ends by itself
        except subprocess.TimeoutExpired as running:  # killed below
            said = running.output or ''
            said = said if isinstance(said, str) else said.decode(errors='replace')
            raise AssertionError(f'the launch ran on:\n{said[-6000:]}') from None
    except BaseException:
        _kill_and_show(proc)
        raise
    finally:
        if other is not None:
            other_log = ''.join(other.output.get('valve_driver', []))
            other.stop()
    tail = out[-4000:]
    assert out.count(f'another graph started on ROS_DOMAIN_ID={domain} meanwhile') == 1, tail
    assert f'enclave {other.enclave}' in out, tail
    assert 'configured: board' not in out, tail  # this launch's driver was never configured
    # Launch's own lines carry no process tag: no traceback there. (Nodes stopped while still
    # starting may print rclpy's "Exception ignored in: Executor.__del__", tagged with the node.)
    assert not re.search(r'^Traceback', out, re.M) and 'Caught exception' not in out, tail
    # the other graph's driver saw its own two transitions only
    assert re.findall(r'\]: (configured|active|deactivated)\b', other_log) == [
        'configured',
        'active',
    ], other_log[-3000:]


def test_sim_launch_composed_mpc_recorded(ros2_launch, watcher, tmp_path):
    """The headline command with the README's example arguments: one process, recorded; rviz:=true
    on a machine without rviz2 says how to get it and runs the graph on."""
    bag = tmp_path / 'bag'
    rc, out, seen = _launch(
        ros2_launch,
        watcher,
        'sim.launch.py',
        'controller:=mpc',
        'record:=true',
        f'bag:={bag}',
        'rviz:=true',
        env={'AMENT_PREFIX_PATH': _without_rviz2()},
    )
    _assert_clean(rc, out, seen, processes=1)
    assert 'rviz:=true: rviz2 is not installed here' in out, out[-2000:]
    from equimus_record.bag import is_complete, topic_counts

    assert is_complete(bag), out[-2000:]
    counts = topic_counts(bag)
    assert counts[JOINT_STATES.name][1] > 50 and counts[VALVE_APPLIED.name][1] > 50


def _without_rviz2() -> str:
    """AMENT_PREFIX_PATH without any prefix that holds rviz2 (a ROS machine has it)."""
    from ament_index_python.packages import get_packages_with_prefixes

    holder = get_packages_with_prefixes().get('rviz2')
    prefixes = os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep)
    return os.pathsep.join(p for p in prefixes if p and p != holder)


STAND_IN_RVIZ = """#!{python}
import pathlib, signal, sys, time
pathlib.Path({record!r}).write_text('\\n'.join(sys.argv[1:]))
signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
while True:
    time.sleep(0.1)
"""


def test_sim_launch_split_with_rviz(ros2_launch, watcher, tmp_path):
    """One process per node; rviz:=true starts rviz2 on the installed config. rviz2 is a stand-in
    executable in an ament prefix of its own here (no rviz2 on this machine)."""
    prefix = tmp_path / 'prefix'
    (prefix / 'share/ament_index/resource_index/packages').mkdir(parents=True)
    (prefix / 'share/ament_index/resource_index/packages/rviz2').write_text('')
    (prefix / 'lib/rviz2').mkdir(parents=True)
    record = tmp_path / 'rviz_args'
    exe = prefix / 'lib/rviz2/rviz2'
    exe.write_text(STAND_IN_RVIZ.format(python=sys.executable, record=str(record)))
    exe.chmod(0o755)
    path = os.pathsep.join([str(prefix), _without_rviz2()])
    rc, out, seen = _launch(
        ros2_launch,
        watcher,
        'sim.launch.py',
        'composed:=false',
        'rviz:=true',
        env={'AMENT_PREFIX_PATH': path},
    )
    _assert_clean(rc, out, seen, processes=7)
    args = record.read_text().split('\n')
    config = args[args.index('-d') + 1]
    assert config.endswith('share/equimus_bringup/viewers/equimus.rviz') and os.path.isfile(config)


def test_hardware_launch_emulated_rig(ros2_launch, watcher, tmp_path):
    """Real NatNet over UDP and the real serial protocol on a pty; non-default ports and serial
    device, armed from the command line (the hardware default is disarmed)."""
    rc, out, seen = _launch(
        ros2_launch,
        watcher,
        'hardware.launch.py',
        'emulator:=true',
        f'serial_port:={tmp_path / "dac"}',
        *_natnet_ports(),
        'auto_arm:=true',
    )
    _assert_clean(rc, out, seen, processes=7)
    assert re.search(r'rig_emulator: .* outputs at stop \[0, 0\]', out), out[-2000:]


def test_hardware_launch_fused_loop_takes_its_arguments(ros2_launch, watcher, tmp_path):
    """The fused process holds bridge, estimator, controller and driver: the serial device, the
    NatNet ports and auto_arm given to launch must reach them (not the files' defaults)."""
    rc, out, seen = _launch(
        ros2_launch,
        watcher,
        'hardware.launch.py',
        'emulator:=true',
        'fused_loop:=true',
        f'serial_port:={tmp_path / "dac"}',
        *_natnet_ports(),
        'auto_arm:=true',
    )
    _assert_clean(rc, out, seen, processes=4)
    assert re.search(r'rig_emulator: .* outputs at stop \[0, 0\]', out), out[-2000:]


def test_hardware_launch_check_first_on_a_new_rig(ros2_launch, watcher, tmp_path):
    """check:=true on the emulated rig, which has no calibration yet: the rig check runs after the
    rig emulator and before any node, writes the calibration beside the board's link, and the
    valve driver starts on that file; then the graph runs as usual."""
    from equimus_hw.natnet.ports import free_udp_port_pair
    from equimus_hw.valve.calibration import load_calibration

    port = free_udp_port_pair()
    link = tmp_path / 'dac'
    cal = f'{link}.calibration.yaml'
    rc, out, seen = _launch(
        ros2_launch,
        watcher,
        'hardware.launch.py',
        'emulator:=true',
        'check:=true',
        'check_hold:=1.0',  # the emulated valve's τ is 0.2 s
        f'serial_port:={link}',
        f'natnet_command_port:={port}',
        f'natnet_data_port:={port + 1}',
        'auto_arm:=true',
        run_max_s=RUN_MAX_S + CHECK_MAX_S,
        cwd=tmp_path,  # the check's report folder (rig_checks/<time>) is made where launch runs
    )
    _assert_clean(rc, out, seen, processes=8)  # the 7 of the emulated rig's graph, the check
    assert re.search(r'\[rig_check-\d+\]: process has finished cleanly', out), out[-3000:]
    assert f'calibration written to {cal}' in out, out[-3000:]
    load_calibration(cal, ACTUATORS)
    checked = out.index(f'calibration written to {cal}')
    started = re.search(r'\[INFO\] \[(valve_driver|natnet_bridge)\S*\]: process started', out)
    assert started and started.start() > checked, out[:4000]  # no node before the check passed
    assert f'calibration {cal}' in out[checked + 1 :], out[-3000:]  # the driver loaded it
    assert re.search(r'rig_emulator: .* outputs at stop \[0, 0\]', out), out[-2000:]
    assert len(list(tmp_path.glob('rig_checks/*/report.txt'))) == 1


def test_hardware_launch_on_a_new_rig_says_what_to_run(ros2_launch, tmp_path):
    """A real rig without a calibration file (the default, in the user's configuration folder):
    launch ends with one line naming `equimus check rig` with the rig's arguments as given;
    nothing is started."""
    config = tmp_path / 'config'
    out, rc = _refused(
        ros2_launch,
        'hardware.launch.py',
        ['serial_port:=/dev/ttyACM7', 'natnet_server:=10.0.0.2', 'controller:=mpc'],
        env={'XDG_CONFIG_HOME': str(config)},
    )
    errors = [x for x in out.splitlines() if 'ERROR' in x]
    assert rc != 0 and len(errors) == 1, out
    assert f'no valve calibration at {config}/equimus/valve_calibration.yaml' in errors[0], out
    assert (
        'run `equimus check rig serial_port:=/dev/ttyACM7 natnet_server:=10.0.0.2`' in (errors[0])
    ), out
    assert 'check:=true' in errors[0] and 'process started' not in out, out


def _refused(
    tool, file: str, args: list[str], env: dict[str, str] | None = None
) -> tuple[str, int]:
    """A launch expected to end before starting anything: (its output, its exit code)."""
    proc = subprocess.Popen(
        [sys.executable, str(tool), 'equimus_bringup', file, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env=dict(os.environ, **(env or {})),
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=120)
    finally:  # had it started a graph after all, none of it outlives the test
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return stdout + stderr, proc.returncode


@pytest.mark.parametrize(
    ('args', 'says'),
    [
        (['record:=maybe'], 'record:=maybe is not a boolean'),
        (['controller:=mpc', 'params_file:={bad}'], 'p_maxx: unknown parameter of controller'),
    ],
)
def test_launch_file_refuses_bad_input_before_any_action(ros2_launch, tmp_path, args, says):
    """The launch file's OpaqueFunction checks everything first: launch ends with its one error
    line, no process is started, no bag is made."""
    bad = tmp_path / 'bad.yaml'
    bad.write_text('controller:\n  ros__parameters:\n    p_maxx: 40.0\n')
    bag = tmp_path / 'bag'
    out, rc = _refused(
        ros2_launch,
        'sim.launch.py',
        ['record:=true', f'bag:={bag}', *(a.format(bad=bad) for a in args)],
    )
    assert rc != 0, out
    errors = [x for x in out.splitlines() if 'ERROR' in x]
    assert len(errors) == 1 and says in errors[0] and 'equimus: not started' in errors[0], out
    assert 'process started' not in out and 'Traceback' not in out, out
    assert not bag.exists()
