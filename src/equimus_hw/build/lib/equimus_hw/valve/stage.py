"""What the valve driver does to one command on the simulated board, as plain code (no ROS).

The safety filter (clamp, NaN vent, slew on the command's own clock, watchdog) and the DAC
quantisation of `driver_node` with `board: sim`, for offline loops that must see the pressures
the sim graph's valves get (equimus_control.closed_loop's `actuation`, the control benchmark).
"""

from __future__ import annotations

from collections.abc import Sequence

from equimus_description.valve import ACTUATORS

from .config import DriverConfig
from .safety import SafetyFilter


class SimulatedDriver:
    """Armed at `t0`; call it with each command and its time (s) to get the applied kPa."""

    def __init__(self, cfg: DriverConfig | None = None, t0: float = 0.0) -> None:
        cfg = cfg or DriverConfig()
        self.cal = cfg.calibration()
        self.safety = SafetyFilter(
            len(ACTUATORS),
            cfg.max_kpa,
            cfg.slew_rate_kpa_s,
            cfg.command_timeout_s,
        )
        self.safety.arm(t0)
        self._last: float | None = None

    def __call__(self, values: Sequence[float], now: float) -> list[float]:
        elapsed = 0.0 if self._last is None else max(0.0, now - self._last)
        self._last = now
        self.safety.command(values, now)
        out = self.safety.step(now, elapsed)
        return [self.cal.code_to_kpa(c) for c in self.cal.codes(out)]
