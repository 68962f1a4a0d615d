"""MJCF from a LegDescription: the EquiMus 3-2-1 actuator unit, or the massless baseline.

'equimus' (paper Sec. III): each actuator of mass m becomes three point-mass bodies on its line
at ξ = 0, ½, 1 (m/6, 2m/3, m/6). The first hangs on a hinge at the base anchor, the other two on
slide joints along the line (each segment: stiffness 2k, damping 2c, rest length l0/2 through
`springref`, force F from a motor with gear +1 so that ctrl = F = S·P > 0 extends, as pressure
does on the rig). A joint equality keeps the two segments equal, a connect equality closes the
loop onto the tip anchor's body.

'pure' (Table VI 'PureMuJoCo'): a massless spatial tendon between the two anchors with stiffness
k, damping c, spring length l0 and one motor (gear +1); no extra bodies or constraints.

Only the skeleton's inertial values carry mass; optional meshes are visual (no mass, no contact).
Hinges carry the description's damping, dry friction (`frictionloss`, N·m) and `armature`.
The swing plane is the world y–z plane: all hinge axes must be parallel.
"""

from __future__ import annotations

import os
import pathlib
import xml.etree.ElementTree as ET

import numpy as np

from equimus_description.leg import LegDescription, anchor_world, load_leg

VARIANTS = ('equimus', 'pure')
POINT_INERTIA = 1e-9  # kg·m², tiny rotational inertia that MuJoCo needs on a point mass


def default_mesh_dir() -> pathlib.Path:
    """$EQUIMUS_MESH_DIR, else data/equimus/models/meshes in $EQUIMUS_SHARED (the EquiMus authors'
    data; scripts/env.sh points it at the shared folder beside the checkout when there is one)."""
    env = os.environ.get('EQUIMUS_MESH_DIR')
    if env:
        return pathlib.Path(env)
    shared = os.environ.get('EQUIMUS_SHARED')
    if shared:
        return pathlib.Path(shared) / 'data' / 'equimus' / 'models' / 'meshes'
    raise FileNotFoundError(
        'no mesh folder: set EQUIMUS_MESH_DIR (the STL meshes) or '
        'EQUIMUS_SHARED (the shared data folder), pass mesh_dir, or meshes=False'
    )


def _f(x) -> str:
    return ' '.join(repr(float(v)) for v in np.atleast_1d(x))


def _sub(parent, tag, **attrs):
    return ET.SubElement(
        parent, tag, {k: (v if isinstance(v, str) else _f(v)) for k, v in attrs.items()}
    )


def seg_names(act: str) -> tuple:
    """Names of the two slide joints (and their motors) of an actuator's 3-2-1 unit."""
    return f'{act}_seg1', f'{act}_seg2'


def point_names(act: str) -> tuple:
    """Names of the three point-mass bodies of an actuator's 3-2-1 unit (ξ = 0, ½, 1)."""
    return f'{act}_p0', f'{act}_p1', f'{act}_p2'


def _plane_axis(leg: LegDescription) -> np.ndarray:
    axes = [j.axis for j in leg.joints.values()]
    axis = axes[0] if axes else np.array([-1.0, 0.0, 0.0])
    for j in leg.joints.values():
        if abs(abs(float(j.axis @ axis)) - 1.0) > 1e-9:
            raise ValueError(
                f'joint {j.name}: axis {j.axis} not parallel to {axis}; the builder '
                'supports planar skeletons (all hinge axes parallel)'
            )
    return axis


def friction_constraint(leg: LegDescription, dt: float) -> dict:
    """solreffriction / solimpfriction of a hinge with dry friction (the description's sim
    section; the time constant raised to 2·dt, MuJoCo's stability floor)."""
    return {
        'solreffriction': [max(leg.friction_solref[0], 2.0 * dt), leg.friction_solref[1]],
        'solimpfriction': list(leg.friction_solimp),
    }


def slide_gain(
    area_slope: float, build_len: float, l0: float, c_per_kpa: float, area: float
) -> tuple[float, float, float]:
    """One slide of a 3-2-1 unit's force per unit of its ctrl (S·P in N) as MuJoCo's affine
    gain (value at slide position 0, per metre of it, per m/s of it): S(l)/S, the slide carrying
    half the extension from the build length, and the pressure's damping c_per_kpa·P on the
    slide's velocity (doubled like the slide's own damping, 2c: the unit's two slides are in
    series)."""
    return (
        1.0 + area_slope * (build_len - l0),
        2.0 * area_slope,
        -2.0 * c_per_kpa / (area * 1e3),
    )


