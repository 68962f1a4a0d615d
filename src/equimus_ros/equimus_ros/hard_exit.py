"""A process exit, with a chosen code, that needs neither the GIL nor a Python thread.

`run_node` bounds a node's teardown (docs/reliability.md): a hang inside the middleware that
holds the GIL stops every Python thread, so the exit must come from C. faulthandler's timer can
do that, but only with exit code 1, which launch reads as a failed node although the node had
closed (vented, bag written). A POSIX timer whose notification is a new thread of the C library
(SIGEV_THREAD) can call ``_exit(code)`` itself: ``_exit`` takes the timer's value (an int) as
its argument. Linux (tested with glibc); elsewhere `arm` returns None and the caller falls back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ['HardExit', 'arm']

_CLOCK_MONOTONIC = 1
_SIGEV_THREAD = 2


class _Sigval(ctypes.Union):
    _fields_ = [('sival_int', ctypes.c_int), ('sival_ptr', ctypes.c_void_p)]


class _SigevThread(ctypes.Structure):
    _fields_ = [('function', ctypes.c_void_p), ('attribute', ctypes.c_void_p)]


class _SigevUnion(ctypes.Union):
    _fields_ = [('pad', ctypes.c_int * 12), ('thread', _SigevThread)]


class _Sigevent(ctypes.Structure):
    """struct sigevent of Linux (64 bytes)."""

    _fields_ = [
        ('value', _Sigval),
        ('signo', ctypes.c_int),
        ('notify', ctypes.c_int),
        ('un', _SigevUnion),
    ]


class _Timespec(ctypes.Structure):
    _fields_ = [('tv_sec', ctypes.c_long), ('tv_nsec', ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [('interval', _Timespec), ('value', _Timespec)]


class HardExit:
    """An armed timer: the process ends with `code` `after_s` seconds from arming unless
    `cancel` is called first."""

    def __init__(self, libc: ctypes.CDLL, timer: ctypes.c_void_p) -> None:
        self._libc, self._timer = libc, timer
        self._armed = True

    def cancel(self) -> None:
        if self._armed:
            self._armed = False
            self._libc.timer_delete(self._timer)


def _libc() -> ctypes.CDLL | None:
    for name in (None, ctypes.util.find_library('rt')):
        try:
            lib = ctypes.CDLL(name, use_errno=True)
            lib.timer_create, lib.timer_settime, lib.timer_delete, lib._exit  # noqa: B018
        except (OSError, AttributeError):
            continue
        return lib
    return None


def arm(after_s: float, code: int) -> HardExit | None:
    """`_exit(code)` in `after_s` seconds from a thread of the C library; None where this
    platform cannot (not Linux, no timer_create)."""
    if not sys.platform.startswith('linux'):
        return None
    libc = _libc()
    if libc is None:
        return None
    event = _Sigevent()
    event.value.sival_int = int(code)
    event.notify = _SIGEV_THREAD
    event.un.thread.function = ctypes.cast(libc._exit, ctypes.c_void_p).value
    timer = ctypes.c_void_p()
    if libc.timer_create(_CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(timer)) != 0:
        return None
    whole = int(after_s)
    spec = _Itimerspec(_Timespec(0, 0), _Timespec(whole, int((after_s - whole) * 1e9)))
    if libc.timer_settime(timer, 0, ctypes.byref(spec), None) != 0:
        libc.timer_delete(timer)
        return None
    return HardExit(libc, timer)
