"""A test's rclpy executor spun on a thread of its own, that does not die quietly.

The harnesses used to run `executor.spin()` under `contextlib.suppress(Exception)` so that
teardown (the context shut down mid-wait) stayed silent. That also swallowed any other error
of one turn, and the thread ended: every later service answer, diagnostic and sample was then
never taken in, and the tests of the module failed one after another on "did not answer" with
nothing said about why (CI runs of 2026-11-28). Here one turn's error is recorded in `errors`
and spinning goes on; only a shut-down context or `stop()` ends the thread.
"""

from __future__ import annotations

import threading
from typing import Any


class BackgroundSpin:
    """Spins `executor` (of `context`) with `spin_once` turns until stopped."""

    def __init__(self, executor: Any, context: Any, period: float = 0.05) -> None:
        self.executor, self.context, self.period = executor, context, period
        self.errors: list[str] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.context.ok():
            try:
                self.executor.spin_once(timeout_sec=self.period)
            except Exception as exc:  # noqa: BLE001 - recorded; spinning goes on
                if self._stop.is_set() or not self.context.ok():
                    return
                self.errors.append(f'{type(exc).__name__}: {exc}')
                self._stop.wait(0.01)

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self.thread.join(timeout)

    def report(self) -> str:
        """What went wrong while spinning (for an assertion's message)."""
        if not self.errors:
            return 'the executor thread is spinning, with no error'
        return f'{len(self.errors)} error(s) while spinning, the last: {self.errors[-1]}'
