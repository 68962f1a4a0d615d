"""The control cycle, written once (no ROS): estimate → guard → reference with preview →
controller → clipped command.

The controller node, the offline closed-loop harness (`closed_loop.run`), the fused control loop
(equimus_bringup.control_loop), the benchmarks and the tests all run a `ControlStep`. Time enters
as arguments only: `now` (steady-clock s; sim s in the composed sim graph) drives the
stale-state guard, the estimate's stamp (s) places the reference, so a recorded input sequence
always gives the same commands.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .controller import MAX_PREVIEW_S, Controller, ControlOutput, Estimate, Preview, Reference
from .reference import reference_at
from .supervisor import SafetyConfig, Supervisor, check_joints

Vector = Sequence[float] | np.ndarray

#: s, the nominal control period: the first cycle's time step (there is no previous stamp).
PERIOD = 1.0 / 120.0
#: s, longest time step handed to a controller (a gap in the estimates is not integrated over).
MAX_DT = 0.1


def stamp_seconds(sec: int, nanosec: int) -> float:
    """A ROS time stamp in seconds, computed the same way by every caller (bit-identical)."""
    return sec + nanosec * 1e-9


@dataclass(frozen=True)
class Command:
    """One cycle's result: the pressures to send (kPa, [maa, baa], within [0, p_max]).

    `vented`: a guard tripped and the command is 0 kPa (`reason` says why); `output` is the
    controller's own answer when it ran (None when vented)."""

    pressures: np.ndarray
    saturated: np.ndarray
    vented: bool
    reason: str
    output: ControlOutput | None = None


