"""The compiled kernels (_kernels.c); the Python forms in estimation.py and pid.py document them."""

from collections.abc import Sequence

N_STATICS: int

def hinge_angles(poses: Sequence, n_bodies: int, hinges: Sequence[tuple]) -> list[float] | None: ...
def filter_update(
    x: Sequence, P: Sequence, z: Sequence[float], dt: float, sigma_acc: float, sigma_meas: float
) -> tuple[list[list[float]], list[tuple[float, float, float]]]: ...
def pid_law(
    statics: tuple[float, ...],
    q0: float,
    q1: float,
    qd0: float,
    qd1: float,
    r0: float,
    r1: float,
    rd0: float,
    rd1: float,
    kp0: float,
    kp1: float,
    ki0: float,
    ki1: float,
    kd0: float,
    kd1: float,
    k_aw: float,
    i_max0: float,
    i_max1: float,
    i0: float,
    i1: float,
    dt: float,
    p_max: float,
) -> tuple[float, float, bool, bool, float, float, float, float, float, float]: ...
