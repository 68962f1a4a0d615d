"""Console entry points that a Ctrl-C during start-up ends in one line.

A node's module imports heavy libraries (scipy, MuJoCo, rclpy) before its `main` can install
`run_node`'s signal handling. A Ctrl-C in that time (launch stopping a graph that is still
starting on a loaded machine) printed a KeyboardInterrupt traceback from deep inside an import.
Each package's `entry` module points its console scripts here; only the standard library is
imported before the node's own module.
"""

from __future__ import annotations

import importlib
import signal
import sys
import threading

EXIT_STOPPED = 0  # as run_node after a Ctrl-C: a stop that was asked for


class _CtrlC:
    """SIGINT during the node module's import, as Python's default handler (KeyboardInterrupt),
    and remembered: raised inside some C code of an import (numpy's, from an ImportError it
    handles) the KeyboardInterrupt comes out as another exception, "TypeError: expected a
    message argument" (a CI run, 2026-12-07), which is still that Ctrl-C."""

    def __init__(self) -> None:
        self.received = False
        self.installed = False

    def __enter__(self) -> _CtrlC:
        # Only where Python's default is in place: an inherited ignore stays, and run_node
        # installs its own handler over the default once the module is imported.
        main_thread = threading.current_thread() is threading.main_thread()
        if main_thread and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, self._on_sigint)
            self.installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self.installed and signal.getsignal(signal.SIGINT) == self._on_sigint:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def _on_sigint(self, signum: int, frame: object) -> None:
        self.received = True
        raise KeyboardInterrupt


def run(module: str) -> int:
    """Import `module` and return its `main()`; a Ctrl-C on the way is one line and exit 0."""
    name = module.rsplit('.', 1)[-1]
    ctrl_c = _CtrlC()
    try:
        with ctrl_c:
            main = importlib.import_module(module).main
        return int(main() or 0)
    except KeyboardInterrupt:
        return _stopped(name)
    except Exception:
        if ctrl_c.received:
            return _stopped(name)
        raise


def _stopped(name: str) -> int:
    print(f'{name}: stopped by Ctrl-C while starting', file=sys.stderr, flush=True)
    return EXIT_STOPPED
