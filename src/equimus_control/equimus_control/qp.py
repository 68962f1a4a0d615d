"""What the linear MPC (`mpc.py`) and the LTV MPC (`ltv_mpc.py`) share, defined once: the
weights of their cost and the QP's iteration cap (each config gives them its own parameter names,
`q_theta`, `ltv_q_theta`, ...; the words that differ say what a decision step is and what the
pressures are pulled towards), and solving their QP with OSQP."""

from __future__ import annotations

from typing import Any

import numpy as np

from equimus_description.config import param

#: every weight: non-negative, finite
WEIGHT_RANGE = (0.0, 1e9)


def q_theta() -> Any:
    return param(
        (4000.0, 4000.0), '1/rad², weight of the angle error [hip, knee]', range=WEIGHT_RANGE
    )


def q_vel(what: str) -> Any:
    """what: the velocity term, e.g. 'joint velocities'."""
    return param(0.5, f's²/rad², weight of the {what}', range=WEIGHT_RANGE)


def r_u(towards: str) -> Any:
    """towards: whose static pressures the pressures are pulled to, e.g. 'target'."""
    return param(
        1e-4,
        f'1/kPa², weight of the pressures (towards the static pressures of the {towards})',
        range=WEIGHT_RANGE,
    )


def r_du(steps: str) -> Any:
    """steps: the MPC's decision steps, e.g. 'steps' or 'blocks'."""
    return param(1e-4, f'1/kPa², weight of the pressure change between {steps}', range=WEIGHT_RANGE)


def max_iter() -> Any:
    return param(200, 'OSQP iterations per control cycle', range=(1, 100000))


def solve(solver: Any) -> tuple[Any, bool]:
    """(OSQP's result, whether it failed: no finite solution, infeasible or non-convex)."""
    res = solver.solve(raise_error=False)
    status = str(res.info.status)
    failed = (
        res.x is None
        or not np.all(np.isfinite(res.x))
        or 'infeasible' in status
        or 'non_cvx' in status
        or 'non-convex' in status
    )
    return res, failed
