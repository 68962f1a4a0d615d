"""equimus_ros.main.run_node: the shared main() of every node, with real rclpy processes."""

import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest

CASES = pathlib.Path(__file__).with_name('node_main_cases.py')


def _run(case, timeout=30):
    return subprocess.run(
        [sys.executable, str(CASES), case], capture_output=True, text=True, timeout=timeout
    )


def _started(case: str, **popen) -> subprocess.Popen:
    """A case process, once it printed 'ready' (its node is built)."""
    proc = subprocess.Popen(
        [sys.executable, str(CASES), case],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )
    assert proc.stdout.readline().strip() == 'ready'
    return proc


def _ended(proc: subprocess.Popen, timeout: float, doing: str) -> tuple[str, str]:
    """The process's output once it exited; a failure naming what it was `doing` if it had not
    within `timeout` s (it is killed)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f'still {doing} {timeout:g} s after SIGINT: {err[-3000:]}')


def test_invalid_parameters_exit_2_with_the_reason_and_no_traceback():
    proc = _run('bad_parameters')
    assert proc.returncode == 2, proc.stderr
    assert 'BadParameters: invalid parameters: parameter gain=-1: must be positive.' in proc.stderr
    assert 'Fix config/x.yaml.' in proc.stderr
    assert 'Traceback' not in proc.stderr


def test_a_bug_while_spinning_exits_1_with_its_traceback_and_the_node_is_still_closed():
    proc = _run('bug_in_spin')
    assert proc.returncode == 1
    assert proc.stderr.count('Traceback (most recent call last)') == 1, proc.stderr
    assert 'RuntimeError: a bug, not a shutdown' in proc.stderr
    assert 'Listener: stopped by the error above; closing it' in proc.stderr, proc.stderr
    assert 'closed Listener' in proc.stdout


def test_an_rcl_error_once_the_context_is_down_is_a_clean_shutdown():
    proc = _run('error_at_shutdown')
    assert proc.returncode == 0, proc.stderr
    assert 'Traceback' not in proc.stderr
    assert 'closed Listener' in proc.stdout


def test_start_up_objects_are_frozen_before_spinning():
    """Full garbage collections in the loop must not scan modules and models built at start-up."""
    proc = _run('gc')
    assert proc.returncode == 0, proc.stderr
    frozen, tracked = (int(w) for w in proc.stdout.split('frozen ')[1].split()[::2][:2])
    assert frozen > 10_000 and tracked < frozen / 10, proc.stdout


@pytest.mark.slow
def test_ctrl_c_while_messages_are_being_converted_is_a_clean_shutdown():
    """Ctrl-C under a flood of messages that are costly to convert: exit 0, node closed, no
    traceback.

    A KeyboardInterrupt raised inside rclpy's message conversion once surfaced in CI as
    'RuntimeError: Unable to convert call argument'. A stand-alone script of this kind hit it in 5
    of 55 stops; the race is load-dependent, so this test catches a regression only sometimes.
    """
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

    rclpy.init()
    node = rclpy.create_node('flooder')
    pub = node.create_publisher(DiagnosticArray, '/flood', 100)
    heavy = DiagnosticArray(
        status=[
            DiagnosticStatus(name=str(i), values=[KeyValue(key='k', value='v')] * 5)
            for i in range(300)
        ]
    )
    stop = threading.Event()

    def flood():
        while not stop.is_set():
            pub.publish(heavy)

    flooder = threading.Thread(target=flood, daemon=True)
    flooder.start()
    failures = []
    try:
        for i in range(10):
            proc = subprocess.Popen(
                [sys.executable, str(CASES), 'listen'],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            assert proc.stdout.readline().strip() == 'ready'
            time.sleep(0.4 + 0.013 * (i % 7))
            proc.send_signal(signal.SIGINT)
            out = proc.communicate(timeout=20)[0]
            if proc.returncode != 0 or 'Traceback' in out or 'closed Listener' not in out:
                failures.append(f'exit {proc.returncode}: {out[-800:]}')
    finally:
        stop.set()
        flooder.join(timeout=5)
        node.destroy_node()
        rclpy.try_shutdown()
    assert not failures, f'{len(failures)} of 10 stops failed; first:\n{failures[0]}'


def test_several_nodes_in_one_process_spin_together_and_stop_in_order():
    """The fused control loop's main: node-scoped parameters, one executor, close, then destroy
    in list order on Ctrl-C."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(CASES),
            'two_nodes',
            '--ros-args',
            '-p',
            'upstream:tag:=a',
            '-p',
            'downstream:tag:=b',
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == 'ready'
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0 and 'Traceback' not in err, err
    assert 'Timeout' not in err, err  # a quick stop prints no stacks
    lines = out.splitlines()
    assert 'tick upstream a' in lines and 'tick downstream b' in lines, out
    tail = [line for line in lines if not line.startswith('tick')]
    assert tail == ['closed upstream,downstream', 'destroyed upstream', 'destroyed downstream'], out


