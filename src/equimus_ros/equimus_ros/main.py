"""The body of every equimus node's ``main()``: init, spin, and always close the node cleanly.

Ctrl-C and SIGTERM are handled by rclpy: its signal handler shuts the context down and the
executor raises ExternalShutdownException. Python's own KeyboardInterrupt is switched off for the
node's lifetime because it can fire inside rclpy while a message is being converted, where it
surfaces as "RuntimeError: Unable to convert call argument" from take_message instead of as a
shutdown. A node still running STOP_STACKS_AFTER_S after the signal prints its threads' stacks.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import TypeVar

import rclpy
from rclpy.exceptions import ParameterException
from rclpy.executors import Executor, ExternalShutdownException
from rclpy.node import Node

from equimus_ros import hard_exit, paramfiles
from equimus_ros.executors import single_thread_executor, spin_until_shutdown
from equimus_ros.owner import stop_with_supervisor

#: What a node factory builds: one node, or the nodes that share one process.
N = TypeVar('N', bound=Node | list[Node])

#: How long a RuntimeError may precede the signal's context shutdown and still count as shutdown.
SHUTDOWN_GRACE_S = 0.5

#: GIL switch interval of every node process. A thread woken by a frame (a socket, a serial
#: ACK, a DDS message) waits this long for a busy Python thread of its process to hand over the
#: GIL; CPython's default is 5 ms, which showed as the ~5 ms p99 of the control path.
GIL_SWITCH_INTERVAL_S = 0.0005

EXIT_OK = 0
EXIT_BUG = 1  # an exception that propagated out of the node (Python's own code for it)
EXIT_INVALID_PARAMETERS = 2

#: s the middleware may take to tear a closed node down. rclpy's destroy_node deletes the DDS
#: participant, and under load Fast DDS has been seen not to return from it at all (the test
#: suite's launch runs, docs/reliability.md), after which launch kills the process (exit -9).
#: Past this limit the process exits on its own: the node has closed (vented, bag written), the
#: kernel frees what is left, and other participants see it leave by its lease.
TEARDOWN_LIMIT_S = 2.5
#: s past TEARDOWN_LIMIT_S after which a teardown that holds the GIL is ended (its stacks, then
#: the stop's exit code)
TEARDOWN_GIL_HELD_S = 1.0
#: s between that stack dump and the exit (faulthandler's thread writes the stacks meanwhile)
TEARDOWN_DUMP_TO_EXIT_S = 0.25

#: ``kill -USR1 <pid>`` makes a node print every thread's Python stack and go on running: how a
#: node that does not stop, or stands still, shows where it is (the supervisor and the tests send
#: it before they kill a process that ignored Ctrl-C and SIGTERM).
STACK_DUMP_SIGNAL = signal.SIGUSR1

#: s after the first Ctrl-C or SIGTERM at which a node that has not exited prints every thread's
#: stack (launch escalates to SIGTERM after 5 s and kills after 15 s): a stop that hangs says
#: where, and a slow one (a long vent or flush) shows what it waits for.
STOP_STACKS_AFTER_S = 4.0


class _LaterDump:
    """faulthandler's one timed stack dump, shared by the stop watch and the teardown limit.

    faulthandler keeps a single timer and arming it replaces the one armed before. The stop
    watch's dump (stacks, go on) must never replace the teardown's (stacks, then exit): a loaded
    machine can schedule the watch after the teardown has begun, and a teardown that holds the
    GIL would then hang for as long as it holds it.
    """

    _lock = threading.Lock()
    _exit_armed = False
    _hard_exit: hard_exit.HardExit | None = None

    @classmethod
    def stacks(cls, after_s: float) -> None:
        with cls._lock:
            if not cls._exit_armed:
                faulthandler.dump_traceback_later(after_s)

    @classmethod
    def exit(cls, after_s: float, code: int) -> None:
        """The stacks `after_s` from now, then exit `code` from a C thread (hard_exit); where
        that is not available, faulthandler's own exit (code 1)."""
        with cls._lock:
            cls._exit_armed = True
            cls._hard_exit = hard_exit.arm(after_s + TEARDOWN_DUMP_TO_EXIT_S, code)
            faulthandler.dump_traceback_later(after_s, exit=cls._hard_exit is None)

    @classmethod
    def cancel(cls) -> None:
        with cls._lock:
            cls._exit_armed = False
            faulthandler.cancel_dump_traceback_later()
            if cls._hard_exit is not None:
                cls._hard_exit.cancel()
                cls._hard_exit = None


class _Interrupts:
    """Ctrl-C or SIGTERM seen before rclpy's handler was installed (it would otherwise be lost,
    or kill the node before it could close)."""

    received = False

    @classmethod
    def note(cls, signum, frame) -> None:
        cls.received = True


