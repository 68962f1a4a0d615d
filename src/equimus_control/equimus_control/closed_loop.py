"""Closed loop in plain Python: MuJoCo leg (equimus_sim simulator, valve lag) + virtual mocap
+ estimator + controller at 120 Hz, stepping in lockstep like the ROS graph does. Used by the
tests and benchmarks/bench_control.py."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .estimation import EstimatorConfig, JointStateEstimator, Status

PERIOD = 1.0 / 120.0


@dataclass
class RunResult:
    t: np.ndarray
    q: np.ndarray          # true joint angles
    q_ref: np.ndarray
    q_est: np.ndarray
    u: np.ndarray
    compute: np.ndarray    # s per control cycle, wall clock (includes preemption by other load)
    saturated: np.ndarray
    compute_cpu: np.ndarray = None   # s per control cycle, this thread's CPU time

    def rmse(self, skip: float = 0.0):
        m = self.t >= skip
        return np.sqrt(np.mean((self.q[m] - self.q_ref[m]) ** 2, axis=0))


def frame_poses(frame):
    """[(position, quaternion xyzw)] × (base, thigh, calf) from a VirtualMocap frame (wxyz)."""
    out = []
    for name in ('base', 'thigh', 'calf'):
        b = frame.bodies[name]
        w, x, y, z = b.orientation
        out.append((b.position, (x, y, z, w)))
    return out


def run(sim, mocap, controller, reference, duration: float, est_cfg=None) -> RunResult:
    est = JointStateEstimator(est_cfg or EstimatorConfig())
    n = int(round(duration / PERIOD))
    T, Q, R, E, U, C, S, CPU = [], [], [], [], [], [], [], []
    u = sim.pressures
    for k in range(n):
        sim.set_command(u)
        sim.advance(PERIOD)
        t = (k + 1) * PERIOD
        frame = mocap.capture(t, sim.body_poses())
        if frame is None:
            e = est.update_gap(t)
        else:
            e = est.update(t, frame_poses(frame))
        q_ref, qd_ref = reference(t)
        t0, c0 = time.perf_counter(), time.thread_time()
        if e.status == Status.INVALID:
            u, sat = np.zeros(2), np.zeros(2, bool)
        else:
            out = controller.step(e.position, e.velocity, q_ref, qd_ref, PERIOD)
            if isinstance(out, tuple):
                u, sat = out[0], out[1]
            else:
                u, sat = out.pressures, out.saturated
        C.append(time.perf_counter() - t0)
        CPU.append(time.thread_time() - c0)
        q, _ = sim.joint_state()
        T.append(t), Q.append(q), R.append(q_ref), E.append(e.position), U.append(u), S.append(sat)
    return RunResult(*(np.array(v) for v in (T, Q, R, E, U, C, S, CPU)))