def test_sigusr1_prints_every_threads_stack_and_the_node_goes_on():
    """How a node that does not stop shows where it hangs: the stacks, then it still runs and
    stops cleanly on Ctrl-C."""
    from equimus_ros.main import STACK_DUMP_SIGNAL

    proc = _started('listen')
    proc.send_signal(STACK_DUMP_SIGNAL)
    time.sleep(1.0)
    assert proc.poll() is None, 'the stack dump stopped the node'
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0 and 'closed Listener' in out, err
    assert 'Current thread' in err or 'Thread 0x' in err, err
    assert 'in run_node' in err, err  # the main thread's stack: where it stood


def test_the_supervisor_kills_a_hung_node_after_it_printed_its_stacks():
    from equimus_bringup.supervisor import Supervisor

    proc = _started('listen', start_new_session=True)
    Supervisor._kill_showing_stacks(proc)
    err = proc.stderr.read()
    assert proc.returncode == -signal.SIGKILL
    assert 'in run_node' in err, err


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM])
def test_a_stop_that_hangs_prints_where_and_the_node_still_closes(sig):
    """Still running STOP_STACKS_AFTER_S after the signal: every thread's stack on stderr (the
    main thread in the slow close), then the close completes and the exit is clean."""
    proc = _started('slow_close')
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and 'closed slowly' in out, err
    assert 'Timeout (0:00:04)!' in err and 'in _close_slowly' in err, err


def test_a_stop_signal_ends_the_spin_even_if_rclpy_s_handler_does_nothing():
    """The stop watch shuts the context down and wakes the executor of a node that nothing else
    would wake (without it this process waits for ever)."""
    proc = _started('no_rclpy_signal_handlers')
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = _ended(proc, 20, 'spinning')
    assert proc.returncode == 0 and 'closed' in out, err


def _stopped_with_a_hung_teardown(case: str, stop: bool):
    """Run `case` to its end: stopped with Ctrl-C (`stop`), or ending by its own bug; (process,
    stdout, stderr, s from the stop or the start to the exit)."""
    if stop:
        proc = _started(case)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
    else:
        proc = subprocess.Popen(
            [sys.executable, str(CASES), case], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=40)
    return proc, out, err, time.monotonic() - t0


@pytest.mark.parametrize(
    'case, code', [('hung_teardown', 0), ('bug_then_hung_teardown', 1)], ids=['stop', 'bug']
)
def test_a_teardown_that_never_returns_ends_after_the_limit_with_the_stops_code(case, code):
    """The node closes; its teardown (the DDS participant's deletion) does not return: the
    process says so, shows where, and exits after TEARDOWN_LIMIT_S with the code the stop or the
    bug would have given (launch would otherwise kill it: exit -9)."""
    from equimus_ros.main import TEARDOWN_LIMIT_S

    proc, out, err, took = _stopped_with_a_hung_teardown(case, stop=case == 'hung_teardown')
    assert proc.returncode == code, (out, err)
    assert 'closed HungTeardown' in out and 'tearing down' in out, out
    assert 'did not finish tearing the node down' in err and 'in destroy_node' in err, err
    assert ('a bug, not a shutdown' in err) == (case == 'bug_then_hung_teardown'), err
    assert took < TEARDOWN_LIMIT_S + 15.0, took  # not the 60 s the teardown would take


@pytest.mark.parametrize(
    'case, code', [('gil_held_teardown', 0), ('bug_then_gil_held_teardown', 1)], ids=['stop', 'bug']
)
def test_a_teardown_that_holds_the_gil_is_ended_from_c_with_the_stops_code(case, code):
    """The same hang holding the GIL (no Python thread can run): faulthandler's thread prints the
    stacks and a C library timer's thread exits shortly after the limit, with the code the stop
    or the bug would have given (launch reads 1 as a failed node), not after the 60 s hang; the
    bug's traceback was printed before the teardown began, so the hang does not lose it."""
    from equimus_ros.main import TEARDOWN_GIL_HELD_S, TEARDOWN_LIMIT_S

    proc, out, err, took = _stopped_with_a_hung_teardown(case, stop=case == 'gil_held_teardown')
    assert proc.returncode == code, (out, err)
    assert 'closed GilHeldTeardown' in out and 'tearing down' in out, out
    assert 'in destroy_node' in err and 'did not finish tearing' not in err, err
    bug = case == 'bug_then_gil_held_teardown'
    assert ('RuntimeError: a bug, not a shutdown' in err) == bug, err
    assert err.count('Traceback (most recent call last)') == int(bug), err
    assert took < TEARDOWN_LIMIT_S + TEARDOWN_GIL_HELD_S + 15.0, took


def test_a_stop_signal_during_a_gil_held_teardown_does_not_disarm_its_exit():
    """faulthandler keeps one timer: the stop watch's stack dump, armed by a signal that arrives
    once the teardown has begun (a loaded machine schedules the watch late), must not replace the
    teardown's exit, or the process hangs for as long as the teardown does."""
    from equimus_ros.main import TEARDOWN_GIL_HELD_S, TEARDOWN_LIMIT_S

    proc = _started('late_signal_gil_held_teardown')
    assert proc.stdout.readline().strip() == 'closed LateSignalGilHeldTeardown'
    assert proc.stdout.readline().strip() == 'tearing down'
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    out, err = _ended(proc, 30, 'tearing down')
    took = time.monotonic() - t0
    assert proc.returncode == 0, (out, err)
    assert 'in destroy_node' in err, err
    assert took < TEARDOWN_LIMIT_S + TEARDOWN_GIL_HELD_S + 15.0, took
