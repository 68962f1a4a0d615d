"""Static identification of (k1, k2, S1, S2) from equilibria (EquiMus Sec. IV-D).

At rest the joint torques balance (equimus_control.statics):
    J_Aᵀ (k (l − l0) − S P) = g ∂U/∂θ,   i.e.   S P = k (l − l0) − h,   h = J_A⁻ᵀ g ∂U/∂θ.
With l0 fixed, dividing by S makes each actuator's pressure linear in two unknowns:
    P_a = (k_a/S_a)(l_a − l0_a) − (1/S_a) h_a,
so the default regression ('pressure') minimises exactly the pressure residual the paper reports
(its 0.887 / 0.861 kPa), one 2-unknown least squares per actuator. The 'torque' method is the
controller's own fit (equimus_control.statics.fit_static: residual in N·m, both joints jointly).

The fit is then validated the paper's way: the equilibrium the fitted model reaches under each
measured pressure pair (minimum of the potential within the joint limits) against the measured
angles (Table IV).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from equimus_control.statics import (StaticParams, equilibrium, fit_static, gravity_generalized,
                                     holding_pressures)
from equimus_sim.kinematics import actuation_derivatives

from .data import StaticSet


@dataclass
class StaticFit:
    k: np.ndarray               # N/m [maa, baa]
    S: np.ndarray               # m²
    l0: np.ndarray              # m (held fixed)
    method: str
    params: StaticParams
    pressure_rmse_kpa: np.ndarray   # on the fitting set

    def overrides(self) -> dict:
        """Dotted keys for equimus_sim.leg_description (k, area; l0 as used)."""
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
        l, J, _ = actuation_derivatives(qq, p.geometry)
        _, dU = gravity_generalized(qq, p)
        H.append(np.linalg.solve(J.T, p.g * dU))
        L.append(l - np.asarray(p.l0))
    return np.array(L), np.array(H)


def pressure_residuals(data: StaticSet, p: StaticParams) -> np.ndarray:
    """Predicted holding pressure − measured pressure (kPa), per pose and actuator."""
    pred = np.array([holding_pressures(q, p) for q in data.q])
    return pred - data.pressures_kpa


def fit(data: StaticSet, p: Optional[StaticParams] = None, method: str = 'pressure') -> StaticFit:
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
                raise ValueError(f'actuator {a}: regression gave 1/S = {beta:.3g} ≤ 0; the data do not '
                                 'span enough pressures for this actuator')
            S[a] = 1.0 / beta
            k[a] = alpha / beta
        fitted = p.with_identified(k=k, S=S)
    elif method == 'torque':
        fitted = fit_static(data.q, data.pressures_kpa, p)
        k, S = np.asarray(fitted.k), np.asarray(fitted.S)
    else:
        raise ValueError(f"unknown static method {method!r}: 'pressure' or 'torque'")
    rmse = np.sqrt(np.mean(pressure_residuals(data, fitted) ** 2, axis=0))
    return StaticFit(np.asarray(k, float), np.asarray(S, float), np.asarray(p.l0, float), method,
                     fitted, rmse)


def angle_errors(data: StaticSet, p: StaticParams) -> dict:
    """Equilibria of the model under the measured pressures vs the measured angles (Table IV)."""
    q_model = np.array([equilibrium(P, p) for P in data.pressures_kpa])
    err = q_model - data.q
    return {'q_model': q_model, 'rmse': np.sqrt(np.mean(err ** 2, axis=0)),
            'maxae': np.max(np.abs(err), axis=0), 'n': len(data)}


def published_params(p: Optional[StaticParams] = None, path=None) -> StaticParams:
    """The authors' static (k, S) (published_static_sysid_parameters.csv, else Table V)."""
    p = p or StaticParams()
    k, S = (203.95, 105.07), (0.000411, 0.000324)
    if path is not None:
        row = np.genfromtxt(path, delimiter=',', skip_header=1)
        k, S = tuple(row[:2]), tuple(row[2:4])
    return p.with_identified(k=k, S=S, l0=(0.1642, 0.2579))
