"""Console entry points that a Ctrl-C during start-up ends in one line.

A node's module imports heavy libraries (scipy, MuJoCo, rclpy) before its `main` can install
`run_node`'s signal handling. A Ctrl-C in that time (launch stopping a graph that is still
starting on a loaded machine) printed a KeyboardInterrupt traceback from deep inside an import.
Each package's `entry` module points its console scripts here; only the standard library is
imported before the node's own module.
"""

from __future__ import annotations

import importlib
import sys

EXIT_STOPPED = 0  # as run_node after a Ctrl-C: a stop that was asked for


def run(module: str) -> int:
    """Import `module` and return its `main()`; a Ctrl-C on the way is one line and exit 0."""
    name = module.rsplit('.', 1)[-1]
    try:
        main = importlib.import_module(module).main
        return int(main() or 0)
    except KeyboardInterrupt:
        print(f'{name}: stopped by Ctrl-C while starting', file=sys.stderr, flush=True)
        return EXIT_STOPPED
