"""Leg description loader, MJCF builder and LegModel against the analytic kinematics."""

import mujoco
import numpy as np
import pytest
import yaml

from equimus_description import kinematics as K
from equimus_description.leg import LegDescriptionError, default_leg_path, load_leg
from equimus_description.valve import VALVE_TAU_S
from equimus_sim.leg_model import LegModel
from equimus_sim.mjcf_builder import build_mjcf, point_names

LEG = load_leg()
RNG = np.random.default_rng(7)
WORKSPACE = [
    np.array([RNG.uniform(np.pi / 6, 2 * np.pi / 3), RNG.uniform(0, np.pi / 2)]) for _ in range(25)
]


def test_default_yaml_holds_the_paper_values():
    assert default_leg_path().name == 'leg.yaml'
    assert [b.mass for b in LEG.bodies.values()] == [0.155, 0.086, 0.1033]
    assert LEG.joints['hip'].damping == 0.524 and LEG.joints['knee'].damping == 0.062
    maa, baa = LEG.actuators['maa'], LEG.actuators['baa']
    assert (maa.m, maa.k, maa.c, maa.l0, maa.area) == (0.1865, 265.82, 12.48, 0.1803, 0.000403)
    assert (baa.m, baa.k, baa.c, baa.l0, baa.area) == (0.2727, 110.36, 24.79, 0.2565, 0.000436)
    assert LEG.valve_time_constant == VALVE_TAU_S and LEG.timestep == 0.001
    assert LEG.geometry == K.PlanarGeometry()


def test_overrides_flat_nested_file_and_parameter_sets(tmp_path):
    assert load_leg(overrides={'actuators.maa.k': 270.0}).actuators['maa'].k == 270.0
    leg = load_leg(overrides={'actuators': {'baa': {'c': 3.0}}, 'sim.timestep': 0.005})
    assert leg.actuators['baa'].c == 3.0 and leg.timestep == 0.005
    f = tmp_path / 'fit.yaml'
    f.write_text(
        yaml.safe_dump({'parameters': {'actuators.maa.l0': 0.17, 'joints.hip.damping': 0.3}})
    )
    leg = load_leg(overrides=str(f))
    assert leg.actuators['maa'].l0 == 0.17 and leg.joints['hip'].damping == 0.3
    static = load_leg(parameter_set='table_v_static')
    assert static.actuators['baa'].area == 0.000324 and static.actuators['maa'].c == 12.48
    assert load_leg(parameter_set='table_ii').actuators['maa'].k == 367.8
    assert LEG.with_overrides({'actuators.maa.k': 1.0}).actuators['maa'].k == 1.0


@pytest.mark.parametrize(
    'bad, match',
    [
        ({'actuators.maa.kk': 1.0}, 'unknown parameter'),
        ({'actuators.xyz.k': 1.0}, "no 'actuators.xyz'"),
        ({'actuators.maa.k': 'stiff'}, 'expected a number'),
        ({'actuators.maa.k': float('nan')}, 'finite'),
        ({'actuators.maa.m': -1.0}, 'must be > 0'),
        ({'geometry.b1': 0.3}, 'geometry puts it'),
    ],
)
def test_bad_overrides_say_what_is_wrong(bad, match):
    with pytest.raises(LegDescriptionError, match=match):
        load_leg(overrides=bad)


def test_unknown_parameter_set_is_an_error():
    with pytest.raises(LegDescriptionError, match='no parameter set'):
        load_leg(parameter_set='nope')


def test_hinge_axes_and_build_pose_match_the_authors_frame():
    m = LegModel(LEG).model
    for j in ('hip', 'knee'):
        np.testing.assert_allclose(m.joint(j).axis, [-1, 0, 0])
        assert m.qpos0[m.joint(j).qposadr[0]] == pytest.approx(np.pi / 2)


@pytest.mark.parametrize('variant', ['equimus', 'pure'])
def test_model_lengths_match_kinematics_over_workspace(variant):
    lm = LegModel(LEG, variant)
    d = mujoco.MjData(lm.model)
    for q in WORKSPACE:
        lm.reset(d, q)
        np.testing.assert_array_equal(lm.joint_angles(d), q)
        want = K.actuator_lengths(q, LEG.geometry)
        np.testing.assert_allclose(lm.actuator_lengths(d), want, atol=1e-9)
        np.testing.assert_allclose(lm.anchor_distances(d), want, atol=1e-9)
        assert np.max(lm.loop_residuals(d)) < 1e-12


def test_body_poses_follow_the_planar_convention():
    lm = LegModel(LEG)
    d = mujoco.MjData(lm.model)
    for q in WORKSPACE[:5]:
        lm.reset(d, q)
        hip_w, _ = lm.body_pose(d, 'thigh')
        pts = K.link_points(q, LEG.geometry)
        knee_w, quat = lm.body_pose(d, 'calf')
        # planar x = world +y, planar y = world −z
        np.testing.assert_allclose(
            [knee_w[1] - hip_w[1], hip_w[2] - knee_w[2]], pts['knee'], atol=1e-12
        )
        assert knee_w[0] == pytest.approx(hip_w[0])
        # calf rotates about world −x by θ1 + θ2 − π (relative to the build pose)
        ang = q[0] + q[1] - np.pi
        np.testing.assert_allclose(quat, [np.cos(ang / 2), -np.sin(ang / 2), 0, 0], atol=1e-12)
        base_w, base_q = lm.body_pose(d, 'base')
        np.testing.assert_allclose(base_w, [0, 0, 0.7])
        np.testing.assert_allclose(base_q, [1, 0, 0, 0])