class ControlStep:
    """One controller behind the guards of `supervisor.Supervisor`; see the module docstring."""

    def __init__(
        self,
        controller: Controller,
        safety: SafetyConfig | None = None,
        max_preview: float = MAX_PREVIEW_S,
        n_joints: int = 2,
        n_valves: int = 2,
    ) -> None:
        self.controller = controller
        self.supervisor = Supervisor(safety, n_joints, n_valves)
        self.n, self.n_valves = n_joints, n_valves
        self.max_preview = max_preview
        self.q_ref: np.ndarray | None = None
        self.qd_ref = np.zeros(n_joints)
        self.ref_stamp: float | None = None
        self.preview: Preview | None = None
        #: whether the last cycle took the reference from the preview (its /diagnostics)
        self.previewed = False
        self.last_stamp: float | None = None

    @property
    def safety(self) -> SafetyConfig:
        return self.supervisor.cfg

    def reconfigure(self, safety: SafetyConfig) -> None:
        """New guard range, stale timeout or p_max, from the next cycle on (a guard range with
        the wrong number of joints raises ConfigError and the old one stays)."""
        check_joints(safety, self.n)
        self.supervisor.cfg = safety

    def reset(self) -> None:
        """Start afresh (the valves were (re)armed): the controller forgets its integrators,
        warm starts and predictions, and the next time step is the nominal one. The guards and
        the reference stay."""
        self.controller.reset()
        self.last_stamp = None

    def spare(self) -> ControlStep:
        """A deep copy to step without touching this one: the fused loop rehearses each
        frame's code on it before the frame comes (equimus_bringup.control_loop)."""
        return copy.deepcopy(self)

    def follow(self, other: ControlStep) -> None:
        """Take `other`'s reference, preview and guard settings (a spare stays on the path the
        real step takes: the preview or the latest sample)."""
        self.q_ref, self.qd_ref, self.ref_stamp = other.q_ref, other.qd_ref, other.ref_stamp
        self.preview = other.preview
        self.supervisor.cfg = other.supervisor.cfg

    def set_reference(self, q: Vector, qd: Vector, stamp: float) -> bool:
        """The latest reference sample (rad, rad/s at `stamp` s). A non-finite pose is ignored
        (False); a non-finite velocity counts as 0."""
        if self.n != 2:
            return self._set_reference_n(q, qd, stamp)
        if len(q) < 2:
            return False
        q0, q1 = float(q[0]), float(q[1])
        if not (math.isfinite(q0) and math.isfinite(q1)):
            return False
        qd0, qd1 = (float(qd[0]), float(qd[1])) if len(qd) >= 2 else (0.0, 0.0)
        self.q_ref = np.array([q0, q1])
        self.qd_ref = np.array(
            [qd0 if math.isfinite(qd0) else 0.0, qd1 if math.isfinite(qd1) else 0.0]
        )
        self.ref_stamp = stamp
        return True

    def _set_reference_n(self, q: Vector, qd: Vector, stamp: float) -> bool:
        n = self.n
        if len(q) < n:
            return False
        q_arr = np.asarray(q, float)[:n]
        if not np.all(np.isfinite(q_arr)):
            return False
        qd_arr = np.asarray(qd, float)[:n] if len(qd) >= n else np.zeros(n)
        self.q_ref = q_arr
        self.qd_ref = np.where(np.isfinite(qd_arr), qd_arr, 0.0)
        self.ref_stamp = stamp
        return True

    def set_preview(self, t: Vector, q: Any, qd: Any) -> bool:
        """The reference's own future (times s, ascending; angles rad and velocities rad/s, one
        row per time): used in place of the latest sample while it covers the estimate's time.
        One that is not finite, not ascending or of the wrong shape is ignored (False)."""
        try:
            t_arr = np.asarray(t, float).reshape(-1)
            q_arr, qd_arr = np.asarray(q, float), np.asarray(qd, float)
        except (TypeError, ValueError):  # ragged rows
            return False
        shape = (len(t_arr), self.n)
        # The arrays' own .all() and a slice comparison, not np.all and np.diff: those are
        # Python wrappers, whose calls cost more than the checks from the cold caches a frame
        # of the composed sim graph meets every tenth of a second (docs/benchmarks.md, issue 30).
        if (
            len(t_arr) < 2
            or q_arr.shape != shape
            or qd_arr.shape != shape
            or not (np.isfinite(t_arr).all() and (t_arr[1:] > t_arr[:-1]).all())
            or not (np.isfinite(q_arr).all() and np.isfinite(qd_arr).all())
        ):
            return False
        self.preview = Preview(t_arr, q_arr, qd_arr)
        return True

    def _preview_for(self, stamp: float) -> Preview | None:
        """The preview if it holds the estimate's time (a stale or far-future one is not)."""
        p = self.preview
        if p is None or not (p.t[0] - MAX_DT <= stamp < p.t[-1]):
            return None
        return p

    def step(self, q: Vector, qd: Vector, stamp: float, now: float) -> Command:
        """The command for the estimate (q, qd) taken at `stamp`; `now` is the steady clock."""
        n = self.n
        q_arr = np.asarray(q, float)[:n] if len(q) >= n else np.full(n, np.nan)
        qd_arr = np.asarray(qd, float)[:n] if len(qd) >= n else np.zeros(n)
        dt = (
            PERIOD
            if self.last_stamp is None or stamp <= self.last_stamp
            else min(stamp - self.last_stamp, MAX_DT)
        )
        self.last_stamp = stamp
        sup = self.supervisor
        if not sup.check_state(q_arr, now, qd_arr):
            return self._vent()
        if self.q_ref is None:
            self.q_ref = q_arr.copy()  # no reference yet: hold where the leg is
        preview = self._preview_for(stamp)
        self.previewed = preview is not None
        if preview is None:
            ref = Reference(self._reference_at(stamp), self.qd_ref, self.max_preview)
        else:
            r_q, r_qd = preview.sample(stamp)
            ref = Reference(r_q, r_qd, self.max_preview, preview, stamp)
        out = self.controller.step(Estimate(q_arr, qd_arr, stamp), ref, dt, sup.cfg.p_max)
        u = sup.clip(out.pressures)
        if sup.venting:  # the controller produced a non-finite command
            self.controller.reset()
            return Command(u, np.zeros(self.n_valves, bool), True, sup.reason, out)
        return Command(u, np.asarray(out.saturated, bool), False, sup.reason, out)

    def check_stale(self, now: float) -> Command | None:
        """A vent command if no valid estimate arrived within stale_timeout, else None."""
        if self.supervisor.check_stale(now):
            return self._vent()
        return None

    def _reference_at(self, stamp: float) -> np.ndarray:
        assert self.q_ref is not None
        if self.ref_stamp is None:
            return self.q_ref
        return reference_at(self.q_ref, self.qd_ref, self.ref_stamp, stamp, self.max_preview)

    def _vent(self) -> Command:
        self.controller.reset()
        sup = self.supervisor
        return Command(sup.vent.copy(), np.zeros(self.n_valves, bool), True, sup.reason)
