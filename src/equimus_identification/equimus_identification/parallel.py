"""One map-like interface for evaluating candidates: `mapper(fn, iterable) -> iterable`.

scipy's differential_evolution accepts any such callable as `workers=`, so the optimiser does not
care where candidates run:
- 'serial'  : builtins.map in this process (debugging, tiny problems);
- 'process' : concurrent.futures.ProcessPoolExecutor.map on this machine (the default). Each
              worker compiles the MuJoCo model once (dynamic.Evaluator caches it per process) and
              ignores SIGINT, so Ctrl-C reaches only the optimiser, which checkpoints and stops
              (equimus_description.workers);
- 'dask'    : dask.distributed Client(address).map + gather, for sweeps beyond one machine;
              without an address a LocalCluster of `workers` processes on this machine.
              An optional extra (`EQUIMUS_EXTRAS=cluster bash scripts/setup.sh`, i.e.
              requirements-cluster.txt): start a scheduler and workers (`dask scheduler`,
              `dask worker tcp://host:8786`) and pass `--mapper dask --scheduler
              tcp://host:8786`. The evaluator is plain picklable Python, so nothing else changes;
              results equal the process pool's for the same seed (tests/identification/
              test_dask.py). (Ray would plug in the same way through
              ray.util.multiprocessing.Pool.map.)
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor

from equimus_description.workers import init_worker

KINDS = ('serial', 'process', 'dask')


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class Mapper:
    """A map-like callable with a lifetime (use as a context manager or call close())."""

    def __init__(
        self, kind: str = 'process', workers: int | None = None, address: str | None = None
    ):
        if kind not in KINDS:
            raise ValueError(f'mapper kind must be one of {KINDS}, got {kind!r}')
        self.kind = kind
        self.workers = int(workers or default_workers())
        self._pool = None
        self._client = None
        if kind == 'process' and self.workers > 1:
            self._pool = ProcessPoolExecutor(max_workers=self.workers, initializer=init_worker)
        elif kind == 'dask':
            try:
                from dask.distributed import Client
            except ImportError as exc:
                raise RuntimeError(
                    'the dask mapper needs dask.distributed: pip install '
                    '"dask[distributed]" (or use --mapper process)'
                ) from exc
            self._client = (
                Client(address)
                if address
                else Client(processes=True, n_workers=self.workers, threads_per_worker=1)
            )

    def __call__(self, fn, iterable):
        items = list(iterable)
        if self._pool is not None:
            chunk = max(1, len(items) // (2 * self.workers))
            return list(self._pool.map(fn, items, chunksize=chunk))
        if self._client is not None:
            return self._client.gather(self._client.map(fn, items, pure=False))
        return list(map(fn, items))

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
