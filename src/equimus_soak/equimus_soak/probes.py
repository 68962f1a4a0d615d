"""The soak's observers outside the graph: the probe node's client and the process sampler.

`ProbeClient` drives the `soak_probe` node (equimus_soak.probe, its own process) over its stdin
and stdout; `ProcSampler` reads every process's CPU time and RSS from /proc once a second;
`SchedulingDelay` measures how late the machine wakes a thread of this process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from equimus_soak import analysis as A


class ProbeClient:
    """The soak_probe process, driven over its stdin/stdout."""

    def __init__(self, env: dict[str, str]):
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'equimus_soak.probe'],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            env=env,
            start_new_session=True,
        )
        # Both are pipes (stdin=PIPE, stdout=PIPE above), never None.
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._to_probe, self._from_probe = self.proc.stdin, self.proc.stdout
        self._replies: list[dict] = []
        self._cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.wait_for('ready', 30.0)

    def _read(self) -> None:
        for line in self._from_probe:
            try:
                msg = json.loads(line)
            except ValueError:
                continue  # a ROS log line
            with self._cv:
                self._replies.append(msg)
                self._cv.notify_all()

    def wait_for(self, op: str, timeout: float) -> dict:
        end = time.monotonic() + timeout
        with self._cv:
            while True:
                for i, m in enumerate(self._replies):
                    if m.get('op') == op:
                        return self._replies.pop(i)
                left = end - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise RuntimeError(
                        f'soak_probe did not answer {op!r} (exit code '
                        f'{self.proc.poll()}); is the workspace sourced?'
                    )
                self._cv.wait(left)

    def send(self, obj: dict) -> None:
        self._to_probe.write(json.dumps(obj) + '\n')
        self._to_probe.flush()

    def publish(self, data: Sequence[float]) -> float:
        self.send({'op': 'publish', 'data': list(data)})
        return self.wait_for('published', 5.0)['t']

    def prepare(self) -> None:
        """Make the probe's publisher and wait until DDS has matched it to the graph's
        subscribers, so the injected commands are not held up by discovery."""
        self.send({'op': 'prepare'})
        self.wait_for('prepared', 10.0)

    def release(self) -> None:
        """Destroy the probe's publisher: it leaves the ROS graph at once."""
        self.send({'op': 'release'})
        self.wait_for('released', 5.0)

    def dump(self, path: str) -> dict:
        self.send({'op': 'dump', 'path': path})
        self.wait_for('dumped', 30.0)
        with open(path) as fh:
            return json.load(fh)

    def close(self) -> None:
        try:
            self.send({'op': 'quit'})
            self.proc.wait(5.0)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class ProcSampler(threading.Thread):
    """CPU seconds and RSS of every process of the run, once per `period` s, from /proc."""

    def __init__(self, pids: Callable[[], dict[str, int]], period: float = 1.0):
        super().__init__(daemon=True, name='soak-proc-sampler')
        self.pids = pids
        self.period = period
        self.samples: dict[str, list[tuple[float, int, float, float]]] = {}  # t, pid, cpu_s, rss
        #: t, pid, per thread (ns waited on a run queue, times run) so far (A.read_run_delay)
        self.run_delays: dict[str, list[tuple[float, int, dict[int, tuple[int, int]]]]] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.period):
            now = time.monotonic()
            for name, pid in list(self.pids().items()):
                r = A.read_proc(pid)
                if r is not None:
                    self.samples.setdefault(name, []).append((now, pid, r[0], r[1]))
                d = A.read_run_delay(pid)
                if d is not None:
                    self.run_delays.setdefault(name, []).append((now, pid, d))

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=2.0)


class SchedulingDelay(threading.Thread):
    """How late a thread of this process wakes up (steady clock), every `period` s.

    The emulated board, whose watchdog and serial reads time the vents the soak checks, runs in
    this process: when the machine is loaded (load 10 on 2 cores), it is woken late as this
    thread is. The checks allow their margin plus the delay measured here around each event,
    so a loaded machine does not fail a vent that came as soon as the board could see it, and
    an idle one keeps the plain margin (delays of a millisecond or two)."""

    def __init__(self, period: float = 0.02):
        super().__init__(daemon=True, name='soak-scheduling-delay')
        self.period = period
        self.delays: list[tuple[float, float]] = []  # (woken at, s late), late > 1 ms only
        self._halt = threading.Event()

    def run(self) -> None:
        due = time.monotonic() + self.period
        while not self._halt.wait(max(0.0, due - time.monotonic())):
            now = time.monotonic()
            if now - due > 1e-3:
                self.delays.append((now, now - due))
            due = max(due + self.period, now)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=2.0)