def _quiet_python_sigint() -> None:
    # Must precede rclpy.init: rclpy chains its handler to the one installed here, and
    # re-installing a Python handler afterwards would replace rclpy's.
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _Interrupts.note)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _Interrupts.note)


class _StopWatch:
    """What happens after the first SIGINT or SIGTERM, seen on a thread of its own.

    The signals reach it through Python's wakeup fd (written by the C-level handler that rclpy
    chains to), so neither the main thread nor rclpy's own signal thread is needed. It then
    - wakes the executor once the context is down: rclpy's signal thread triggers the executors'
      guard condition *before* it shuts the context down, so an executor that looks in between
      finds the context up and waits again, for good if none of its nodes has a timer left or a
      message coming (a finalized valve driver); the watch wakes it again (rclpy's Python
      executors, which `run_node` spins; a custom `spin` waits with a timeout or, as the C++
      EventsExecutor, handles the signal itself). If the context is still up SHUTDOWN_WAIT_S
      after the signal (rclpy's handler did not act), the watch shuts it down itself;
    - arms faulthandler's stack dump STOP_STACKS_AFTER_S later (its own C thread, no GIL), which
      `run_node` cancels once the node has closed.
    """

    #: s the watch waits for the signal's context shutdown before it wakes the executor anyway
    SHUTDOWN_WAIT_S = 2.0

    def __init__(self) -> None:
        #: the `wake` of the executor spinning the nodes, once there is one
        self.wake: Callable[[], None] | None = None
        if threading.current_thread() is not threading.main_thread():
            return
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        try:
            signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        except ValueError:
            os.close(read_end)
            os.close(write_end)
            return
        threading.Thread(target=self._run, args=(read_end,), name='stop-watch', daemon=True).start()

    def _run(self, read_end: int) -> None:
        with contextlib.suppress(OSError):
            if not os.read(read_end, 1):
                return
        _LaterDump.stacks(STOP_STACKS_AFTER_S)
        deadline = time.monotonic() + self.SHUTDOWN_WAIT_S
        while rclpy.ok() and time.monotonic() < deadline:
            time.sleep(0.01)
        if rclpy.ok():
            rclpy.try_shutdown()
        if self.wake is not None:
            with contextlib.suppress(Exception):  # the executor already shut down
                self.wake()