def test_point_masses_sum_to_actuator_mass_in_321_ratio():
    m = LegModel(LEG).model
    for name, a in LEG.actuators.items():
        ms = [m.body_mass[m.body(p).id] for p in point_names(name)]
        np.testing.assert_allclose(ms, [a.m / 6, 2 * a.m / 3, a.m / 6], rtol=1e-12)
        assert sum(ms) == pytest.approx(a.m, rel=1e-12)
        s1, s2 = m.joint(f'{name}_seg1'), m.joint(f'{name}_seg2')
        assert s1.stiffness[0] == pytest.approx(2 * a.k) and s2.damping[0] == pytest.approx(2 * a.c)
    total = sum(b.mass for b in LEG.bodies.values()) + sum(a.m for a in LEG.actuators.values())
    assert m.body_subtreemass[1] == pytest.approx(total)
    assert LegModel(LEG, 'pure').model.body_subtreemass[1] == pytest.approx(
        sum(b.mass for b in LEG.bodies.values())
    )


def test_pressure_extends_and_loops_stay_closed_while_swinging():
    lm = LegModel(LEG)
    d = mujoco.MjData(lm.model)
    lm.reset(d, [1.2, 0.8])
    F = lm.set_pressures(d, [40.0, 20.0])
    np.testing.assert_allclose(F, [0.000403 * 40e3, 0.000436 * 20e3])
    np.testing.assert_allclose(d.ctrl, [F[0], F[0], F[1], F[1]])
    worst = 0.0
    for _ in range(1500):
        mujoco.mj_step(lm.model, d)
        worst = max(worst, np.max(lm.loop_residuals(d)))
    assert worst < 1e-4, worst
    # Pressure lengthens each actuator, as on the rig (StaticPoint_all_36.csv: l1 grows with P1,
    # l2 with P2) and the hip opens with P_MAA.
    q0 = lm.static_equilibrium([0, 0])
    q1 = lm.static_equilibrium([40, 0])
    q2 = lm.static_equilibrium([0, 40])
    l0, l1, l2 = (K.actuator_lengths(q, LEG.geometry) for q in (q0, q1, q2))
    assert l1[0] > l0[0] + 0.01 and q1[0] > q0[0] + 0.1
    assert l2[1] > l0[1] + 0.01


def test_bad_inputs_are_rejected():
    lm = LegModel(LEG)
    d = mujoco.MjData(lm.model)
    with pytest.raises(ValueError, match='finite'):
        lm.set_forces(d, [np.nan, 0.0])
    with pytest.raises(ValueError, match='expected 2'):
        lm.set_pressures(d, [1.0])
    with pytest.raises(KeyError):
        lm.set_pressures(d, {'xyz': 1.0})


def test_meshes_are_visual_only(shared_dir):
    mesh_dir = shared_dir / 'data/equimus/models/meshes'
    a = mujoco.MjModel.from_xml_string(build_mjcf(LEG, meshes=True, mesh_dir=mesh_dir))
    b = LegModel(LEG).model
    assert a.ngeom >= 3
    np.testing.assert_allclose(a.body_mass, b.body_mass)
    np.testing.assert_allclose(a.body_inertia, b.body_inertia)


def test_the_model_builds_without_the_shared_data(monkeypatch):
    """The meshes are visual only: a clone without the authors' data (no EQUIMUS_SHARED, no
    EQUIMUS_MESH_DIR) still builds and simulates the leg, and asking for meshes says what to set."""
    monkeypatch.delenv('EQUIMUS_SHARED', raising=False)
    monkeypatch.delenv('EQUIMUS_MESH_DIR', raising=False)
    m = mujoco.MjModel.from_xml_string(build_mjcf(LEG))
    assert m.nmesh == 0 and m.njnt > 2
    with pytest.raises(FileNotFoundError, match='EQUIMUS_SHARED'):
        build_mjcf(LEG, meshes=True)


def test_default_mesh_dir_and_missing_meshes_error(tmp_path):
    m = mujoco.MjModel.from_xml_string(build_mjcf(LEG, meshes=True))
    assert m.nmesh == 3
    with pytest.raises(FileNotFoundError, match='meshes=False'):
        build_mjcf(LEG, meshes=True, mesh_dir=tmp_path)


@pytest.mark.parametrize('variant', ['equimus', 'pure'])
def test_reset_with_velocity_keeps_constraints_at_rest(variant):
    lm = LegModel(LEG, variant)
    d = mujoco.MjData(lm.model)
    lm.reset(d, [1.3, 0.7], qd=[0.8, -1.5])
    np.testing.assert_allclose(lm.joint_velocities(d), [0.8, -1.5])
    eq_rows = d.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY
    assert eq_rows.sum() == (8 if variant == 'equimus' else 0)
    if eq_rows.any():
        assert np.max(np.abs(d.efc_vel[eq_rows])) < 1e-8
    # the slide-length rate equals J_A θ̇ from the analytic kinematics
    h = 1e-3
    l0 = lm.actuator_lengths(d)
    mujoco.mj_integratePos(lm.model, d.qpos, d.qvel, h)
    mujoco.mj_forward(lm.model, d)
    rate = (lm.actuator_lengths(d) - l0) / h
    np.testing.assert_allclose(
        rate, K.actuation_jacobian([1.3, 0.7], LEG.geometry) @ [0.8, -1.5], atol=5e-3
    )
