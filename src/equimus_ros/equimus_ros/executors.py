"""The executor for a process whose work runs outside it (the composed sim graph, the fused
control loop), and how to spin it.

rclpy's Python executors rebuild their wait set from every entity of every node at each
wake-up: in the composed sim graph (9 nodes, ~150 services, timers, subscriptions and QoS event
handlers) that is about 0.4-1 ms of CPU per wake-up, and its wall-clock timers (the valve
driver's 120 Hz tick, the controller's stale check) wake it ~200 times a wall second, on the same
GIL as the frame loop. rclpy 9 (ROS 2 Kilted) ships `rclpy.experimental.EventsExecutor`, which
waits and dispatches in C++ and only enters Python for the callback itself; Jazzy's rclpy does
not have it, so the plain SingleThreadedExecutor stays the fallback (same callbacks, same order
guarantees for this use: one thread, callbacks never concurrent).

Its `spin()` must not be used: in rclpy 9.1.2 it polls without ever sleeping (a core at 100 %
with nothing to do, measured with a bare node), while `spin_once(timeout)` sleeps until an event
or the timeout. `spin_until_shutdown` spins either executor that way.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

from rclpy.context import Context
from rclpy.executors import Executor, SingleThreadedExecutor

#: s a spin_once call may sleep with nothing to do (only bounds how late a shutdown is noticed,
#: which the context's on_shutdown wake makes immediate anyway).
SPIN_ONCE_TIMEOUT_S = 0.1
# Set to 0 to force rclpy's Python SingleThreadedExecutor (for comparison, or if the experimental
# one misbehaves on some rclpy release).
EVENTS_EXECUTOR_ENV = 'EQUIMUS_EVENTS_EXECUTOR'


#: What rclpy's executors find on a `timer_callback`: no parameter, so no TimerInfo is passed.
_NO_PARAMETERS = inspect.Signature()


def timer_callback(callback: Callable[[], object]) -> Callable[[], None]:
    """`callback` for `Node.create_timer`, its signature known in advance.

    Both of rclpy 9's executors call `inspect.signature` on a timer's callback at every tick (to
    pass a TimerInfo to a callback that asks for one): 8.0 µs of the GIL a tick for the valve
    driver's bound, lock-wrapped tick back to back, 120 times a second, while a frame of the
    fused control loop may be waiting for the GIL; 1.1 µs for a function carrying
    `__signature__`, which is answered at once."""

    def call() -> None:
        callback()

    call.__signature__ = _NO_PARAMETERS  # type: ignore[attr-defined]
    call.__qualname__ = getattr(callback, '__qualname__', call.__qualname__)
    return call


#: What rclpy finds on an `info_callback`: two parameters, so it passes a MessageInfo.
_MESSAGE_AND_INFO = inspect.Signature(
    [
        inspect.Parameter('msg', inspect.Parameter.POSITIONAL_ONLY),
        inspect.Parameter('info', inspect.Parameter.POSITIONAL_ONLY),
    ]
)


def info_callback(callback: Callable[[Any, dict], object]) -> Callable[..., None]:
    """`callback(msg, info)` for `Node.create_subscription`, called with the message and its
    MessageInfo (the publisher's gid) by either executor.

    rclpy gives a MessageInfo to a callback that takes two arguments. Its Python executor calls
    it with the two; rclpy 9.1.2's events executor calls it with one (message, info) tuple, and
    a plain two-argument callback then fails inside the executor (`SystemError: null argument
    to internal routine` from spin_once, measured). This one takes either."""

    def call(*args: Any) -> None:
        if len(args) == 1 and isinstance(args[0], tuple) and len(args[0]) == 2:
            args = args[0]
        callback(*args)

    call.__signature__ = _MESSAGE_AND_INFO  # type: ignore[attr-defined]
    call.__qualname__ = getattr(callback, '__qualname__', call.__qualname__)
    return call


def events_executor_available() -> bool:
    try:
        from rclpy.experimental import EventsExecutor  # noqa: F401
    except ImportError:
        return False
    return True


def single_thread_executor(context: Context | None = None) -> Executor:
    """One-thread executor: rclpy's C++ EventsExecutor where this rclpy has it (and
    $EQUIMUS_EVENTS_EXECUTOR is not 0), else its Python SingleThreadedExecutor."""
    if os.environ.get(EVENTS_EXECUTOR_ENV, '1') != '0' and events_executor_available():
        from rclpy.experimental import EventsExecutor

        return EventsExecutor(context=context)
    return SingleThreadedExecutor(context=context)


def spin_until_shutdown(
    executor: Executor,
    context: Context,
    stop: Callable[[], bool] = lambda: False,
    turn: Callable[[Executor], None] | None = None,
) -> None:
    """spin_once until the context shuts down (or `stop()`): never `executor.spin()`, which
    busy-polls on the events executor (module docstring). `turn(executor)`, where given, is one
    turn in place of `spin_once` (it must return within about SPIN_ONCE_TIMEOUT_S)."""
    while context.ok() and not stop():
        if turn is None:
            executor.spin_once(timeout_sec=SPIN_ONCE_TIMEOUT_S)
        else:
            turn(executor)
