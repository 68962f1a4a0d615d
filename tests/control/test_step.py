"""ControlStep, the one control cycle, in plain Python: guard → reference preview → controller →
clip; and where the model-based controllers' plant model comes from."""

import math

import numpy as np
import pytest

from equimus_control.controller import Controller, ControlOutput, Estimate, Reference
from equimus_control.plant import PlantModelMissing, plant_factory
from equimus_control.step import ControlStep
from equimus_control.supervisor import SafetyConfig


class Recorder:
    """A controller that answers a fixed command and records what it was given."""

    def __init__(self, answer=(60.0, 5.0)):
        self.answer = np.array(answer)
        self.calls = []
        self.resets = 0

    def reset(self):
        self.resets += 1

    def step(self, state, ref, dt, p_max):
        self.calls.append((state, ref, dt, p_max))
        return ControlOutput(self.answer.copy(), np.zeros(2, bool))


def test_every_controller_implements_the_protocol(sim_params, leg_model, mpc_grid):
    from equimus_control.mpc import LinearMPC, MPCConfig
    from equimus_control.pid import PIDController, StaticFeedforward

    ctrls = [
        StaticFeedforward(sim_params),
        PIDController(sim_params),
        LinearMPC(
            leg_model, sim_params, MPCConfig(grid_lo=(1.2, 0.3), grid_hi=(1.8, 1.0)), mpc_grid
        ),
    ]
    for c in ctrls:
        assert isinstance(c, Controller)
        out = c.step(
            Estimate(np.array([1.45, 0.55]), np.zeros(2), 0.0),
            Reference(np.array([1.5, 0.6]), np.zeros(2)),
            1 / 120,
            20.0,
        )
        assert isinstance(out, ControlOutput) and out.pressures.shape == (2,)
        assert np.all((out.pressures >= 0) & (out.pressures <= 20.0))


def test_the_reference_is_previewed_to_the_state_stamp_and_the_command_clipped():
    ctrl = Recorder()
    step = ControlStep(ctrl, SafetyConfig(p_max=40.0))
    step.set_reference([1.4, 0.6], [0.5, -1.0], 10.0)
    cmd = step.step([1.45, 0.55], [0.0, 0.0], 10.05, now=0.0)
    state, ref, dt, p_max = ctrl.calls[-1]
    np.testing.assert_allclose(ref.q, [1.425, 0.55])  # 0.05 s along the velocity
    assert p_max == 40.0 and dt == pytest.approx(1 / 120)
    assert list(cmd.pressures) == [40.0, 5.0] and not cmd.vented
    step.step([1.45, 0.55], [0.0, 0.0], 11.0, now=0.01)  # 1 s late: preview capped at 0.1 s
    _, ref, dt, _ = ctrl.calls[-1]
    np.testing.assert_allclose(ref.q, [1.45, 0.5])
    assert dt == pytest.approx(0.1)  # a long gap is not integrated over


def test_guards_vent_reset_the_controller_and_skip_it():
    ctrl = Recorder()
    step = ControlStep(ctrl, SafetyConfig(stale_timeout=0.25))
    assert not step.step([1.45, 0.55], [0, 0], 0.0, now=0.0).vented
    for q, qd, why in (
        ([math.nan, 0.5], [0, 0], 'invalid'),
        ([1.45, 0.55], [math.inf, 0], 'invalid'),
        ([2.7, 0.5], [0, 0], 'joint_limit'),
    ):
        n, r = len(ctrl.calls), ctrl.resets
        cmd = step.step(q, qd, 1.0, now=0.1)
        assert cmd.vented and list(cmd.pressures) == [0.0, 0.0] and cmd.reason.startswith(why)
        assert len(ctrl.calls) == n and ctrl.resets == r + 1
    assert not step.step([1.45, 0.55], [0, 0], 2.0, now=0.2).vented
    assert step.check_stale(0.3) is None
    cmd = step.check_stale(0.5)
    assert cmd is not None and cmd.vented and cmd.reason.startswith('stale')


def test_a_non_finite_controller_output_vents():
    step = ControlStep(Recorder(answer=(math.nan, 1.0)))
    cmd = step.step([1.45, 0.55], [0, 0], 0.0, now=0.0)
    assert cmd.vented and list(cmd.pressures) == [0.0, 0.0]


def test_reconfigure_takes_effect_on_the_next_cycle():
    step = ControlStep(Recorder())
    step.reconfigure(SafetyConfig(p_max=12.0))
    assert list(step.step([1.45, 0.55], [0, 0], 0.0, now=0.0).pressures) == [12.0, 5.0]


@pytest.mark.parametrize(
    'bad',
    [
        dict(p_max=60.0),
        dict(p_max=math.nan),
        dict(p_max=0.0),
        dict(safe_min=(2.6, -0.1)),
        dict(stale_timeout=math.inf),
    ],
)
def test_invalid_safety_config_is_refused_with_the_key(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        SafetyConfig(**bad)


def test_the_plant_model_comes_from_the_entry_point_and_a_missing_one_says_what_to_install():
    from equimus_sim.leg_model import LegModel

    assert plant_factory('mujoco') is LegModel
    with pytest.raises(PlantModelMissing, match='equimus_sim') as e:
        plant_factory('no_such_plant')
    assert "'mujoco'" in str(e.value)  # lists what is installed
