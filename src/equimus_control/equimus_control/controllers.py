"""The controllers the controller node can run, by name, with their config dataclasses (no ROS).

Each kind names its config class (whose `param()` fields become the node's parameters, under
`prefix`), how to build the controller from it, and, if some of its fields may change at run
time, how to apply a new config to a running controller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from equimus_description.config import ConfigError, param, validate_fields
from equimus_description.leg import LegDescription
from equimus_description.statics import StaticParams

from . import CONTROLLERS
from .controller import Controller
from .plant import DEFAULT_PLANT, PlantFactory


@dataclass(frozen=True)
class ControllerChoice:
    """Which controller runs, on which model of the leg: fixed for the node's life."""

    controller: str = param(CONTROLLERS[0], ' | '.join(CONTROLLERS))
    pressure_sign: float = param(
        1.0,
        '+1: pressure lengthens the actuator (the rig and the sim model); -1: pressure pulls',
        range=(-1.0, 1.0),
    )
    leg_parameter_set: str = param(
        '', "parameter set of config/leg.yaml for the controller's model ('' = the file as is)"
    )
    leg_overrides: str = param(
        '',
        "leg override YAML applied to the controller's model after the parameter set (an "
        "identified params.yaml, as `equimus adapt` deploys); '' = none",
    )
    plant_model: str = param(
        DEFAULT_PLANT,
        'plant model plugin (entry-point group '
        'equimus.plant_models) of the model-based controllers',
    )
    leg_description: str = param(
        '',
        "leg YAML of the controller's model ('' = config/leg.yaml); another limb (not the "
        '2-joint leg with its geometry block) runs pid or open_loop on its general kinematics',
    )

    def __post_init__(self) -> None:
        validate_fields(self)
        if self.controller not in CONTROLLERS:
            raise ConfigError(
                f'controller={self.controller!r}: use one of {", ".join(CONTROLLERS)}'
            )
        if self.pressure_sign not in (1.0, -1.0):
            raise ConfigError(f'pressure_sign={self.pressure_sign!r}: must be +1.0 or -1.0')


@dataclass(frozen=True)
class OpenLoopConfig:
    """Static feedforward has no settings of its own."""


def _open_loop(
    cfg: Any, params: StaticParams, leg: LegDescription, plant: Callable[[], PlantFactory]
) -> Controller:
    from .pid import StaticFeedforward

    return StaticFeedforward(params)


def _pid(
    cfg: Any, params: StaticParams, leg: LegDescription, plant: Callable[[], PlantFactory]
) -> Controller:
    from .pid import PIDController

    return PIDController(params, cfg)


def _pid_apply(ctrl: Any, cfg: Any) -> None:
    ctrl.set_gains(cfg)


def _mpc(
    cfg: Any, params: StaticParams, leg: LegDescription, plant: Callable[[], PlantFactory]
) -> Controller:
    from .mpc import LinearMPC

    model = plant()(leg.with_timestep(cfg.period / 10))  # linearised at 10 physics steps/period
    return LinearMPC(
        model, params, replace(cfg, valve_tau=leg.valve_time_constant), valve=leg.valve
    )


def _ltv_mpc(
    cfg: Any, params: StaticParams, leg: LegDescription, plant: Callable[[], PlantFactory]
) -> Controller:
    from equimus_description.dynamics import DynamicParams, LegDynamics

    from .ltv_mpc import LTVMPC

    dynamics = LegDynamics(DynamicParams.from_leg(leg, params.pressure_sign))
    return LTVMPC(dynamics, replace(cfg, valve_tau=leg.valve_time_constant), valve=leg.valve)


def _sampling(
    cfg: Any, params: StaticParams, leg: LegDescription, plant: Callable[[], PlantFactory]
) -> Controller:
    from .sampling import PredictiveSampling

    model = plant()(leg.with_timestep(cfg.period))  # rollouts step at the control period
    return PredictiveSampling(
        model, params, replace(cfg, valve_tau=leg.valve_time_constant), valve=leg.valve
    )


def _policy(
    cfg: Any, params: StaticParams, leg: LegDescription, plant: Callable[[], PlantFactory]
) -> Controller:
    from .policy import PolicyController, load_policy

    return PolicyController(load_policy(cfg.policy_file), params)


#: Controllers that run on any limb of the description (equimus_control.limb_pid).
LIMB_CONTROLLERS = ('pid', 'open_loop')


def is_rig_leg(leg: LegDescription) -> bool:
    """The 2-joint EquiMus leg with its closed-form geometry (every controller runs on it)."""
    return (
        leg.geometry is not None
        and list(leg.joints) == ['hip', 'knee']
        and list(leg.actuators) == ['maa', 'baa']
    )


def build_limb_controller(
    name: str, cfg: Any, leg: LegDescription, pressure_sign: float
) -> Controller:
    """`name` for a limb other than the rig's leg (N joints, M muscles)."""
    from equimus_description.limb import PlanarLimb

    from .limb_pid import LimbPIDController, LimbStaticFeedforward

    if name not in LIMB_CONTROLLERS:
        raise ConfigError(
            f'controller={name!r} needs the 2-joint EquiMus leg; the description '
            f'{leg.source or leg.name} has joints {list(leg.joints)} and muscles '
            f'{list(leg.actuators)}: use controller {" or ".join(LIMB_CONTROLLERS)}'
        )
    limb = PlanarLimb(leg)
    if name == 'pid':
        return LimbPIDController(limb, cfg, pressure_sign)
    return LimbStaticFeedforward(limb, pressure_sign)


@dataclass(frozen=True)
class ControllerKind:
    config: Callable[[], Any]  # the config dataclass (called for its defaults)
    prefix: str  # of its parameter names
    build: Callable[[Any, StaticParams, LegDescription, Callable[[], PlantFactory]], Controller]
    apply: Callable[[Any, Any], None] | None = None  # (controller, new config)


def kinds() -> dict[str, ControllerKind]:
    """Every kind of CONTROLLERS (imports the config classes only)."""
    from .ltv_mpc import LTVMPCConfig
    from .mpc import MPCConfig
    from .pid import PIDGains
    from .policy import PolicyConfig
    from .sampling import SamplingConfig

    table = {
        'open_loop': ControllerKind(OpenLoopConfig, '', _open_loop),
        'pid': ControllerKind(PIDGains, '', _pid, _pid_apply),
        'mpc': ControllerKind(MPCConfig, '', _mpc),
        'ltv_mpc': ControllerKind(LTVMPCConfig, '', _ltv_mpc),
        'sampling': ControllerKind(SamplingConfig, 'sampling_', _sampling),
        'policy': ControllerKind(PolicyConfig, '', _policy),
    }
    assert set(table) == set(CONTROLLERS)
    return table


def controller_kind(name: str) -> ControllerKind:
    table = kinds()
    if name not in table:
        raise ConfigError(f'controller={name!r}: use one of {", ".join(CONTROLLERS)}')
    return table[name]
