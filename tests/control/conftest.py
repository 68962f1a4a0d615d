"""Fixtures for the control tests: the real leg description, MuJoCo model and static params."""

import numpy as np
import pytest


@pytest.fixture(scope='session')
def leg():
    from equimus_description.leg import load_leg

    return load_leg()


@pytest.fixture(scope='session')
def sim_params(leg):
    from equimus_description.statics import StaticParams

    return StaticParams.from_leg(leg)


@pytest.fixture(scope='session')
def leg_model(leg):
    from equimus_sim.leg_model import LegModel

    return LegModel(leg.with_timestep(1 / 1200))


@pytest.fixture(scope='session')
def mpc_grid(leg_model, sim_params):
    from equimus_control.mpc import LinearisationGrid, MPCConfig

    return LinearisationGrid(
        leg_model, sim_params, MPCConfig(grid_lo=(1.2, 0.3), grid_hi=(1.8, 1.0))
    )


@pytest.fixture(scope='session')
def triangle(sim_params):
    from equimus_control.reference import triangle_poses

    return triangle_poses(sim_params)


def _make_sim(q0, p0, **mocap_kw):
    from equimus_sim.mocap import MocapConfig, VirtualMocap
    from equimus_sim.simulator import make_simulator

    sim = make_simulator(timestep=1 / 1200, initial_q=np.asarray(q0), initial_pressures=tuple(p0))
    return sim, VirtualMocap(MocapConfig(**mocap_kw))


@pytest.fixture
def make_sim():
    """Factory: (LegSimulator at q0 under p0 kPa, VirtualMocap(**mocap_kw))."""
    return _make_sim