class _TeardownLimit:
    """Exits the process if the block has not ended within TEARDOWN_LIMIT_S, after saying so
    and where every thread stood; with `bug` (the exception that stopped the node, its
    traceback already printed) exit code 1, else 0. A Python thread does it while the GIL is
    free (rclpy releases it for parts of the participant's deletion); a hang that holds the GIL
    (seen in the suite: the watch thread never woke) is ended TEARDOWN_GIL_HELD_S later from C
    threads: faulthandler's prints the stacks, a timer of the C library's exits with the same
    code (hard_exit; faulthandler's exit, code 1, where the platform has no such timer)."""

    def __init__(self, name: str, bug: BaseException | None) -> None:
        self.name, self.bug = name, bug
        self.done = threading.Event()

    def __enter__(self) -> _TeardownLimit:
        threading.Thread(target=self._watch, name='teardown-limit', daemon=True).start()
        _LaterDump.exit(
            TEARDOWN_LIMIT_S + TEARDOWN_GIL_HELD_S, EXIT_OK if self.bug is None else EXIT_BUG
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        _LaterDump.cancel()

    def _watch(self) -> None:
        if self.done.wait(TEARDOWN_LIMIT_S):
            return
        print(
            f'{self.name}: closed, but the middleware did not finish tearing the node down '
            f'within {TEARDOWN_LIMIT_S:g} s; exiting without waiting for it. Where it waited:',
            file=sys.stderr,
            flush=True,
        )
        faulthandler.dump_traceback(all_threads=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_OK if self.bug is None else EXIT_BUG)


def _freeze_startup_objects() -> None:
    # Everything built at start-up (modules, models, solver set-up) lives as long as the node.
    # Frozen, it is no longer scanned by full garbage collections, which otherwise take ~30 ms
    # in the controller process (79,000 objects) and stall the 120 Hz loop whenever they run.
    gc.collect()
    gc.freeze()


def is_shutting_down(grace_s: float = SHUTDOWN_GRACE_S) -> bool:
    """True if the default context is, or within ``grace_s`` goes, down (a signal arrived)."""
    deadline = time.monotonic() + grace_s
    while rclpy.ok():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def spin_all(
    nodes: Sequence[Node],
    stop_watch: _StopWatch | None = None,
    turn: Callable[[Executor], None] | None = None,
) -> None:
    """Spin several nodes of one process on one executor thread: the events executor where rclpy
    has it. The Python one rebuilds its wait set from every entity of every node at each
    wake-up (~1.4 ms of CPU for the fused control loop's five nodes, ~300 wake-ups a second),
    on the GIL the frames' thread needs (docs/benchmarks.md, issue 30 section 3). `turn`: see
    spin_until_shutdown."""
    executor = single_thread_executor()
    if stop_watch is not None:
        stop_watch.wake = executor.wake
    for node in nodes:
        executor.add_node(node)
    try:
        context = nodes[0].context if nodes else rclpy.get_default_context()
        spin_until_shutdown(executor, context, turn=turn)
    finally:
        executor.shutdown()


def run_node(
    factory: Callable[[], N],
    args=None,
    *,
    spin: Callable[[N], None] | None = None,
    close: Callable[[N], None] | None = None,
    config_hint: str = '',
) -> int:
    """Build the node with ``factory()``, ``spin`` it until shutdown, then ``close`` and destroy it.

    ``factory`` may return a list of nodes that share the process (spun together by default,
    destroyed in list order after ``close``).

    By default the node is spun on ``single_thread_executor`` (rclpy's C++ events executor
    where rclpy has it): rclpy's Python executor spent about as much CPU again as the nodes'
    own callbacks in the hardware graph (docs/benchmarks.md, issue 30, "sixth session"). A
    subscription that needs each message's MessageInfo takes an `executors.info_callback`.

    Returns the process exit code: 0 after a shutdown (Ctrl-C, SIGTERM, rclpy.shutdown), 2 when
    the node's parameters are invalid (the reason is printed, with ``config_hint``, and no
    traceback), 1 after any other exception: a bug, whose traceback is printed as it happens,
    before the node is closed and torn down (a teardown that hangs holding the GIL is ended from
    C, where Python could no longer print it).
    """
    # A crash in a C extension (rcl, the DDS, MuJoCo) prints every thread's Python stack to
    # stderr, which launch shows beside "process has died ... exit code -11".
    faulthandler.enable(all_threads=True)
    faulthandler.register(STACK_DUMP_SIGNAL, all_threads=True)
    _quiet_python_sigint()
    stop_watch = _StopWatch()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    name = getattr(factory, '__name__', 'node')
    files = paramfiles.files_in(sys.argv if args is None else args)
    try:
        for path in files:
            paramfiles.check(path)
        rclpy.init(args=args)
        stop_with_supervisor()
    except (paramfiles.ParamFileError, RuntimeError) as exc:
        # RuntimeError: rcl refused the command line (RCLError); its text names the argument.
        first = str(exc).replace('\n', '\\n') or type(exc).__name__
        print(f'{name}: {first}', file=sys.stderr, flush=True)
        return EXIT_INVALID_PARAMETERS
    node = None
    bug: Exception | None = None
    try:
        if _Interrupts.received:
            return EXIT_OK
        try:
            node = factory()
        except (ValueError, ParameterException) as exc:
            if is_shutting_down(0.0):
                return EXIT_OK
            key = paramfiles.parameter_of(exc)
            where = paramfiles.locate(files, key) if key else None
            at = f'{where}: {key}: ' if where else ''
            why = str(exc).replace('\n', '\\n')
            print(
                f'{name}: invalid parameters: {at}{why}.'
                + (f' {config_hint}' if config_hint else ''),
                file=sys.stderr,
                flush=True,
            )
            return EXIT_INVALID_PARAMETERS
        _freeze_startup_objects()
        if spin is not None:
            spin(node)
        elif isinstance(node, (list, tuple)):
            spin_all(node, stop_watch)
        else:
            spin_all([node], stop_watch)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except RuntimeError as exc:
        # rclpy raises RCLError from a wait or take that a signal interrupted; the context
        # shutdown that the signal triggers may land a moment later.
        if not is_shutting_down():
            bug = _report_bug(name, exc)
    except Exception as exc:
        bug = _report_bug(name, exc)
    finally:
        try:
            if node is not None and close is not None:
                close(node)
        finally:
            if node is None:
                rclpy.try_shutdown()
            else:
                with _TeardownLimit(name, bug):
                    for each in node if isinstance(node, (list, tuple)) else [node]:
                        each.destroy_node()
                    rclpy.try_shutdown()
        _LaterDump.cancel()
    return EXIT_OK if bug is None else EXIT_BUG


def _report_bug(name: str, exc: Exception) -> Exception:
    """The traceback now, not after the teardown (see run_node)."""
    traceback.print_exception(exc)
    print(f'{name}: stopped by the error above; closing it', file=sys.stderr, flush=True)
    return exc
