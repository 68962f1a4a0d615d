"""Supervisor.start: a start that fails leaves no process behind (real processes)."""

import shutil
import sys

import orphans
import pytest

from equimus_bringup.graph import ProcessSpec
from equimus_bringup.supervisor import GraphError, Supervisor
from equimus_ros.owner import OWNER_POLL_S


def test_a_failed_start_stops_what_it_had_started():
    """A node started, then a gate (the rig check's place in a graph) that fails: the node is
    stopped before the GraphError reaches the caller, whoever the caller is (a test that
    forgot, once, left a live valve driver that answered the next graph's lifecycle calls)."""
    specs = [
        ProcessSpec('reference', 'equimus_control', 'reference'),
        ProcessSpec(
            'gate',
            'equimus_bringup',
            'equimus',
            is_ros_node=False,
            arguments=['check', 'rig', '--no-such-option'],
            gate=True,
        ),
    ]
    sup = Supervisor(specs, echo=False)
    with pytest.raises(GraphError, match='gate failed'):
        sup.start()
    node = sup.procs['reference']
    assert node.poll() is not None, 'the node started before the failed gate is still running'


def test_a_running_node_prints_its_threads_stacks_when_asked_and_runs_on():
    """Supervisor.dump_stacks: where a live but silent node stands (a rig phase's timeout shows
    it), without stopping it."""
    import time

    sup = Supervisor([ProcessSpec('reference', 'equimus_control', 'reference')], echo=False)
    sup.start()
    try:
        end = time.monotonic() + 30.0
        while not any('poses (rad)' in line for line in sup.output['reference']):  # constructed
            assert time.monotonic() < end, sup.output['reference']
            time.sleep(0.1)
        time.sleep(1.0)  # and spinning
        before = len(sup.output['reference'])
        native = sup.dump_stacks(['reference', 'not_a_process'])
        stacks = ''.join(sup.output['reference'][before:])
        # the main thread stands in run_node's spin, whichever executor it turns (the events
        # executor waits in C++, so rclpy's own frames need not show)
        assert 'most recent call first' in stacks and 'spin_until_shutdown' in stacks, stacks
        assert list(native) == ['reference'], native
        if shutil.which('gdb') is None:
            assert native['reference'] == ['native stacks: gdb is not installed']
        elif not native['reference'][0].startswith('native stacks: gdb could not attach'):
            # the node's own thread and the middleware's (DDS receive, events, timers)
            threads = native['reference']
            assert len(threads) >= 4 and all(' < ' in t for t in threads), threads
        assert sup.procs['reference'].poll() is None
    finally:
        codes = sup.stop()
    assert codes == {'reference': 0}, codes


SUPERVISOR = """
import sys, time
from equimus_bringup.graph import ProcessSpec
from equimus_bringup.supervisor import Supervisor
sup = Supervisor([ProcessSpec('reference', 'equimus_control', 'reference')], echo=False)
sup.start()
while not any('poses (rad)' in line for line in sup.output['reference']):
    time.sleep(0.1)
print(sup.procs['reference'].pid, flush=True)
time.sleep(120)
"""


def test_a_node_stops_once_its_supervisor_is_killed():
    """SIGKILL to the supervisor (`equimus adapt` killed at a test's time limit left its whole
    rig graph running): its node sees it gone and stops on its Ctrl-C path."""
    ended, state = orphans.kill_starter([sys.executable, '-c', SUPERVISOR], 2 * OWNER_POLL_S + 15)
    assert ended, f'the node outlived its supervisor: {state}'


def test_a_crash_is_quoted_with_every_threads_stack_and_an_exit_with_its_last_lines():
    from equimus_bringup.supervisor import LAST_LINES, last_words

    before = [f'[INFO] line {i}\n' for i in range(30)]
    crash = ['Fatal Python error: Segmentation fault\n', '\n']
    crash += [
        f'Thread 0x{i:x} (most recent call first):\n  File "x.py", line {i}\n' for i in range(20)
    ]
    crash += ['Current thread 0x1 (most recent call first):\n', '  File "node.py", line 132\n']
    lines = before + crash
    quoted = last_words(lines, -11)
    assert quoted.startswith('Fatal Python error: Segmentation fault'), quoted[:80]
    assert quoted.count('(most recent call first)') == 21 and 'line 29' not in quoted
    # an exit, not a signal: the last lines only
    assert last_words(lines, 1) == ''.join(lines[-LAST_LINES:]).rstrip()
    # a signal without a fault handler's report: the last lines too
    assert last_words(before, -9) == ''.join(before[-LAST_LINES:]).rstrip()
