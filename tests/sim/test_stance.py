"""Stance (Table III's third column): the leg standing on its foot in MuJoCo (real contact) against
the analytic model re-rooted at the foot, within the paper's errors; the foot holds."""

import subprocess
import sys

import mujoco
import numpy as np
import pytest

from equimus_description.leg import LegDescriptionError, from_dict, load_leg
from equimus_sim.mjcf_builder import base_slide_names, build_mjcf, build_model
from equimus_sim.stance import (
    PAPER_STANCE,
    StanceLagrangian,
    StanceSetup,
    run_stance,
    stance_leg,
)

FOOT_TOL_M = 0.5e-3  # stated tolerance: penetration and slip beyond rolling below 0.5 mm


@pytest.fixture(scope='module')
def result():
    return run_stance()


def test_stance_row_within_paper(result):
    eq = result['equimus']
    assert np.all(np.array(eq['rmse']) <= np.array(PAPER_STANCE['rmse'])), eq
    assert np.all(np.array(eq['maxae']) <= np.array(PAPER_STANCE['maxae'])), eq
    # the run is a real motion, not a leg standing still: the knee flexes by more than 0.5 rad
    lo, hi = result['theta_range']
    assert hi[1] - lo[1] > 0.5


def test_pure_baseline_is_clearly_worse(result):
    eq = np.array(result['equimus']['rmse'])
    pure = np.array(result['pure']['rmse'])
    assert np.all(pure >= 5 * eq), (pure, eq)


def test_foot_neither_penetrates_nor_slides(result):
    eq = result['equimus']
    assert 0 <= eq['penetration_m'] < FOOT_TOL_M
    assert eq['slip_m'] < FOOT_TOL_M
    # the analytic pinned foot needs the ground to push (no lift-off) within the friction cone
    assert result['min_normal_force_n'] > 0
    assert result['max_friction_ratio'] < result['contact']['friction'][0]


def test_knee_limit_is_the_difference_when_left_on(result):
    """θ0 sits on the knee's lower limit; with the limit on, MuJoCo stops a hyperextension the
    analytic model makes, and the errors grow (the reason the comparison builds no limits)."""
    limited = run_stance(setup=StanceSetup(joint_limits=True), variants=('equimus',))
    assert limited['equimus']['rmse'][1] > 10 * result['equimus']['rmse'][1]


def test_stance_forces_are_the_gradient_of_the_potential():
    """Gravity and springs in the re-rooted model (base mass included) derive from one potential:
    Q(θ) = −∂V/∂θ, V summed over every mass at its re-rooted position."""
    lag = StanceLagrangian()
    z = np.zeros(lag.n)

    def potential(q):
        fr = lag._frames(np.asarray(q, float), z)
        V = -lag.base_mass * lag.g * lag._point(lag.base_com, fr, z)[0][1]
        for i in range(len(lag.body_names)):
            if lag.parent[i] >= 0:
                V -= lag.mass[i] * lag.g * lag._point(lag.com[i], fr, z)[0][1]
        for a, A, B in lag.acts:
            rA, rB = lag._point(A, fr, z)[0], lag._point(B, fr, z)[0]
            V -= 0.5 * a.m * lag.g * (rA[1] + rB[1])
            V += 0.5 * a.k * (np.linalg.norm(rB - rA) - a.l0) ** 2
        return V

    rng = np.random.default_rng(4)
    for _ in range(3):
        q = np.array([rng.uniform(1.0, 2.0), rng.uniform(0.0, 1.5)])
        h = 1e-6
        grad = np.array(
            [(potential(q + h * e) - potential(q - h * e)) / (2 * h) for e in np.eye(lag.n)]
        )
        Q = lag.static_residual(q, np.zeros(len(lag.acts)))
        np.testing.assert_allclose(Q, -grad, atol=1e-6)
    # and it differs from the swing model (the base moves in stance)
    from equimus_sim.lagrangian import LagrangianLeg

    swing = LagrangianLeg(load_leg())
    assert not np.allclose(swing.static_residual(q, [0, 0]), Q, atol=1e-3)


def test_ground_is_off_by_default_and_built_when_enabled():
    plain = build_mjcf(load_leg())
    assert 'contact="disable"' in plain and 'plane' not in plain and 'slide_h' not in plain
    leg = stance_leg()
    m = build_model(leg)
    m0 = build_model(load_leg())
    assert m.geom('ground').type == mujoco.mjtGeom.mjGEOM_PLANE
    assert m.geom('foot').size[0] == leg.foot.radius
    for name in base_slide_names():
        assert m.joint(name).type == mujoco.mjtJoint.mjJNT_SLIDE
    assert m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_CONTACT == 0
    assert np.isclose(m.body_mass.sum(), m0.body_mass.sum())  # the foot geom carries no mass
    np.testing.assert_allclose(m.geom('ground').friction, leg.ground.friction)


def test_description_errors_name_the_key():
    raw = dict(load_leg().raw)
    raw['ground'] = dict(raw['ground'], enabled=True)
    with pytest.raises(LegDescriptionError, match='foot'):
        from_dict({k: v for k, v in raw.items() if k != 'foot'})
    with pytest.raises(LegDescriptionError, match='ground.condim'):
        from_dict(dict(raw, ground=dict(raw['ground'], condim=2)))
    with pytest.raises(LegDescriptionError, match='foot.body'):
        from_dict(dict(raw, foot=dict(raw['foot'], body='hoof')))
    bare = from_dict({k: v for k, v in raw.items() if k not in ('foot', 'ground')})
    with pytest.raises(ValueError, match='no `foot` and `ground` sections'):
        stance_leg(bare)


def test_cli_prints_the_stance_rows_and_plot(tmp_path):
    png = tmp_path / 'stance.png'
    out = subprocess.run(
        [sys.executable, '-m', 'equimus_sim.stance', '--duration', '0.3', '--plot', str(png)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    assert 'stance   paper' in out.stdout and 'stance   equimus' in out.stdout
    assert 'solref' in out.stdout and 'friction' in out.stdout
    assert png.stat().st_size > 10000


def test_cli_without_a_foot_says_so(tmp_path):
    """A description without foot/ground: `stance` exits 2 with a message (no traceback), the
    equivalence report leaves the stance row out and says why."""
    import yaml

    raw = {k: v for k, v in load_leg().raw.items() if k not in ('foot', 'ground')}
    path = tmp_path / 'legless.yaml'
    path.write_text(yaml.safe_dump(raw))
    out = subprocess.run(
        [sys.executable, '-m', 'equimus_sim.stance', '--leg', str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert 'no `foot` and `ground` sections' in out.stderr and 'Traceback' not in out.stderr
    out = subprocess.run(
        [sys.executable, '-m', 'equimus_sim.equivalence', '--leg', str(path), '--samples', '1']
        + ['--duration', '0.2'],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    assert 'stance: left out' in out.stderr and 'stance   equimus' not in out.stdout
