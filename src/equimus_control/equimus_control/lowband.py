"""Commands below the valves' lowest regulated pressure (no ROS).

Below `min_regulated` kPa the VPPE valves do not regulate and the valve driver vents
(../shared/spec/valve.md; `equimus_hw.valve.calibration`). A controller that wants 3 kPa therefore
sends 0 or the lowest regulated pressure in turn, the residual carried to the next period
(first-order sigma-delta), and the chamber's lag averages them to what it wanted. The LTV MPC and
the policies run this one modulator.
"""

from __future__ import annotations

import numpy as np


def sigma_delta(
    u: np.ndarray, residual: np.ndarray, min_regulated: float
) -> tuple[np.ndarray, np.ndarray]:
    """(commands, residuals) of commands `u` (kPa, any shape) with the residuals carried from the
    last period (same shape): a command in (0, min_regulated) becomes 0 or min_regulated, others
    pass and clear their residual."""
    u = np.asarray(u, float)
    m = float(min_regulated)
    if m <= 0.0:
        return u.copy(), np.zeros_like(u)
    low = (u > 0.0) & (u < m)
    v = u + residual
    out = np.where(low, np.where(v >= 0.5 * m, m, 0.0), u)
    return out, np.where(low, np.clip(v - out, -m, m), 0.0)
