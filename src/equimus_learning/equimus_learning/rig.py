"""The simulated rig an environment steps: the leg, its valves' safety filter, and what the
controller sees of it (virtual mocap → estimator), built one way for every task."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from equimus_control.estimation import EstimatorConfig, JointEstimate, JointStateEstimator
from equimus_description.interface import BODIES
from equimus_description.valve import ValveParams
from equimus_hw.valve.stage import SimulatedDriver
from equimus_sim.leg_model import LegModel
from equimus_sim.mocap import MocapConfig, MocapFrame, VirtualMocap
from equimus_sim.simulator import LegSimulator


@dataclass
class SimulatedRig:
    """One episode's rig; `sensing` is any config with position_noise, orientation_noise and
    drop_probability (the tasks' configs)."""

    sim: LegSimulator
    mocap: VirtualMocap
    estimator: JointStateEstimator
    driver: SimulatedDriver
    #: the last captured frame (None when it was dropped): every tracked body, Motive frame
    frame: MocapFrame | None = None

    @classmethod
    def build(
        cls,
        leg_model: LegModel,
        valve: ValveParams,
        q0: Any,
        p0: np.ndarray,
        sensing: Any,
        seed: int,
        extra_bodies: tuple[str, ...] = (),
    ) -> SimulatedRig:
        """`extra_bodies`: further rigid bodies of the model that Motive tracks (the ball)."""
        sim = LegSimulator(
            leg_model,
            valve,
            p_max=leg_model.pressure_max_kpa,
            initial_pressures=tuple(p0),
            initial_q=tuple(float(v) for v in q0),
        )
        mocap = VirtualMocap(
            MocapConfig(
                position_noise=sensing.position_noise,
                orientation_noise=sensing.orientation_noise,
                drop_probability=sensing.drop_probability,
                seed=seed,
            ),
            bodies=BODIES + tuple(extra_bodies),
        )
        return cls(sim, mocap, JointStateEstimator(EstimatorConfig()), SimulatedDriver())

    def estimate(self, t: float) -> JointEstimate:
        """Capture a mocap frame of the leg at time t and update the estimator from it (or from
        the gap when the frame is dropped)."""
        P, Q = self.sim.body_arrays(self.mocap.bodies)
        frame = self.mocap.capture_arrays(t, P, Q)
        self.frame = frame
        if frame is None:
            return self.estimator.update_gap(t)
        poses = []
        for name in BODIES:
            b = frame.bodies[name]
            w, x, y, z = b.orientation
            poses.append((b.position, (x, y, z, w)))
        return self.estimator.update(t, poses)
