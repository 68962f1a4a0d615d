"""A process pool's worker ends with the pool's owner, however the owner ends (SIGKILL here):
without the owner watch it goes on with its job for no one (here a 120 s sleep)."""

import sys

import orphans

from equimus_description.workers import OWNER_POLL_S

OWNER = """
import multiprocessing, os, time
from concurrent.futures import ProcessPoolExecutor
from equimus_description.workers import init_worker
context = multiprocessing.get_context('spawn')
with ProcessPoolExecutor(1, mp_context=context, initializer=init_worker) as pool:
    print(pool.submit(os.getpid).result(), flush=True)
    pool.submit(time.sleep, 120).result()
"""


def test_a_worker_ends_soon_after_its_owner_is_killed():
    ended, state = orphans.kill_starter([sys.executable, '-c', OWNER], 3 * OWNER_POLL_S + 5)
    assert ended, f'the worker outlived its owner: {state}'
