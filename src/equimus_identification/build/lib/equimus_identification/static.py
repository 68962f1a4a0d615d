"""Static identification of (k1, k2, S1, S2) from equilibria (EquiMus Sec. IV-D).

At rest the joint torques balance (equimus_description.statics):
    J_Aᵀ (k (l − l0) − S P) = g ∂U/∂θ,   i.e.   S P = k (l − l0) − h,   h = J_A⁻ᵀ g ∂U/∂θ.
With l0 fixed, dividing by S makes each actuator's pressure linear in two unknowns:
    P_a = (k_a/S_a)(l_a − l0_a) − (1/S_a) h_a,
so the default regression ('pressure') minimises exactly the pressure residual the paper reports
(its 0.887 / 0.861 kPa), one 2-unknown least squares per actuator. The 'torque' method is the
controller's own fit (fit_static below: residual in N·m, both joints jointly).

The fit is then validated the paper's way: the equilibrium the fitted model reaches under each
measured pressure pair (minimum of the potential within the joint limits) against the measured
angles (Table IV).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from equimus_description.kinematics import actuation_derivatives
from equimus_description.statics import (
    StaticParams,
    equilibrium,
    gravity_generalized,
    holding_pressures,
)

from .data import StaticSet


@dataclass
class StaticFit:
    k: np.ndarray  # N/m [maa, baa]
    S: np.ndarray  # m²
    l0: np.ndarray  # m (held fixed)
    method: str
    params: StaticParams
    pressure_rmse_kpa: np.ndarray  # on the fitting set

    def overrides(self) -> dict:
        """Dotted keys for equimus_description.leg (k, area; l0 as used)."""
        out = {}
        for i, a in enumerate(('maa', 'baa')):
            out[f'actuators.{a}.k'] = float(self.k[i])
            out[f'actuators.{a}.area'] = float(self.S[i])
            out[f'actuators.{a}.l0'] = float(self.l0[i])
        return out


def static_params_from_leg(leg=None) -> StaticParams:
    """StaticParams with geometry, masses and l0 of a LegDescription (default: config/leg.yaml's
    static set for l0), so the static fit uses the same leg as the simulation."""
    p = StaticParams()
    if leg is None:
        return p
    kw = {}
    if getattr(leg, 'geometry', None) is not None:
        kw['geometry'] = leg.geometry
    acts = getattr(leg, 'actuators', {})
    if 'maa' in acts and 'baa' in acts:
        kw['m_act'] = (acts['maa'].m, acts['baa'].m)
        kw['l0'] = (acts['maa'].l0, acts['baa'].l0)
    bodies = getattr(leg, 'bodies', {})
    if 'thigh' in bodies and 'calf' in bodies:
        kw['m_thigh'] = bodies['thigh'].mass
        kw['m_calf'] = bodies['calf'].mass
    from dataclasses import replace

    return replace(p, **kw)


def holding_terms(q, p: StaticParams):
    """(l − l0, h) for each pose: h = J_A⁻ᵀ g ∂U/∂θ, the actuator-space gravity load (N)."""
    L, H = [], []
    for qq in np.atleast_2d(q):
        lengths, J, _ = actuation_derivatives(qq, p.geometry)
        _, dU = gravity_generalized(qq, p)
        H.append(np.linalg.solve(J.T, p.g * dU))
        L.append(lengths - np.asarray(p.l0))
    return np.array(L), np.array(H)


def pressure_residuals(data: StaticSet, p: StaticParams) -> np.ndarray:
    """Predicted holding pressure − measured pressure (kPa), per pose and actuator."""
    pred = np.array([holding_pressures(q, p) for q in data.q])
    return pred - data.pressures_kpa


def fit(data: StaticSet, p: StaticParams | None = None, method: str = 'pressure') -> StaticFit:
    """Linear regression of (k, S) with l0 fixed (the values in `p`)."""
    p = p or StaticParams()
    if len(data) < 2:
        raise ValueError(f'static fit needs at least 2 equilibria, got {len(data)}')
    if method == 'pressure':
        L, H = holding_terms(data.q, p)
        k, S = np.zeros(2), np.zeros(2)
        for a in range(2):
            A = np.stack([L[:, a], -H[:, a]], axis=1)
            (alpha, beta), *_ = np.linalg.lstsq(A, data.pressures_kpa[:, a] * 1e3, rcond=None)
            if beta <= 0:
                raise ValueError(
                    f'actuator {a}: regression gave 1/S = {beta:.3g} ≤ 0; the data do not '
                    'span enough pressures for this actuator'
                )
            S[a] = 1.0 / beta
            k[a] = alpha / beta
        fitted = p.with_identified(k=k, S=S)
    elif method == 'torque':
        fitted = fit_static(data.q, data.pressures_kpa, p)
        k, S = np.asarray(fitted.k), np.asarray(fitted.S)
    else:
        raise ValueError(f"unknown static method {method!r}: 'pressure' or 'torque'")
    rmse = np.sqrt(np.mean(pressure_residuals(data, fitted) ** 2, axis=0))
    return StaticFit(
        np.asarray(k, float), np.asarray(S, float), np.asarray(p.l0, float), method, fitted, rmse
    )


def angle_errors(data: StaticSet, p: StaticParams) -> dict:
    """Equilibria of the model under the measured pressures vs the measured angles (Table IV)."""
    q_model = np.array([equilibrium(P, p) for P in data.pressures_kpa])
    err = q_model - data.q
    return {
        'q_model': q_model,
        'rmse': np.sqrt(np.mean(err**2, axis=0)),
        'maxae': np.max(np.abs(err), axis=0),
        'n': len(data),
    }


def published_params(p: StaticParams | None = None, path=None) -> StaticParams:
    """The authors' static (k, S) (published_static_sysid_parameters.csv, else Table V)."""
    p = p or StaticParams()
    k, S = (203.95, 105.07), (0.000411, 0.000324)
    if path is not None:
        row = np.genfromtxt(path, delimiter=',', skip_header=1)
        k, S = tuple(row[:2]), tuple(row[2:4])
    return p.with_identified(k=k, S=S, l0=(0.1642, 0.2579))


