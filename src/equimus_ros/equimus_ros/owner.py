"""Processes that stop when the supervisor that started them is gone, however it ended.

No rclpy here: the rig emulator, which is no ROS node, watches too. A process pool's worker
watches its owner the same way (`equimus_description.workers`): the fitting and learning packages
that own pools may not import this one, nor this one theirs.
"""

from __future__ import annotations

import os
import signal
import threading
import time

#: Environment variable the supervisor sets for the processes it starts: its own pid.
OWNER_ENV = 'EQUIMUS_OWNER_PID'
#: s between a supervised process's looks at whether its supervisor is still there
OWNER_POLL_S = 0.5


def stop_with_supervisor() -> bool:
    """In a process the supervisor started (OWNER_ENV names its parent): once the supervisor is
    gone, however it ended (SIGKILL too), interrupt this process (SIGINT, its Ctrl-C path: a
    valve driver vents, a recorder closes its bag). Without it a graph ran on after
    `equimus adapt` was killed at a test's time limit. Whether it watches."""
    owner = os.environ.get(OWNER_ENV, '')
    if not owner.isdigit() or int(owner) != os.getppid():
        return False

    def watch() -> None:
        while os.getppid() == int(owner):  # an orphan is adopted by init or a subreaper
            time.sleep(OWNER_POLL_S)
        # The supervisor read this process's output through a pipe: with no reader left, every
        # write would fail (EPIPE) on the way out. Nothing can read it any more.
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(devnull, fd)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, name='supervisor-watch', daemon=True).start()
    return True
