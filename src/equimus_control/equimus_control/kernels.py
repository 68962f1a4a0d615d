"""Which form of the per-frame arithmetic an estimator, a PID or a reference's preview runs:
compiled or Python.

`_kernels` (a C extension built with this package, `_kernels.c`) holds `hinge_angles`,
`filter_update`, `pid_law` and `waypoint_preview`; the Python functions of the same names in
estimation.py, pid.py and reference.py are the reference they match bit for bit
(tests/control/test_kernels.py). At 120 Hz every frame runs from cold caches, where interpreted
arithmetic costs several times its warm cost; the compiled form takes a fraction of that
(docs/benchmarks.md, issue 30).

An object picks its form when it is built (`use_compiled`; the reference node for its preview).
The environment's EQUIMUS_KERNELS=python makes the Python form every object's default in that
process (a benchmark runs both side by side); a build without a C compiler has only the Python
form (the extension is optional in setup.py) and says so in `describe()`.
"""

from __future__ import annotations

from types import ModuleType

from equimus_description.compiled import ENV as ENV  # re-exported: kernels.ENV
from equimus_description.compiled import prefer_compiled

_compiled: ModuleType | None
try:
    from . import _kernels as _compiled

    MISSING = ''
except ImportError as exc:  # built without a C compiler, or not built at all
    _compiled = None
    MISSING = str(exc)


def compiled() -> ModuleType | None:
    """The compiled module, or None when this build has none."""
    return _compiled


def use_compiled(prefer: bool | None = None) -> ModuleType | None:
    """The compiled module an object built now should call, or None for the Python form:
    `prefer` when given (False: Python; True: compiled where built), else compiled unless
    EQUIMUS_KERNELS=python."""
    return _compiled if prefer_compiled(prefer) else None


def describe() -> str:
    """A line for /diagnostics and the benchmarks: which form objects built now run, and why."""
    if _compiled is None:
        return f'python (no compiled kernels in this build: {MISSING})'
    if use_compiled() is None:
        return f'python ({ENV}=python)'
    return 'compiled'