def fit_static(data_q, data_p_kpa, p: StaticParams) -> StaticParams:
    """Linear least-squares fit of (k1, k2, S1, S2) to equilibria, as in the EquiMus paper.

    Each row gives J_Aᵀ (k(l−l0) − S P) = g ∂U/∂θ: two equations linear in (k, S).
    """
    rows, rhs = [], []
    for q, P in zip(data_q, np.asarray(data_p_kpa, float) * 1e3, strict=True):
        lengths, J, _ = actuation_derivatives(q, p.geometry)
        _, dU = gravity_generalized(q, p)
        dl = lengths - np.asarray(p.l0)
        for j in range(2):
            sg = -p.pressure_sign
            rows.append(
                [J[0, j] * dl[0], J[1, j] * dl[1], sg * J[0, j] * P[0], sg * J[1, j] * P[1]]
            )
            rhs.append(p.g * dU[j])
    x, *_ = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)
    return p.with_identified(k=x[:2], S=x[2:])


def _report(static_dir: str) -> None:
    """Print the static-model accuracy on the rig's data
    (python -m equimus_identification.static DIR)."""
    import os

    d13 = np.loadtxt(
        os.path.join(static_dir, 'StaticPoint_effective_13.csv'), delimiter=',', skiprows=1
    )
    d36 = np.loadtxt(os.path.join(static_dir, 'StaticPoint_all_36.csv'), delimiter=',', skiprows=1)
    k1, k2, s1, s2 = np.loadtxt(
        os.path.join(static_dir, 'published_static_sysid_parameters.csv'), delimiter=',', skiprows=1
    )
    pub = StaticParams(k=(k1, k2), S=(s1, s2), l0=(0.1642, 0.2579), pressure_sign=1.0)
    fit = fit_static(np.deg2rad(d13[:, 2:]), d13[:, :2], pub)

    def err(p, d):
        e = np.array([equilibrium(x, p) for x in d[:, :2]]) - np.deg2rad(d[:, 2:])
        return np.sqrt(np.mean(e**2, axis=0)), np.max(np.abs(e), axis=0)

    print(
        f'refit on Set A: k = {fit.k[0]:.1f}, {fit.k[1]:.1f} N/m; '
        f'S = {fit.S[0] * 1e4:.3f}, {fit.S[1] * 1e4:.3f} cm²'
    )
    print(
        f'{"parameters":22s} {"set":6s} {"RMSE θ1":>8s} {"RMSE θ2":>8s} '
        f'{"MaxAE θ1":>9s} {"MaxAE θ2":>9s}'
    )
    for name, p in (('published static', pub), ('refit on Set A', fit)):
        for sname, d in (('A (13)', d13), ('B (36)', d36)):
            r, m = err(p, d)
            print(f'{name:22s} {sname:6s} {r[0]:8.4f} {r[1]:8.4f} {m[0]:9.4f} {m[1]:9.4f}')
    print('paper Table IV         A (13)   0.0170   0.0566    0.0336    0.1463')
    print('paper Table IV         B (36)   0.0203   0.0416    0.0418    0.1463')


def main(argv=None) -> int:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    _report(argv[0] if argv else '../shared/data/equimus/physical/static')
    return 0


if __name__ == '__main__':
    import sys

    sys.exit(main())