def build_mjcf(
    leg: LegDescription | None = None,
    variant: str = 'equimus',
    *,
    meshes: bool = False,
    mesh_dir=None,
    timestep: float | None = None,
    integrator: str | None = None,
    valve_tau: float | None = None,
) -> str:
    """MJCF XML text of the leg. meshes=True adds visual meshes (needs mesh_dir).

    valve_tau (s): the valves inside MuJoCo: each motor becomes a `general` actuator whose ctrl
    is the valve setpoint in kPa, with first-order dynamics `filterexact` (the exact
    zero-order-hold discretisation of τ·ṗ = u − p, as equimus_description.valve.ValveLag), gain
    S·1e3 N/kPa and `actearly` (the step's force uses the pressure at the end of the step, as
    LegSimulator's own valve loop does). None: plain motors, ctrl = F = S·P in N.

    An actuator with an area_slope gets MuJoCo's affine gain, so the force is S(l)·P at the
    actuator's current length with ctrl unchanged (S·P in N, or P in kPa with valve_tau): the
    transmission length of a slide is half the actuator's extension (the two slides are equal).
    """
    leg = leg if leg is not None else load_leg()
    if variant not in VARIANTS:
        raise ValueError(f'variant must be one of {VARIANTS}, got {variant!r}')
    axis = _plane_axis(leg)
    dt = float(timestep if timestep is not None else leg.timestep)
    root = ET.Element('mujoco', model=f'{leg.name}_{variant}')
    _sub(root, 'compiler', angle='radian', autolimits='true')
    opt = _sub(
        root,
        'option',
        timestep=dt,
        integrator=integrator or leg.integrator,
        gravity=[0.0, 0.0, -leg.gravity],
    )
    if leg.ground is None:
        _sub(opt, 'flag', contact='disable')
    if meshes:
        mesh_dir = pathlib.Path(mesh_dir) if mesh_dir is not None else default_mesh_dir()
        asset = _sub(root, 'asset')
        for b in leg.bodies.values():
            if b.mesh:
                if not (mesh_dir / b.mesh).is_file():
                    raise FileNotFoundError(
                        f'mesh {b.mesh} not in {mesh_dir}: pass mesh_dir or meshes=False'
                    )
                _sub(asset, 'mesh', name=f'{b.name}_mesh', file=str(mesh_dir / b.mesh))

    world = _sub(root, 'worldbody')
    elems: dict[str, ET.Element] = {}  # body name -> its <body> element
    for name, b in leg.bodies.items():
        j = leg.parent_joint(name)
        parent = world if j is None else elems[j.parent]
        el = _sub(parent, 'body', name=name, pos=b.pos)
        if j is not None:
            # dry friction and armature only when set: a frictionless description builds the
            # same MJCF text as before they existed
            extra = {
                k: v for k, v in (('frictionloss', j.frictionloss), ('armature', j.armature)) if v
            }
            if j.frictionloss:
                extra.update(friction_constraint(leg, dt))
            _sub(
                el,
                'joint',
                name=j.name,
                type='hinge',
                pos=[0, 0, 0],
                axis=j.axis,
                ref=j.ref,
                damping=j.damping,
                range=list(j.range),
                limited='true',
                solreflimit=[max(leg.limit_solref[0], 2.0 * dt), leg.limit_solref[1]],
                solimplimit=list(leg.limit_solimp),
                **extra,
            )
        _sub(el, 'inertial', pos=b.com, mass=b.mass, fullinertia=b.inertia)
        _sub(el, 'site', name=f'{name}_origin', pos=[0, 0, 0], size=[0.004])
        if meshes and b.mesh:
            _sub(
                el,
                'geom',
                type='mesh',
                mesh=f'{name}_mesh',
                mass=0.0,
                contype='0',
                conaffinity='0',
                group='1',
                rgba=[0.75, 0.75, 0.75, 0.9],
            )
        elems[name] = el
    if leg.ground is not None:
        _add_ground(leg, world, elems, axis, dt)

    equality = ET.Element('equality')
    actuator = ET.Element('actuator')
    tendon = ET.Element('tendon')
    solref = [max(leg.equality_solref[0], 2.0 * dt), leg.equality_solref[1]]
    if valve_tau is not None and not valve_tau > 0:
        raise ValueError(f'valve_tau must be > 0 s, got {valve_tau!r}')

    def motor(a, gain: tuple[float, float, float] = (1.0, 0.0, 0.0), **target) -> None:
        """One actuator motor (target: joint= or tendon=), see valve_tau. gain: the force per
        unit of ctrl (S·P in N) as (value at transmission length 0, per metre of it, per m/s of
        it): S(l)/S and the pressure's damping."""
        affine = a.area_slope != 0.0 or a.c_per_kpa != 0.0
        if valve_tau is None and not affine:
            fmax = a.area * a.pressure_max_kpa * 1e3
            _sub(actuator, 'motor', gear=[1.0], ctrlrange=[0.0, fmax], **target)
            return
        scale = 1.0 if valve_tau is None else a.area * 1e3
        shape = (
            {'gaintype': 'affine', 'gainprm': [scale * v for v in gain]}
            if affine
            else {'gaintype': 'fixed', 'gainprm': [scale]}
        )
        dyn = (
            {'gear': [1.0], 'ctrlrange': [0.0, a.area * a.pressure_max_kpa * 1e3]}
            if valve_tau is None
            else {
                'dyntype': 'filterexact',
                'dynprm': [valve_tau],
                'actearly': 'true',
                'ctrlrange': [0.0, a.pressure_max_kpa],
            }
        )
        _sub(actuator, 'general', **shape, biastype='none', **dyn, **target)

    for a in leg.actuators.values():
        _sub(elems[a.base.body], 'site', name=f'{a.name}_base', pos=a.base.pos, size=[0.003])
        _sub(elems[a.tip.body], 'site', name=f'{a.name}_tip', pos=a.tip.pos, size=[0.003])
        if variant == 'pure':
            t = _sub(
                tendon,
                'spatial',
                name=a.name,
                stiffness=a.k,
                damping=a.c,
                springlength=a.l0,
                width=0.003,
            )
            _sub(t, 'site', site=f'{a.name}_base')
            _sub(t, 'site', site=f'{a.name}_tip')
            s_ = a.area_slope
            damp = -a.c_per_kpa / (a.area * 1e3)  # the tendon: the whole extension's rate
            motor(a, (1.0 - s_ * a.l0, s_, damp), name=a.name, tendon=a.name)
            continue
        pa, pb = anchor_world(leg, a.base), anchor_world(leg, a.tip)
        lb = float(np.linalg.norm(pb - pa))
        if lb < 1e-6:
            raise ValueError(f'actuator {a.name}: both anchors coincide at the build pose')
        e = (pb - pa) / lb
        masses = (a.m / 6.0, 2.0 * a.m / 3.0, a.m / 6.0)
        p_names, s_names = point_names(a.name), seg_names(a.name)
        el = _sub(elems[a.base.body], 'body', name=p_names[0], pos=a.base.pos)
        _sub(el, 'joint', name=f'{a.name}_swing', type='hinge', pos=[0, 0, 0], axis=axis)
        _sub(el, 'inertial', pos=[0, 0, 0], mass=masses[0], diaginertia=[POINT_INERTIA] * 3)
        for i in (1, 2):
            el = _sub(el, 'body', name=p_names[i], pos=e * lb / 2.0)
            _sub(
                el,
                'joint',
                name=s_names[i - 1],
                type='slide',
                pos=[0, 0, 0],
                axis=e,
                stiffness=2.0 * a.k,
                damping=2.0 * a.c,
                springref=(a.l0 - lb) / 2.0,
            )
            _sub(el, 'inertial', pos=[0, 0, 0], mass=masses[i], diaginertia=[POINT_INERTIA] * 3)
        _sub(el, 'site', name=f'{a.name}_end', pos=[0, 0, 0], size=[0.003])
        _sub(
            equality,
            'connect',
            name=f'{a.name}_loop',
            body1=p_names[2],
            body2=a.tip.body,
            anchor=[0, 0, 0],
            solref=solref,
            solimp=list(leg.equality_solimp),
        )
        _sub(
            equality,
            'joint',
            name=f'{a.name}_mid',
            joint1=s_names[0],
            joint2=s_names[1],
            polycoef=[0, 1, 0, 0, 0],
            solref=solref,
            solimp=list(leg.equality_solimp),
        )
        for s in s_names:
            motor(a, slide_gain(a.area_slope, lb, a.l0, a.c_per_kpa, a.area), name=s, joint=s)
    for el in (tendon, equality, actuator):
        if len(el):
            root.append(el)
    ET.indent(root)
    return ET.tostring(root, encoding='unicode')


