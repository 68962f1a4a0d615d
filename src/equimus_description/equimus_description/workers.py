"""What every process pool's worker does first (the fits, the intervals, the tuning, the
teaching): leave Ctrl-C to the pool's owner, which stops the pool, and end with the owner however
the owner ends. Otherwise a worker outlives an owner killed by SIGKILL, or by SIGTERM's default
action: it goes on computing the jobs it holds, for no one (seen after
`equimus adapt` was killed at a test's time limit). A graph's processes watch their supervisor
the same way (`equimus_ros.owner`, a package this one may not import)."""

from __future__ import annotations

import os
import signal
import threading
import time

#: s between a worker's looks at whether its owner is still there
OWNER_POLL_S = 1.0


def init_worker() -> None:
    """A pool's `initializer` (or the first call of one)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    owner = os.getppid()
    threading.Thread(target=_end_with, args=(owner,), name='owner-watch', daemon=True).start()


def _end_with(owner: int) -> None:
    # An orphan is adopted by another process (init, a subreaper): its parent changes.
    while os.getppid() == owner:
        time.sleep(OWNER_POLL_S)
    os._exit(1)
