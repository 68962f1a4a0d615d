"""A clock's time as integer nanoseconds, without the `rclpy.time.Time` that `Clock.now()`
builds (its argument checks and a C time point: about 2.7 µs a call against 1.0 here).

The composed sim graph reads its nodes' clocks several times a frame (the stale-state guard,
the safety filter, the stamps), so the difference is a few percent of its frame. The value is
the one `Clock.now().nanoseconds` gives: the same rcl clock read under the same lock.

`FrameTime` goes one step further there: the graph keeps its frame's sim time in one place and
its lockstep nodes read it (`time_reader`), so their clocks, which then serve only timers and
the stamps of /diagnostics and /rosout, need not be set at every frame (each setting runs
rcl's time-jump callbacks and wakes the executor's timer thread: docs/benchmarks.md, issue 30).
"""

from __future__ import annotations

from collections.abc import Callable

from builtin_interfaces.msg import Time as TimeMsg
from rclpy.clock import Clock

__all__ = ['FrameTime', 'now_ns', 'stamp_msg', 'time_reader']


def now_ns(clock: Clock) -> int:
    """`clock.now().nanoseconds`, without building a Time."""
    handle = clock.handle
    with handle:
        return int(handle.get_now().nanoseconds)


def stamp_msg(ns: int) -> TimeMsg:
    """A header stamp of `ns` (what `Time(nanoseconds=ns).to_msg()` gives)."""
    sec, nanosec = divmod(ns, 1_000_000_000)
    return TimeMsg(sec=sec, nanosec=nanosec)


class FrameTime:
    """The sim time (ns) of the frame a lockstep composition is running, set by the graph
    (equimus_bringup.sim_graph) at each frame's start; a node given it reads "now" here."""

    __slots__ = ('ns',)

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def time_reader(clock: Clock, frame_time: Callable[[], int] | None = None) -> Callable[[], int]:
    """ns "now": `frame_time` where a composing graph keeps it, else `clock` (`now_ns`)."""
    if frame_time is not None:
        return frame_time
    return lambda: now_ns(clock)