def base_slide_names() -> tuple:
    """Names of the root body's two slide joints when the ground is enabled (in-plane axes)."""
    return 'base_slide_h', 'base_slide_v'


def _add_ground(leg: LegDescription, world, elems: dict, axis: np.ndarray, dt: float) -> None:
    """Stance: a plane at ground.height, a foot sphere (no mass) and the root body free to
    translate in the swing plane without rotating (horizontal and vertical slides)."""
    g, foot = leg.ground, leg.foot
    assert g is not None and foot is not None  # from_dict guarantees a foot with a ground
    up = np.array([0.0, 0.0, 1.0])
    horizontal = np.cross(up, axis)
    if not np.linalg.norm(horizontal) > 0.5:
        raise ValueError('ground: the hinge axes must be horizontal for a stance on a plane')
    solref = [max(g.solref[0], 2.0 * dt), g.solref[1]]
    contact = dict(
        friction=list(g.friction), condim=str(g.condim), solref=solref, solimp=list(g.solimp)
    )
    _sub(
        world,
        'geom',
        name='ground',
        type='plane',
        pos=[0, 0, g.height],
        size=[5, 5, 0.05],
        **contact,
    )
    h_name, v_name = base_slide_names()
    for name, ax in ((h_name, horizontal / np.linalg.norm(horizontal)), (v_name, up)):
        _sub(elems[leg.root], 'joint', name=name, type='slide', pos=[0, 0, 0], axis=ax)
    _sub(
        elems[foot.body],
        'geom',
        name='foot',
        type='sphere',
        size=[foot.radius],
        pos=foot.pos,
        mass=0.0,
        **contact,
    )


def build_model(leg: LegDescription | None = None, variant: str = 'equimus', **kw):
    """Compiled mujoco.MjModel of build_mjcf(leg, variant, **kw)."""
    import mujoco

    return mujoco.MjModel.from_xml_string(build_mjcf(leg, variant, **kw))
