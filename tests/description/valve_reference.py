"""Rollouts of every consumer of the valve model, for the neutral-parameter bit-identity test.

`compute()` drives the simulator (both valve paths), the tracking environment, the vector
environment, the identification evaluator, the DAC-board emulator's valve, the synthetic-bag
valve and the two model-based controllers through their public APIs with the default leg (a
first-order lag: no dead time, one time constant for filling and venting). The file
data/valve_neutral_reference.npz holds what `compute()` returned on the code before the valve
model had a dead time and separate fill and vent constants (commit 0a86558), written by

    python tests/description/valve_reference.py --write

test_valve_model.py checks that today's code returns the same arrays bit for bit.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

REFERENCE = pathlib.Path(__file__).with_name('data') / 'valve_neutral_reference.npz'
FRAME = 1.0 / 120.0


def _commands(n: int, every: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    levels = rng.uniform(0.0, 50.0, (n // every + 1, 2))
    return np.repeat(levels, every, axis=0)[:n]


def simulator(valve: str, frames: int = 180, overrides=None) -> np.ndarray:
    from equimus_sim.simulator import make_simulator

    sim = make_simulator(overrides=overrides, valve=valve, timestep=1.0 / 600.0)
    rows = []
    for u in _commands(frames, 30, 1):
        sim.set_command(u)
        sim.advance(FRAME)
        q, qd = sim.joint_state()
        rows.append(np.concatenate([q, qd, sim.pressures]))
    return np.array(rows)


def track_env(steps: int = 60) -> np.ndarray:
    from equimus_learning.env import TrackEnv

    env = TrackEnv(reference='steps')
    obs, _ = env.reset(seed=3)
    rng = np.random.default_rng(4)
    rows = [obs]
    for _ in range(steps):
        obs, reward, *_ = env.step(rng.uniform(-1.0, 1.0, 2))
        rows.append(np.append(obs[: len(rows[0])], reward)[: len(rows[0])])
    return np.array(rows)


def vector_env(steps: int = 60) -> np.ndarray:
    from equimus_learning.vector import VectorTrackEnv

    env = VectorTrackEnv(num_envs=3, nthread=1, reference='steps')
    obs, _ = env.reset(seed=5)
    rng = np.random.default_rng(6)
    rows = [np.concatenate([obs.ravel(), np.zeros(3), env.p_valve.ravel()])]
    for _ in range(steps):
        obs, reward, *_ = env.step(rng.uniform(-1.0, 1.0, (3, 2)))
        rows.append(np.concatenate([obs.ravel(), reward, env.p_valve.ravel()]))
    env.close()
    return np.array(rows)


def evaluator() -> np.ndarray:
    from equimus_identification import dynamic as D
    from equimus_identification.data import Experiment

    n = 201
    t = np.arange(n) * 0.01
    cmd = np.zeros((n, 2))
    cmd[20:120] = (30.0, 10.0)
    cmd[120:] = (5.0, 40.0)
    q = np.tile([1.3, 1.0], (n, 1))
    e = Experiment('ref', t, q, np.zeros((n, 2)), cmd, np.array([0.0, 0.0]))
    names = list(D.BOUNDS)
    from equimus_description.leg import load_leg

    leg = load_leg()
    x = [D.leg_value(leg, k) for k in names]
    out = []
    for loss in ('whole', 'shooting'):
        ev = D.Evaluator([e], names, leg=leg, loss=loss, horizon=0.3)
        out.append(np.concatenate(ev.simulate(x)))
    return np.concatenate(out)


def board_valve() -> np.ndarray:
    from equimus_hw.valve.board_model import ValveModel
    from equimus_hw.valve.calibration import ValveCalibration

    cal = ValveCalibration()
    rows = []
    for dead in (0.0, 0.03):
        v = ValveModel(cal, 0.2171, dead)
        now = 0.0
        rng = np.random.default_rng(8)
        for k in range(300):
            if k % 40 == 0:
                v.set_code(int(rng.integers(0, cal.max_code + 1)), now)
            dt = float(rng.uniform(0.0005, 0.004))
            now += dt
            rows.append(v.advance(now, dt))
    return np.array(rows)


def lag_steps() -> np.ndarray:
    from equimus_description.valve import ValveLag

    v = ValveLag(0.15, 2, p0=[3.0, 40.0])
    rows = []
    for u in _commands(200, 25, 9):
        rows.append(v.step(u, 1.0 / 600.0).copy())
    return np.array(rows)


def controllers() -> np.ndarray:
    from equimus_control.controller import Estimate, Reference
    from equimus_control.mpc import LinearMPC, MPCConfig
    from equimus_control.sampling import PredictiveSampling, SamplingConfig
    from equimus_description.leg import load_leg
    from equimus_description.statics import StaticParams
    from equimus_sim.leg_model import LegModel

    leg = load_leg()
    params = StaticParams.from_leg(leg)
    rows = []
    mpc = LinearMPC(
        LegModel(leg.with_timestep(FRAME / 10)),
        params,
        MPCConfig(
            valve_tau=leg.valve_time_constant, grid_lo=(1.3, 0.5), grid_hi=(1.5, 0.7), du_max=4.0
        ),
    )
    ps = PredictiveSampling(
        LegModel(leg.with_timestep(FRAME)),
        params,
        SamplingConfig(valve_tau=leg.valve_time_constant, samples=8, horizon=0.1, seed=0),
    )
    for ctrl in (mpc, ps):
        ctrl.reset(p_valve=np.array([10.0, 20.0]))
        q, qd = np.array([1.4, 0.6]), np.array([0.1, -0.2])
        for k in range(8):
            out = ctrl.step(
                Estimate(q + 0.01 * k, qd, k * FRAME),
                Reference(np.array([1.45, 0.55]), np.zeros(2)),
                FRAME,
                50.0,
            )
            rows.append(np.concatenate([out.pressures, ctrl.p_valve]))
    ps.close()
    return np.array(rows)


def versions() -> dict[str, np.ndarray]:
    """The libraries whose arithmetic the arrays depend on (another MuJoCo may differ in the
    last bits; the test then says to regenerate the file at commit 0a86558)."""
    import mujoco

    return {
        'version_mujoco': np.array(mujoco.__version__),
        'version_numpy': np.array(np.__version__),
    }


def compute() -> dict[str, np.ndarray]:
    return {
        'sim_mujoco': simulator('mujoco'),
        'sim_python': simulator('python'),
        'track_env': track_env(),
        'vector_env': vector_env(),
        'evaluator': evaluator(),
        'board_valve': board_valve(),
        'lag_steps': lag_steps(),
        'controllers': controllers(),
    }


if __name__ == '__main__':
    if '--write' not in sys.argv[1:]:
        print(__doc__)
        sys.exit(2)
    REFERENCE.parent.mkdir(exist_ok=True)
    np.savez_compressed(REFERENCE, **compute(), **versions())
    print(f'wrote {REFERENCE}')
