"""The plant model the model-based controllers (MPC, predictive sampling) roll out, as a
Protocol, and where its implementation comes from.

equimus_control imports no simulator: the implementation is a plugin registered under the
entry-point group `equimus.plant_models` (equimus_sim registers `mujoco`, its LegModel). Tests
and benchmarks may pass a model object directly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any, Protocol

import numpy as np

from equimus_description.leg import LegDescription

ENTRY_POINT_GROUP = 'equimus.plant_models'
DEFAULT_PLANT = 'mujoco'


class PlantModel(Protocol):
    """A MuJoCo model of the leg with the accessors the planners need (equimus_sim.LegModel)."""

    model: Any  # mujoco.MjModel
    actuator_names: Sequence[str]
    qpos_idx: np.ndarray
    qvel_idx: np.ndarray
    ctrl_idx: np.ndarray

    def reset(self, data: Any, q: Any = None, qd: Any = None) -> None: ...

    def set_pressures(self, data: Any, p_kpa: Any) -> np.ndarray: ...

    def forces_from_pressures(self, p_kpa: Any) -> np.ndarray: ...

    def joint_angles(self, data: Any) -> np.ndarray: ...

    def joint_velocities(self, data: Any) -> np.ndarray: ...


PlantFactory = Callable[[LegDescription], PlantModel]


class PlantModelMissing(ValueError):
    """No plugin provides the requested plant model (a ValueError: the node exits 2 with it)."""


def plant_factory(name: str = DEFAULT_PLANT) -> PlantFactory:
    """The factory registered as `name` in the `equimus.plant_models` entry-point group."""
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        have = sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
        raise PlantModelMissing(
            f'no plant model {name!r} in entry-point group {ENTRY_POINT_GROUP!r} '
            f'(installed: {", ".join(have) or "none"}); the model-based controllers need one: '
            f"install equimus_sim (it registers 'mujoco'), e.g. build the workspace with "
            f'scripts/setup.sh and source scripts/env.sh'
        )
    factory: PlantFactory = found[0].load()
    return factory
