"""Whether a process another test process started has ended (it is not our child: it cannot be
waited for, only looked at)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path


def state(pid: int) -> str:
    """The process's state letter from /proc ('Z': ended, not yet reaped), '' once it is gone."""
    try:
        return Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0]
    except OSError:
        return ''


def running(pid: int) -> bool:
    return state(pid) not in ('', 'Z')


def ended_within(pid: int, seconds: float) -> bool:
    """Whether the process ends within `seconds`."""
    end = time.monotonic() + seconds
    while running(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.1)
    return True


def kill_starter(command: list[str], seconds: float) -> tuple[bool, str]:
    """Run `command`, which prints the pid of a process it started on its first line, SIGKILL
    it, and see whether that process ends within `seconds` (then killed, whatever it did):
    (ended, its state from /proc)."""
    starter = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert starter.stdout is not None
    child = int(starter.stdout.readline())
    try:
        assert running(child), f'{child} was not running: {state(child)!r}'
        starter.send_signal(signal.SIGKILL)
        starter.wait()
        return ended_within(child, seconds), state(child)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
