"""Closed loop in plain Python: a simulated leg (valve lag) + virtual mocap + estimator + the one
`step.ControlStep` at 120 Hz, stepping in lockstep like the ROS graph does. Used by the tests
and benchmarks/bench_control.py; the simulator and mocap are passed in (duck-typed), so this
module imports no simulator."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from equimus_description.interface import BODIES

from .controller import Controller
from .estimation import EstimatorConfig, JointStateEstimator
from .reference import preview_samples
from .step import PERIOD, ControlStep
from .supervisor import SafetyConfig

ReferenceFn = Callable[[float], tuple[np.ndarray, np.ndarray]]
#: command (kPa) and its time (s) -> the pressures the valves are driven to (kPa)
Actuation = Callable[[Any, float], Sequence[float]]


@dataclass
class RunResult:
    t: np.ndarray
    q: np.ndarray  # true joint angles
    q_ref: np.ndarray
    q_est: np.ndarray
    u: np.ndarray
    compute: np.ndarray  # s per control cycle, wall clock (includes preemption by other load)
    saturated: np.ndarray
    compute_cpu: np.ndarray  # s per control cycle, this thread's CPU time
    vented: np.ndarray

    def rmse(self, skip: float = 0.0) -> np.ndarray:
        m = self.t >= skip
        return np.sqrt(np.mean((self.q[m] - self.q_ref[m]) ** 2, axis=0))


def frame_poses(
    frame: Any, bodies: Sequence[str] = BODIES
) -> list[tuple[Sequence[float], tuple[float, float, float, float]]]:
    """[(position, quaternion xyzw)] × bodies (base, thigh, calf) from a VirtualMocap frame
    (wxyz)."""
    out = []
    for name in bodies:
        b = frame.bodies[name]
        w, x, y, z = b.orientation
        out.append((b.position, (x, y, z, w)))
    return out


def delayed(actuation: Actuation, frames: int, p0: Sequence[float] | np.ndarray) -> Actuation:
    """`actuation` whose pressures reach the valves `frames` frames (of PERIOD) late, `p0`
    until then: the latency a running graph adds beyond the loop's own frame (`equimus adapt`
    measures it on the rig)."""
    if frames <= 0:
        return actuation
    late: deque[list[float]] = deque([list(p0)] * int(frames))

    def call(u: Any, t: float) -> list[float]:
        late.append(list(actuation(u, t)))
        return late.popleft()

    return call


def run(
    sim: Any,
    mocap: Any,
    controller: Controller,
    reference: ReferenceFn,
    duration: float,
    est_cfg: EstimatorConfig | None = None,
    safety: SafetyConfig | None = None,
    actuation: Actuation | None = None,
    bodies: Sequence[str] = BODIES,
    preview_s: float = 0.0,
) -> RunResult:
    """`duration` s of closed loop; the reference is sampled at each frame's time, the guard's
    clock is the simulation time. `actuation(command, t)` turns each command into the pressures
    the valves get (the sim graph's valve driver: equimus_hw.valve.stage.SimulatedDriver); without
    it the command reaches the valves as it is. `u` in the result is the commanded pressure.
    `preview_s` > 0: each frame the reference also sends its next preview_s s, as the reference
    node's /reference/preview does.
    `bodies`: the mocap bodies in the estimator's pose order (another limb: with est_cfg.joints).
    """
    est = JointStateEstimator(est_cfg or EstimatorConfig())
    step = ControlStep(
        controller, safety, n_joints=est.n, n_valves=len(np.asarray(sim.pressures).reshape(-1))
    )
    n = int(round(duration / PERIOD))
    series: list[list[Any]] = [[] for _ in range(9)]
    T, Q, R, E, U, C, S, CPU, V = series
    u = applied = sim.pressures
    for k in range(n):
        sim.set_command(applied)
        sim.advance(PERIOD)
        t = (k + 1) * PERIOD
        frame = mocap.capture(t, sim.body_poses(bodies))
        e = est.update_gap(t) if frame is None else est.update(t, frame_poses(frame, bodies))
        q_ref, qd_ref = reference(t)
        step.set_reference(q_ref, qd_ref, t)
        if preview_s > 0.0:
            step.set_preview(*preview_samples(reference, t, preview_s, PERIOD))
        t0, c0 = time.perf_counter(), time.thread_time()
        cmd = step.step(e.position, e.velocity, t, t)
        C.append(time.perf_counter() - t0)
        CPU.append(time.thread_time() - c0)
        u = cmd.pressures
        applied = u if actuation is None else actuation(u, t)
        q, _ = sim.joint_state()
        for store, value in (
            (T, t),
            (Q, q),
            (R, q_ref),
            (E, e.position),
            (U, u),
            (S, cmd.saturated),
            (V, cmd.vented),
        ):
            store.append(value)
    return RunResult(*(np.array(v) for v in series))
