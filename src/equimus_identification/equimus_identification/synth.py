"""Synthetic recordings with known parameters, for checking that identification recovers them.

The leg is simulated in MuJoCo (equimus_sim's model at the simulation node's 1/600 s step) with
the description's valve model (equimus_description.valve.Valve: dead time, fill and vent
constants), driven by a sequence of pressure steps, and
written through equimus_record.bag.BagWriter on the topics and types the recorder writes
(docs/interfaces.md): /valve/command (Float64MultiArray kPa), /valve/applied and /valve/pressure
(stamped JointState, effort kPa), /sim/joint_states (truth) and /joint_states (truth +
mocap-like noise), all at 120 Hz.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence

import mujoco
import numpy as np

from equimus_description.interface import (
    ACTUATORS,
    JOINT_STATES,
    JOINTS,
    SIM_JOINT_STATES,
    VALVE_APPLIED,
    VALVE_COMMAND,
    VALVE_PRESSURE,
)
from equimus_description.leg import load_leg
from equimus_description.valve import Valve
from equimus_sim.leg_model import LegModel

from .dynamic import PRESSURE_LENGTHENS

DEFAULT_STEPS = ((0, 0), (20, 0), (20, 15), (0, 15), (35, 5), (5, 25), (0, 0))
SIM_DT = 1.0 / 600.0  # the simulation node's default step (config/sim.yaml)

# Known parameters for ground-truth checks: every identifiable one, each clearly off the
# table_v_dynamic start set.
GROUND_TRUTH = {
    'actuators.maa.k': 300.0,
    'actuators.baa.k': 95.0,
    'actuators.maa.area': 3.6e-4,
    'actuators.baa.area': 4.8e-4,
    'actuators.maa.l0': 0.176,
    'actuators.baa.l0': 0.262,
    'actuators.maa.c': 15.0,
    'actuators.baa.c': 20.0,
    'joints.hip.damping': 0.4,
    'joints.knee.damping': 0.08,
    'valve.time_constant': 0.15,
}


def random_steps(n: int, seed: int = 0, max_kpa: float = 45.0) -> tuple:
    """n pressure steps drawn uniformly over [0, max_kpa]², starting and ending vented.

    Steps of both channels at once, to every level, excite both actuators over the workspace;
    a handful of hand-picked steps leaves some parameters undetermined (see
    dynamic.identifiability).
    """
    rng = np.random.default_rng(seed)
    levels = rng.uniform(0.0, max_kpa, (n, 2)).round(1)
    return ((0.0, 0.0),) + tuple(map(tuple, levels)) + ((0.0, 0.0),)


def simulate_steps(
    truth: Mapping[str, float],
    steps_kpa: Sequence = DEFAULT_STEPS,
    hold_s: float = 1.5,
    dt: float = SIM_DT,
    rate_hz: float = 120.0,
    settle_s: float = 3.0,
    parameter_set: str | None = 'table_v_dynamic',
) -> dict:
    """Simulate pressure steps, each held hold_s; returns t, command, valve pressure, q, qd sampled
    at rate_hz (simulate_command's outputs).

    The leg first settles at the first step's pressures (not recorded), so the record starts at
    rest.
    """
    per_step = max(1, int(round(hold_s * rate_hz)))
    command = np.repeat(np.asarray(steps_kpa, float), per_step, axis=0)
    return simulate_command(truth, command, rate_hz, dt, settle_s, parameter_set)


def write_bag(
    path, sim: dict, noise_rad: float = 0.002, seed: int = 0, t0_ns: int = 1_700_000_000_000_000_000
):
    """Write a simulated run as a rosbag2 (MCAP) recording with the recorder's topics and types."""
    from rosbags.typesys import Stores, get_typestore

    from equimus_record.bag import BagWriter

    ts = get_typestore(Stores.ROS2_KILTED)
    T = ts.types
    rng = np.random.default_rng(seed)
    w = BagWriter(pathlib.Path(path))
    F64, JS = VALVE_COMMAND.type, JOINT_STATES.type
    for topic in (VALVE_COMMAND, VALVE_APPLIED, VALVE_PRESSURE, SIM_JOINT_STATES, JOINT_STATES):
        w.add_topic(topic.name, topic.type)

    def f64(x):
        msg = T[F64](
            layout=T['std_msgs/msg/MultiArrayLayout'](dim=[], data_offset=0),
            data=np.asarray(x, dtype=np.float64),
        )
        return ts.serialize_cdr(msg, F64)

    def js(stamp_ns, q, qd, names=JOINTS, effort=()):
        hdr = T['std_msgs/msg/Header'](
            stamp=T['builtin_interfaces/msg/Time'](
                sec=int(stamp_ns // 10**9), nanosec=int(stamp_ns % 10**9)
            ),
            frame_id='',
        )
        msg = T[JS](
            header=hdr,
            name=list(names),
            position=np.asarray(q, np.float64),
            velocity=np.asarray(qd, np.float64),
            effort=np.asarray(effort, np.float64),
        )
        return ts.serialize_cdr(msg, JS)

    def kpa(stamp_ns, values):
        return js(stamp_ns, (), (), ACTUATORS, values)

    try:
        for i, t in enumerate(sim['t']):
            ns = t0_ns + int(round(t * 1e9))
            w.write(VALVE_COMMAND.name, ns, f64(sim['command'][i]))
            w.write(VALVE_APPLIED.name, ns, kpa(ns, sim['command'][i]))
            w.write(VALVE_PRESSURE.name, ns, kpa(ns, sim['pressure'][i]))
            w.write(SIM_JOINT_STATES.name, ns, js(ns, sim['q'][i], sim['qd'][i]))
            w.write(
                JOINT_STATES.name,
                ns,
                js(ns, sim['q'][i] + rng.normal(0, noise_rad, 2), sim['qd'][i]),
            )
    finally:
        w.close()
    return pathlib.Path(path)


def simulate_command(
    truth: Mapping[str, float],
    command_kpa: np.ndarray,
    rate_hz: float = 120.0,
    dt: float = SIM_DT,
    settle_s: float = 3.0,
    parameter_set: str | None = 'table_v_dynamic',
) -> dict:
    """Simulate any command sequence (one row per 1/rate_hz sample, held over the sample);
    the same outputs as simulate_steps. The leg first settles at the first command."""
    command_kpa = np.asarray(command_kpa, float)
    leg = load_leg(parameter_set=parameter_set, overrides=dict(truth)).with_timestep(dt)
    lm = LegModel(leg)
    m = lm.model
    if PRESSURE_LENGTHENS:
        m.actuator_gear[:, 0] = np.abs(m.actuator_gear[:, 0])
    m.actuator_ctrllimited[:] = 0
    d = mujoco.MjData(m)
    lm.reset(d, (1.3, 1.0))
    valve = Valve(leg.valve, 2, p0=command_kpa[0])
    lm.set_pressures(d, valve.p)
    for _ in range(int(settle_s / dt)):
        mujoco.mj_step(m, d)
    d.time = 0.0
    every = int(round(1.0 / (rate_hz * dt)))
    rows: dict[str, list] = {'t': [], 'command': [], 'pressure': [], 'q': [], 'qd': []}
    for i, cmd in enumerate(command_kpa):
        rows['t'].append(i / rate_hz)
        rows['command'].append(cmd.copy())
        rows['pressure'].append(valve.p.copy())
        rows['q'].append(lm.joint_angles(d))
        rows['qd'].append(lm.joint_velocities(d))
        for _ in range(every):
            lm.set_pressures(d, valve.step(cmd, dt))
            mujoco.mj_step(m, d)
    return {k: np.asarray(v) for k, v in rows.items()} | {'leg': leg}
