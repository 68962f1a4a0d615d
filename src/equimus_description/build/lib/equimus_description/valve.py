"""Valve facts and the one valve model (no ROS, no MuJoCo).

The Festo VPPE behaves as a first-order lag τ·ṗ = u − p (τ identified by the EquiMus authors,
0.2171 s). `ValveLag` is the only implementation of it: the simulator steps it once per physics
step, the DAC-board emulator once per board tick, the controllers' internal models use its
coefficient. τ itself comes from the leg description (config/leg.yaml, `valve.time_constant`);
`VALVE_TAU_S` is the default that description falls back to.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ['ACTUATORS', 'HARD_MAX_KPA', 'P_MIN_KPA', 'VALVE_TAU_S', 'ValveLag', 'lag_coefficient']

#: Valve channels in array order: maa (mono-articular, hip), baa (bi-articular).
ACTUATORS: tuple[str, ...] = ('maa', 'baa')

HARD_MAX_KPA = 50.0
"""The rig's absolute pressure ceiling (kPa). Configuration may lower it, never raise it."""

P_MIN_KPA = 0.0
"""Venting: the lowest pressure, and the safe state of every channel."""

VALVE_TAU_S = 0.2171
"""Default valve time constant (s) when a leg description gives none."""


def lag_coefficient(dt: float, tau: float) -> float:
    """a = exp(−Δt/τ): the exact zero-order-hold discretisation of the lag over Δt."""
    return math.exp(-dt / tau) if tau > 0 else 0.0


class ValveLag:
    """First-order lag per channel, discretised exactly for an input held over each step."""

    def __init__(
        self, tau: float, n: int = len(ACTUATORS), p0: Sequence[float] | np.ndarray | None = None
    ):
        if not (tau > 0 and math.isfinite(tau)):
            raise ValueError(f'valve time constant must be > 0 s, got {tau!r}')
        self.tau = float(tau)
        self.p = np.zeros(n) if p0 is None else np.array(p0, float).reshape(n)
        self._dt: float | None = None
        self._a = 0.0

    def coefficient(self, dt: float) -> float:
        if dt != self._dt:
            self._dt = dt
            self._a = lag_coefficient(dt, self.tau)
        return self._a

    def step(self, u: Sequence[float] | np.ndarray, dt: float) -> np.ndarray:
        a = self.coefficient(dt)
        self.p = a * self.p + (1.0 - a) * np.asarray(u, float)
        return self.p

    @staticmethod
    def closed_form(p0: Sequence[float], u: Sequence[float], t: float, tau: float) -> np.ndarray:
        """Response of τ·ṗ = u − p to a step held for time t."""
        u_ = np.asarray(u, float)
        return u_ + (np.asarray(p0, float) - u_) * np.exp(-np.asarray(t) / tau)
