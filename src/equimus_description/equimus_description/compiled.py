"""Whether a process's per-frame code runs in its compiled form (the C extensions built with
equimus_control and equimus_hw) or in the interpreted form those match bit for bit.

The environment's EQUIMUS_KERNELS=python makes the interpreted form every object's default in a
process, so a benchmark can run both side by side; a build without a C compiler has only that."""

from __future__ import annotations

import os

#: The environment variable that picks the interpreted form ("python") for a whole process.
ENV = 'EQUIMUS_KERNELS'


def prefer_compiled(prefer: bool | None = None) -> bool:
    """`prefer` when given, else True unless the environment asks for the interpreted form."""
    if prefer is None:
        return os.environ.get(ENV, '').strip().lower() != 'python'
    return prefer
