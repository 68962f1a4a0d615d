"""Confidence intervals of a least-squares fit whose residuals are correlated in time (no ROS).

`dynamic.covariance_summary` treats the residuals as white: σ²(JᵀJ)⁻¹. On a recording the
residual is mostly model error (the valve's repeatability, stamps a loaded machine delays, the
estimator's smoothing), which stays correlated over a whole pressure level, so those intervals
are several times too narrow. Here the recording is cut into a few contiguous batches taken as
independent, the covariance is the cluster-robust sandwich (JᵀWJ)⁻¹ S (JᵀWJ)⁻¹ with S from the
batches' score sums, and intervals use Student's t with batches − 1 degrees of freedom (batch
means: honest with few, long-correlated stretches). A robust loss enters through its weights W.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from scipy.optimize import OptimizeResult

#: contiguous stretches of a recording taken as independent
BATCHES = 8
#: the robust loss of the fits (scipy.optimize.least_squares), whose weights enter the intervals
LOSS = 'soft_l1'


def robust_weights(r: np.ndarray, loss: str, f_scale: float) -> np.ndarray:
    """ρ'(z), z = (r / f_scale)², of scipy.optimize.least_squares' robust losses: the weight
    each residual has at the optimum."""
    z = (np.asarray(r, float) / f_scale) ** 2
    if loss == 'linear':
        return np.ones_like(z)
    if loss == 'soft_l1':
        return 1.0 / np.sqrt(1.0 + z)
    if loss == 'huber':
        return np.where(z <= 1.0, 1.0, 1.0 / np.sqrt(np.maximum(z, 1.0)))
    if loss == 'cauchy':
        return 1.0 / (1.0 + z)
    raise ValueError(f'loss {loss!r}: linear, soft_l1, huber or cauchy')


def batch_covariance(
    J: np.ndarray,
    r: np.ndarray,
    t_index: Sequence[int] | np.ndarray,
    batches: int = BATCHES,
    weights: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """(covariance of the parameters, degrees of freedom) from `batches` contiguous stretches
    of the recording taken as independent (cluster-robust sandwich with the stretches as
    clusters): residual correlation within a stretch, however long, is allowed for. Quote
    intervals with Student's t of the returned degrees of freedom (`quantile`), not 1.96."""
    J, r = np.asarray(J, float), np.asarray(r, float)
    t_index = np.asarray(t_index, int)
    w_r = np.ones_like(r) if weights is None else np.asarray(weights, float)
    n_samples = int(t_index.max()) + 1
    b = max(2, min(int(batches), n_samples))
    cluster = np.minimum(t_index * b // n_samples, b - 1)
    s = np.zeros((b, J.shape[1]))
    np.add.at(s, cluster, J * (w_r * r)[:, None])
    s -= s.mean(axis=0)  # scores sum to ~0 at the optimum; centred, the estimate is unbiased
    S = s.T @ s * b / (b - 1)
    bread = normal_inverse(J, w_r)
    return bread @ S @ bread, b - 1


def normal_inverse(J: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """(JᵀWJ)⁺, inverted with J's columns scaled to unit norm and scaled back. A Jacobian in
    physical units spans many decades (m² of area against N·s/m of damping: ~1e7 between
    columns, ~1e14 in JᵀJ), and a pseudo-inverse of JᵀJ unscaled drops its weak directions as
    rounding noise: the pair of dampings that trade at one residual got intervals of a few per
    cent instead of ±100 %. Scaled, the result does not depend on the parameters' units."""
    J = np.asarray(J, float)
    norm = np.linalg.norm(J, axis=0)
    scale = np.where(norm > 0.0, norm, 1.0)
    Jn = J / scale
    w = np.ones(J.shape[0]) if weights is None else np.asarray(weights, float)
    return np.linalg.pinv(Jn.T @ (Jn * w[:, None])) / np.outer(scale, scale)


def group_jackknife(
    refit: Callable[[np.ndarray], np.ndarray],
    groups: Sequence[int] | np.ndarray,
    min_size: int = 1,
) -> tuple[np.ndarray, int]:
    """(covariance of the estimate, degrees of freedom) by the delete-one-group jackknife:
    `refit(keep)` re-estimates without the residuals where `keep` is False, once per group
    (a label per residual) of at least `min_size` residuals; smaller groups stay in every refit.
    The fit is repeated, not linearised: errors shared by a whole group (the VPPE's
    repeatability over a pressure level) and a model that is not smooth in its parameters (the
    hysteresis' play) are allowed for. Quote intervals with `quantile` of the returned degrees
    of freedom (groups − 1)."""
    groups = np.asarray(groups)
    labels, counts = np.unique(groups, return_counts=True)
    deleted = labels[counts >= min_size]
    if len(deleted) < 2:
        raise ValueError(f'a jackknife needs two groups of {min_size} residuals or more')
    estimates = np.array([refit(groups != g) for g in deleted])
    d = estimates - estimates.mean(axis=0)
    n = len(deleted)
    return (n - 1) / n * (d.T @ d), n - 1


def consider_covariance(
    J: np.ndarray, column: np.ndarray, sd: float, weights: np.ndarray | None = None
) -> np.ndarray:
    """The fitted parameters' covariance from a parameter held fixed whose value is uncertain
    (standard deviation `sd`; `column` its ∂r/∂c): had it been c + δ, the fit would have moved
    by g·δ, g = −(JᵀWJ)⁻¹JᵀW ∂r/∂c, so g gᵀ sd² adds to their covariance (a "consider"
    parameter). A fixed parameter that trades with a fitted one passes its doubt on to it."""
    J, column = np.asarray(J, float), np.asarray(column, float)
    w = np.ones(len(column)) if weights is None else np.asarray(weights, float)
    g = -normal_inverse(J, w) @ (J.T @ (w * column))
    return np.outer(g, g) * sd**2


def group_consider_covariance(
    J: np.ndarray, groups: np.ndarray, sd: float, min_size: int = 1
) -> np.ndarray:
    """`consider_covariance` summed over errors of standard deviation `sd`, one per group (a
    label per residual) of at least `min_size` residuals, independent between groups and shared
    by every residual of one: an error the fit turns into its parameters (a smooth run of them
    over pressure levels looks like a gain, an offset or a play), which its residuals and a
    jackknife of them cannot show."""
    groups = np.asarray(groups)
    labels, counts = np.unique(groups, return_counts=True)
    cov = np.zeros((J.shape[1], J.shape[1]))
    for g in labels[counts >= min_size]:
        cov += consider_covariance(J, (groups == g).astype(float), sd)
    return cov


def quantile(dof: int | None) -> float:
    """The two-sided 95 % quantile: Student's t with `dof` degrees of freedom (None: normal)."""
    if dof is None:
        return 1.96
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


def white_covariance(J: np.ndarray, r: np.ndarray) -> np.ndarray:
    """σ²(JᵀJ)⁻¹: the residuals taken as white (what dynamic.covariance_summary reports)."""
    dof = max(1, len(r) - J.shape[1])
    return normal_inverse(J) * float(r @ r) / dof


def interval(
    value: float, se: float, lo: float, hi: float, dof: int | None = None
) -> tuple[float, float]:
    """The 95 % interval value ± q·se (q: `quantile(dof)`), within the parameter's bounds."""
    half = quantile(dof) * se if math.isfinite(se) else math.inf
    return max(lo, value - half), min(hi, value + half)


def column_groups(mask: np.ndarray) -> list[list[int]]:
    """Columns of a sparsity mask (residuals × parameters) in groups whose residuals do not
    overlap, greedily: one finite-difference evaluation moves a whole group."""
    groups: list[tuple[list[int], np.ndarray]] = []
    for c in range(mask.shape[1]):
        for cols, used in groups:
            if not np.any(used & mask[:, c]):
                cols.append(c)
                used |= mask[:, c]
                break
        else:
            groups.append(([c], mask[:, c].copy()))
    return [cols for cols, _ in groups]


#: Evaluates residual functions at many points: `evaluate(points)` -> their residual vectors in
#: order (the builtin map over one function, or a pool of processes holding it).
Evaluate = Callable[[list[np.ndarray]], Iterable[np.ndarray]]


def forward_jacobian(
    fun,
    u: np.ndarray,
    r0: np.ndarray,
    step: float = 1e-4,
    mask: np.ndarray | None = None,
    evaluate: Evaluate | None = None,
) -> np.ndarray:
    """Forward differences of the raw residuals over the unit cube of the bounds (a step of
    `step` of each range, inwards at an upper bound, divided by the step as represented);
    least_squares' own Jacobian is scaled by its robust loss. With a sparsity `mask`, columns
    touching disjoint residuals share an evaluation. `evaluate` computes the perturbed points'
    residuals (default: `fun` on each in turn), e.g. on several processes: they are
    independent."""
    J = np.zeros((r0.size, len(u)))
    if mask is None:
        mask = np.ones((r0.size, len(u)), bool)
    groups = column_groups(np.asarray(mask, bool))
    points = []
    for cols in groups:
        v = np.array(u, float)
        v[cols] += np.where(v[cols] + step <= 1.0, step, -step)
        points.append(v)
    results = map(fun, points) if evaluate is None else evaluate(points)
    for cols, v, r in zip(groups, points, results, strict=True):
        d = r - r0
        for c in cols:
            J[:, c] = np.where(mask[:, c], d / (v[c] - u[c]), 0.0)
    return J


def fit_unit_cube(
    residuals: Callable[[np.ndarray], np.ndarray],
    u0: np.ndarray,
    f_scale: float,
    max_nfev: int,
    mask: np.ndarray | None = None,
    evaluate: Evaluate | None = None,
) -> OptimizeResult:
    """Robust least squares (`LOSS` at `f_scale`) of `residuals` over the unit cube of the
    parameters' bounds, from `u0`. A sparsity `mask` (residuals × parameters, True where a
    parameter can move a residual) lets columns that touch disjoint residuals share one
    finite-difference evaluation (`forward_jacobian`), whose points `evaluate` computes
    (e.g. on several processes: the fit ends where it ends in this one). With neither, scipy's
    '2-point' differences, whose step is relative to each parameter's place in the cube."""
    from scipy.optimize import least_squares

    common = {
        'bounds': (0.0, 1.0),
        'method': 'trf',
        'x_scale': 'jac',
        'max_nfev': max_nfev,
        'loss': LOSS,
        'f_scale': f_scale,
    }
    if mask is None and evaluate is None:
        return least_squares(residuals, u0, jac='2-point', diff_step=1e-4, **common)
    last: dict[str, np.ndarray] = {}

    def fun(u: np.ndarray) -> np.ndarray:
        r = residuals(u)
        last['u'], last['r'] = np.array(u, float), r
        return r

    def jac(u: np.ndarray) -> np.ndarray:
        r0 = last['r'] if 'u' in last and np.array_equal(last['u'], u) else residuals(u)
        return forward_jacobian(residuals, u, r0, 1e-4, mask, evaluate)

    return least_squares(fun, u0, jac=jac, **common)


def std_errors(
    residuals: Callable[[np.ndarray], np.ndarray],
    u: np.ndarray,
    r: np.ndarray,
    span: np.ndarray,
    t_index: Sequence[int] | np.ndarray,
    f_scale: float,
    mask: np.ndarray | None = None,
    consider: Sequence[tuple[np.ndarray, float]] = (),
    evaluate: Evaluate | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """(batch-robust standard errors, white ones, degrees of freedom) at the optimum `u` of
    `fit_unit_cube` (residuals `r` there), in the units of the parameters (`span`: upper bound
    - lower bound); `t_index`: the recording sample of each residual. `consider`: parameters
    held fixed, each as (∂r/∂c, the standard deviation of its fixed value); their uncertainty
    is added to the fitted parameters' (`consider_covariance`). `evaluate`: as in
    `forward_jacobian`."""
    J = forward_jacobian(residuals, u, r, mask=mask, evaluate=evaluate) / span[None, :]  # ∂r/∂x
    weights = robust_weights(r, LOSS, f_scale)
    cov, dof = batch_covariance(J, r, t_index, weights=weights)
    for column, sd in consider:
        cov = cov + consider_covariance(J, column, sd, weights)
    se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    white = np.sqrt(np.clip(np.diag(white_covariance(J, r)), 0.0, None))
    return se, white, dof
