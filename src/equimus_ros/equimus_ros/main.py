"""The body of every equimus node's ``main()``: init, spin, and always close the node cleanly.

Ctrl-C is handled by rclpy alone: its signal handler shuts the context down and the executor
raises ExternalShutdownException. Python's own KeyboardInterrupt is switched off for the node's
lifetime because it can fire inside rclpy while a message is being converted, where it surfaces
as "RuntimeError: Unable to convert call argument" from take_message instead of as a shutdown.
"""

from __future__ import annotations

import faulthandler
import gc
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import rclpy
from rclpy.exceptions import ParameterException
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node

from equimus_ros import paramfiles

#: What a node factory builds: one node, or the nodes that share one process.
N = TypeVar('N', bound=Node | list[Node])

#: How long a RuntimeError may precede the signal's context shutdown and still count as shutdown.
SHUTDOWN_GRACE_S = 0.5

#: GIL switch interval of every node process. A thread woken by a frame (a socket, a serial
#: ACK, a DDS message) waits this long for a busy Python thread of its process to hand over the
#: GIL; CPython's default is 5 ms, which showed as the ~5 ms p99 of the control path.
GIL_SWITCH_INTERVAL_S = 0.0005

EXIT_OK = 0
EXIT_INVALID_PARAMETERS = 2

#: ``kill -USR1 <pid>`` makes a node print every thread's Python stack and go on running: how a
#: node that does not stop, or stands still, shows where it is (the supervisor and the tests send
#: it before they kill a process that ignored Ctrl-C and SIGTERM).
STACK_DUMP_SIGNAL = signal.SIGUSR1


class _Interrupts:
    """Ctrl-C seen before rclpy's handler was installed (it would otherwise be lost)."""

    received = False

    @classmethod
    def note(cls, signum, frame) -> None:
        cls.received = True


def _quiet_python_sigint() -> None:
    # Must precede rclpy.init: rclpy chains its handler to the one installed here, and
    # re-installing a Python handler afterwards would replace rclpy's.
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ):
        signal.signal(signal.SIGINT, _Interrupts.note)


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


def spin_all(nodes: Sequence[Node]) -> None:
    """Spin several nodes of one process on one executor thread."""
    executor = SingleThreadedExecutor()
    for node in nodes:
        executor.add_node(node)
    try:
        executor.spin()
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

    Returns the process exit code: 0 after a shutdown (Ctrl-C, SIGTERM, rclpy.shutdown), 2 when
    the node's parameters are invalid (the reason is printed, with ``config_hint``, and no
    traceback). Any other exception is a bug and propagates.
    """
    # A crash in a C extension (rcl, the DDS, MuJoCo) prints every thread's Python stack to
    # stderr, which launch shows beside "process has died ... exit code -11".
    faulthandler.enable(all_threads=True)
    faulthandler.register(STACK_DUMP_SIGNAL, all_threads=True)
    _quiet_python_sigint()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    name = getattr(factory, '__name__', 'node')
    files = paramfiles.files_in(sys.argv if args is None else args)
    try:
        for path in files:
            paramfiles.check(path)
        rclpy.init(args=args)
    except (paramfiles.ParamFileError, RuntimeError) as exc:
        # RuntimeError: rcl refused the command line (RCLError); its text names the argument.
        first = str(exc).replace('\n', '\\n') or type(exc).__name__
        print(f'{name}: {first}', file=sys.stderr, flush=True)
        return EXIT_INVALID_PARAMETERS
    node = None
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
            spin_all(node)
        else:
            rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except RuntimeError:
        # rclpy raises RCLError from a wait or take that a signal interrupted; the context
        # shutdown that the signal triggers may land a moment later.
        if not is_shutting_down():
            raise
    finally:
        if node is not None:
            try:
                if close is not None:
                    close(node)
            finally:
                for each in node if isinstance(node, (list, tuple)) else [node]:
                    each.destroy_node()
        rclpy.try_shutdown()
    return EXIT_OK
