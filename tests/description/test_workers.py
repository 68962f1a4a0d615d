"""A process pool's worker ends with the pool's owner, however the owner ends (SIGKILL here):
without the owner watch it would finish its job and then wait on the pool's queue for good."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from equimus_description import workers

OWNER = """
import multiprocessing, os, time
from concurrent.futures import ProcessPoolExecutor
from equimus_description.workers import init_worker
context = multiprocessing.get_context('spawn')
with ProcessPoolExecutor(1, mp_context=context, initializer=init_worker) as pool:
    print(pool.submit(os.getpid).result(), flush=True)
    pool.submit(time.sleep, 120).result()
"""


def _state(pid: int) -> str:
    """The process's state letter ('Z': ended, not yet reaped), '' once it is gone."""
    try:
        return Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0]
    except OSError:
        return ''


def test_a_worker_ends_soon_after_its_owner_is_killed():
    owner = subprocess.Popen([sys.executable, '-c', OWNER], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    worker = int(owner.stdout.readline())
    try:
        assert _state(worker) not in ('', 'Z')
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        end = time.monotonic() + 3 * workers.OWNER_POLL_S + 5.0
        while _state(worker) not in ('', 'Z'):
            assert time.monotonic() < end, f'worker {worker} outlived its owner: {_state(worker)}'
            time.sleep(0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)
