"""The compiled kernels (_kernels.c); their Python forms in estimation.py, pid.py and reference.py
document them."""

from collections.abc import Sequence

N_STATICS: int
MAX_SEGMENTS: float

def hinge_angles(poses: Sequence, n_bodies: int, hinges: Sequence[tuple]) -> list[float] | None: ...
def filter_update(
    x: Sequence, P: Sequence, z: Sequence[float], dt: float, sigma_acc: float, sigma_meas: float
) -> tuple[list[list[float]], list[tuple[float, float, float]]]: ...
def pid_law(
    statics: tuple[float, ...], *values: float
) -> tuple[float, float, bool, bool, float, float, float, float, float, float]:
    """pid.pid_law's 21 floats after the statics (pid.pack_statics), in its order."""

def waypoint_preview(
    poses: Sequence[Sequence[float]],
    move: float,
    hold: float,
    loop: bool,
    t: float,
    stamp: float,
    spacing: float,
    count: int,
) -> list[float]: ...
