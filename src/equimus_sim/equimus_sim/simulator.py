"""The simulated leg as the controller sees it: valves, muscles and MuJoCo physics (no ROS).

`LegSimulator` owns the MjModel/MjData (through `LegModel`) and adds what the model alone does
not have: the valves (dead time, fill and vent dynamics), stepping to a target time, and recovery
from a numerically unstable state.

Pressures in: the pressures the valves are set to (kPa), i.e. what the valve driver applies after
its safety layer (clamp, NaN vent, slew, watchdog, arming: equimus_hw.valve, the same on the real
rig). The simulator repeats none of those rules; it only refuses what no valve could produce (a
wrong number of values, a non-finite value, outside 0..p_max): the valves then keep their last
setpoint and the refusal is counted with its reason.

Valve: each channel follows the description's one valve model (equimus_description.valve:
`ValveParams` from the leg description, solved by `valve.hold` for the command held over each
frame's physics steps of Δt). For the authors' first-order lag (no dead time, one τ) and by
default (`make_simulator(valve='mujoco')`) that lag runs inside MuJoCo as actuator dynamics
(mjcf_builder's valve_tau: `filterexact`, the same exact zero-order-hold discretisation, with
`actearly`), so a frame is one `mj_step(m, d, nstep)` call: the Python cost is paid once per frame,
not per physics step. tests/sim/test_valve_dynamics.py checks both against each other. A valve
with a dead time, different fill and vent constants or a regulator is solved by `valve.hold` in
both paths and its per-step pressures are written into the model step by step (in the MuJoCo
path as the actuators' setpoint and state, which filterexact then leaves unchanged).
`valve='python'` keeps the loop in Python. With `valve=None` the simulator has no valve of its own
and the pressures act at once (the rig emulator: the DAC board emulator's valve model is the valve
there).

Instability: after each `advance`, non-finite or runaway qpos/qvel, or a MuJoCo bad-state warning
(MuJoCo would silently auto-reset to its loading pose), resets the leg to the initial pose and
pressures, counts the event and keeps its reason; nothing is raised.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import mujoco
import numpy as np

from equimus_description.interface import BODIES
from equimus_description.valve import ACTUATORS, Valve, ValveMemory, ValveParams, hold_steps
from equimus_description.valve import HARD_MAX_KPA as P_MAX_KPA

MAX_JOINT_SPEED = 1.0e3  # rad/s or m/s in any dof: beyond this the integration has diverged

_BAD_WARNINGS = (
    mujoco.mjtWarning.mjWARN_BADQACC,
    mujoco.mjtWarning.mjWARN_BADQPOS,
    mujoco.mjtWarning.mjWARN_BADQVEL,
)
_BAD_WARNING_IDX = np.array([int(w) for w in _BAD_WARNINGS])


def _lister(array: np.ndarray, idx) -> Callable[[], list]:
    """array[idx] (its rows, for a 2-D array) as a new list, for every frame: a contiguous
    range is read through a view (its tolist costs a third of take().tolist()), other indices
    by take."""
    idx = np.asarray(idx, dtype=np.intp).reshape(-1)
    if idx.size and np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size)):
        return array[idx[0] : idx[0] + idx.size].tolist
    return lambda: array.take(idx, 0).tolist()


def physical_problem(p_kpa, n: int = len(ACTUATORS), p_max=P_MAX_KPA) -> str | None:
    """Why valves cannot be set to `p_kpa` (kPa), or None when they can (a sanity check only).

    p_max: upper limit (kPa), one number or one per channel."""
    try:
        p = np.asarray(p_kpa, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        return f'pressures {p_kpa!r} are not numbers'
    if p.size != n:
        names = ACTUATORS if n == len(ACTUATORS) else [f'valve {i}' for i in range(n)]
        return f'{p.size} pressures, expected {n} ({", ".join(names)})'
    pmax = np.broadcast_to(np.asarray(p_max, dtype=float), (n,))
    if not np.all(np.isfinite(p)):
        return f'pressures {p.tolist()} kPa are not finite'
    if np.any(p < 0.0) or np.any(p > pmax):
        return f"pressures {p.tolist()} kPa outside the valves' range [0, {pmax.tolist()}] kPa"
    return None


class MujocoValves:
    """The valves while MuJoCo integrates them (actuator dynamics): the parameters, and the
    pressures, which are the actuators' activations (one per motor; an actuator's motors share
    its valve)."""

    def __init__(self, params: ValveParams, data: mujoco.MjData, act_adr: np.ndarray) -> None:
        self.params = params
        self._data = data
        self._adr = act_adr  # (valves, motors per valve)
        self._act = data.act  # a view: MjData's arrays stay where they are
        self._first = np.ascontiguousarray(act_adr[:, 0])  # each valve's first motor

    @property
    def p(self) -> np.ndarray:
        # take: a copy, at a third of a fancy index's cost (it runs every frame)
        return self._act.take(self._first)

    @p.setter
    def p(self, value) -> None:
        self._data.act[self._adr] = np.asarray(value, float).reshape(-1, 1)

    @property
    def tau(self) -> float:
        return self.params.tau

    def reset(self, p) -> None:
        self.p = p


class LegSimulator:
    """MuJoCo leg + valves + instability recovery.

    leg_model: an `equimus_sim.leg_model.LegModel` (owns MjModel, knows joints/actuators).
    valve: the valve model (`ValveParams`, or a time constant in s for the first-order lag),
    None = no valve here; initial_pressures (kPa) and initial_q (θ1, θ2 rad; None = static
    equilibrium at the initial pressures) define the pose `reset()` returns to.
    """

    def __init__(
        self,
        leg_model,
        valve: ValveParams | float | None,
        p_max=P_MAX_KPA,
        initial_pressures: Sequence[float] = (0.0, 0.0),
        initial_q: Sequence[float] | None = None,
    ):
        self.leg = leg_model
        self.model = leg_model.model
        self.data = mujoco.MjData(self.model)
        self.n = len(leg_model.actuator_names)
        self.names = tuple(leg_model.actuator_names)
        self.p_max = np.broadcast_to(np.asarray(p_max, float), (self.n,)).copy()
        self._p_max_t = tuple(self.p_max.tolist())
        self.dt = float(self.model.opt.timestep)
        problem = physical_problem(initial_pressures, self.n, self.p_max)
        if problem:
            raise ValueError(f'invalid initial pressures: {problem}')
        self.initial_pressures = np.asarray(initial_pressures, float).reshape(self.n)
        if initial_q is None:
            initial_q = self.leg.static_equilibrium(self.initial_pressures)
        self.n_joints = len(leg_model.joint_names)
        q0 = np.array(initial_q, float).reshape(-1)
        if q0.size != self.n_joints:
            raise ValueError(
                f'initial joint angles {q0.tolist()}: expected {self.n_joints} '
                f'({", ".join(leg_model.joint_names)})'
            )
        self.initial_q = q0
        if valve is not None and not isinstance(valve, ValveParams):
            if not (valve > 0 and math.isfinite(valve)):
                raise ValueError(f'valve time constant must be > 0 s, got {valve!r}')
            valve = ValveParams.lag(float(valve))
        self.valve_params: ValveParams | None = valve
        # Valves inside MuJoCo (ctrl and act in kPa), else the Python loop in `advance`.
        self.valve_in_model = getattr(leg_model, 'valve_tau', None) is not None
        if (
            self.valve_in_model
            and valve is not None
            and valve.is_lag
            and not math.isclose(valve.tau, leg_model.valve_tau)
        ):
            raise ValueError(
                f"valve time constant {valve.tau} s differs from the MuJoCo model's "
                f'{leg_model.valve_tau} s: build the LegModel with valve_tau={valve.tau}'
            )
        # A dead time, separate fill and vent constants or a regulator: valve.hold_steps gives
        # the pressure of every physics step (self._history: the per-step commands the dead
        # time still holds, with the regulator's state as a ValveMemory; None = settled).
        self._general = valve is not None and not valve.is_lag
        self._history: tuple[tuple[float, ...], ...] | ValveMemory | None = None
        ctrl_idx = np.asarray(leg_model.ctrl_idx).reshape(self.n, -1)
        self.valve: Valve | MujocoValves | None = None
        self._act_adr = np.asarray(self.model.actuator_actadr)[ctrl_idx]
        # (act address, channel) of every motor: a step's pressures written element by element
        # (a fancy-indexed write costs more than the few scalars it sets)
        self._act_channel = tuple(
            (int(a), i) for i, row in enumerate(self._act_adr.tolist()) for a in row
        )
        if self.valve_in_model and valve is not None:
            self.valve = MujocoValves(valve, self.data, self._act_adr)
        elif valve is not None:
            self.valve = Valve(valve, self.n, self.initial_pressures)
        # Hot path: F = S·P written straight to the actuator motors (LegModel.set_pressures does
        # the same with per-call argument checks that cost more than an mj_step).
        self._gain = np.asarray(leg_model.areas, float) * 1e3  # N per kPa
        self._ctrl_act = np.full(self.model.nu, -1, dtype=int)
        for i, row in enumerate(ctrl_idx):
            self._ctrl_act[row] = i
        if np.any(self._ctrl_act < 0):
            raise ValueError(
                'the model has motors that belong to no actuator of the leg description'
            )
        self._gain_t = tuple(self._gain.tolist())
        self._ctrl_act_t = tuple(self._ctrl_act.tolist())
        self._body_ids: dict[tuple[str, ...], np.ndarray] = {}
        self._body_lists: dict[tuple[str, ...], tuple[Callable[[], list], ...]] = {}
        # Views of MjData's arrays, taken once (each attribute access builds a new view); the
        # per-frame state and checks copy through views of them (_lister) or with `take`
        # instead of fancy indexing (the same copy at a third of the cost).
        d = self.data
        self._qpos, self._qvel, self._xpos, self._xquat = d.qpos, d.qvel, d.xpos, d.xquat
        self._ctrl = d.ctrl
        self._joint_q = _lister(d.qpos, leg_model.qpos_idx)
        self._joint_qd = _lister(d.qvel, leg_model.qvel_idx)
        self.command = self.initial_pressures.copy()  # the valves' setpoint, kPa
        self.time = 0.0  # nominal sim time, s (monotonic across resets)
        self.steps = 0
        self.resets = 0
        self.last_reset_reason = ''
        self.rejected = 0
        self.last_reject_reason = ''
        self._warn_number = self.data.warning.number  # live view of MuJoCo's warning counters
        self._warn_counts = self._bad_warning_count()
        self._warn_bytes = self._warn_number.tobytes()
        self._place(self.initial_q, self.initial_pressures)

    # ----- commands -------------------------------------------------------------------------
    def set_command(self, p_kpa) -> str | None:
        """Set the valves to p_kpa (kPa) from now on; the reason when that is impossible (the
        valves then keep their setpoint; see the module docstring)."""
        # Fast path (every lockstep frame): n plain numbers inside [0, p_max]; NaN fails the
        # comparison and takes the full check below, which says why.
        try:
            values = [float(v) for v in p_kpa]
        except (TypeError, ValueError):
            values = []
        if len(values) == self.n and all(
            0.0 <= v <= m for v, m in zip(values, self._p_max_t, strict=True)
        ):
            self.command = np.array(values)
            return None
        problem = physical_problem(p_kpa, self.n, self.p_max)
        if problem:
            self.rejected += 1
            self.last_reject_reason = problem
            return problem
        self.command = np.asarray(p_kpa, float).reshape(self.n)
        return None

    # ----- stepping -------------------------------------------------------------------------
    def advance(self, duration: float) -> int:
        """Advance the nominal time by `duration` s with the held command; return physics steps.

        The number of physics steps is chosen so that physics time stays within Δt/2 of the
        nominal time (exact when Δt divides the period, e.g. Δt = 1/1200 s at 120 Hz).
        """
        if not (duration >= 0 and math.isfinite(duration)):
            raise ValueError(f'advance duration must be a finite number >= 0 s, got {duration!r}')
        target = self.time + duration
        n = int(round((target - self.steps * self.dt) / self.dt))
        n = max(n, 0)
        if n and self._general:
            self._advance_general(n)
        elif n and self.valve_in_model:
            self._ctrl[:] = self.command[self._ctrl_act]
            if self.valve is None:  # no valve here (valve=None): the setpoint acts at once
                self.data.act[self._act_adr] = self.command.reshape(-1, 1)
            mujoco.mj_step(self.model, self.data, n)
            mujoco.mj_kinematics(self.model, self.data)  # as below
        elif n:
            # The command is held over the interval: valve.hold's closed form per physics step.
            # Plain floats: for two channels numpy's per-call cost exceeds the arithmetic.
            model, data, step, ctrl = self.model, self.data, mujoco.mj_step, self.data.ctrl
            gain, act = self._gain_t, self._ctrl_act_t
            p = self.command.tolist()
            for p in self._frame_pressures(n):
                force = [g * pi for g, pi in zip(gain, p, strict=True)]  # F = S·P, N
                ctrl[:] = [force[i] for i in act]
                step(model, data)
            if isinstance(self.valve, Valve):
                self.valve.p = np.array(p)
            # mj_step leaves body poses at the pre-integration qpos; the mocap must see the
            # same instant as the joint state, so refresh the kinematics (≈1 µs).
            mujoco.mj_kinematics(model, data)
        self.steps += n
        self.time = target
        self._check_stability()
        return n

    def _frame_pressures(self, n: int) -> list[list[float]]:
        """Valve pressure at the end of each of n physics steps with the command held."""
        if self.valve_params is None:
            return [self.command.tolist()] * n
        p, self._history = hold_steps(
            self.valve_params,
            self.pressures.tolist(),
            self.command.tolist(),
            n,
            self.dt,
            self._history,
        )
        return p

    def _advance_general(self, n: int) -> None:
        """A valve with a dead time or fill ≠ vent: its per-step pressures written into the
        model step by step (the MuJoCo path: as setpoint and state, which its filter keeps)."""
        model, data, step = self.model, self.data, mujoco.mj_step
        p_steps = self._frame_pressures(n)
        if self.valve_in_model:
            ctrl, act, idx, act_channel = data.ctrl, data.act, self._ctrl_act_t, self._act_channel
            for p in p_steps:
                ctrl[:] = [p[i] for i in idx]
                for a, i in act_channel:
                    act[a] = p[i]
                step(model, data)
        else:
            gain, idx = self._gain_t, self._ctrl_act_t
            for p in p_steps:
                force = [g * pi for g, pi in zip(gain, p, strict=True)]
                data.ctrl[:] = [force[i] for i in idx]
                step(model, data)
            assert isinstance(self.valve, Valve)
            self.valve.p = np.array(p_steps[-1])
        mujoco.mj_kinematics(model, data)

    def advance_to(self, t: float) -> int:
        """Advance to nominal time t (s); see `advance`."""
        return self.advance(max(0.0, t - self.time))

    # ----- state ----------------------------------------------------------------------------
    @property
    def pressures(self) -> np.ndarray:
        """Current valve (muscle) pressures, kPa."""
        return (self.command if self.valve is None else self.valve.p).copy()

    def joint_state(self):
        """(θ, θ̇) of [hip, knee] in the paper's convention (rad, rad/s)."""
        return (
            np.asarray(self.leg.joint_angles(self.data), float),
            np.asarray(self.leg.joint_velocities(self.data), float),
        )

    def body_arrays(self, names: Sequence[str] = BODIES):
        """World positions (N, 3) and wxyz quaternions (N, 4) of skeleton bodies (fast path of
        `LegModel.body_pose`, with the body ids looked up once)."""
        ids = self._ids(names)
        return self._xpos.take(ids, 0), self._xquat.take(ids, 0)

    def _ids(self, names: Sequence[str]) -> np.ndarray:
        key = tuple(names)
        ids = self._body_ids.get(key)
        if ids is None:
            ids = self._body_ids[key] = np.array([self.model.body(n).id for n in names])
        return ids

    def frame_state(self, names: Sequence[str] = BODIES) -> tuple:
        """One frame's outputs in few calls (the free-running sim node copies it every frame),
        as new lists: θ, θ̇ (rad, rad/s), the bodies' world positions (N × 3) and wxyz
        quaternions (N × 4), the valve pressures (kPa)."""
        key = tuple(names)
        bodies = self._body_lists.get(key)
        if bodies is None:
            ids = self._ids(key)
            bodies = self._body_lists[key] = (_lister(self._xpos, ids), _lister(self._xquat, ids))
        p = self.command if self.valve is None else self.valve.p
        return (self._joint_q(), self._joint_qd(), bodies[0](), bodies[1](), p.tolist())

    def body_poses(self, names: Sequence[str] = BODIES) -> dict:
        """{name: (position (3,), quaternion wxyz (4,))} in MuJoCo world coordinates."""
        out = {}
        for name in names:
            pos, quat = self.leg.body_pose(self.data, name)
            out[name] = (np.array(pos, float), np.array(quat, float))
        return out

    # ----- recovery -------------------------------------------------------------------------
    def reset(self, reason: str = 'reset requested') -> None:
        """Return to the initial pose and pressures (time keeps running)."""
        self.resets += 1
        self.last_reset_reason = reason
        if self.valve is not None:
            self.valve.reset(self.initial_pressures.copy())
        self._history = None
        self.command = self.initial_pressures.copy()
        self._place(self.initial_q, self.initial_pressures)

    def place(self, q, p_kpa) -> None:
        """Put the leg at joint angles q (θ1, θ2 rad) at rest with the valves at p_kpa (kPa), held
        as the setpoint: a requested reset (not counted as an unstable-state reset).

        Raises ValueError when the pressures are impossible or q is not two finite angles."""
        problem = physical_problem(p_kpa, self.n, self.p_max)
        if problem:
            raise ValueError(problem)
        q = np.asarray(q, float).reshape(-1)
        if q.size != self.n_joints or not np.all(np.isfinite(q)):
            raise ValueError(
                f'joint angles {q.tolist()} rad: need {self.n_joints} finite values '
                f'({", ".join(self.leg.joint_names)})'
            )
        p = np.asarray(p_kpa, float).reshape(self.n)
        if self.valve is not None:
            self.valve.reset(p.copy())
        self._history = None
        self.command = p.copy()
        self._place(q, p)

    def equilibrium(self, p_kpa) -> np.ndarray:
        """Static equilibrium joint angles (θ1, θ2 rad) of the leg under p_kpa (kPa)."""
        return np.asarray(self.leg.static_equilibrium(np.asarray(p_kpa, float)), float)

    def _place(self, q, p_kpa) -> None:
        self.leg.reset(self.data, q)
        self.leg.set_pressures(self.data, p_kpa)
        mujoco.mj_forward(self.model, self.data)
        # physics time is tracked as a step count; the nominal time continues over resets
        self.steps = int(round(self.time / self.dt))
        self.data.time = self.steps * self.dt
        self._warn_counts = self._bad_warning_count()
        self._warn_bytes = self._warn_number.tobytes()

    def _bad_warning_count(self) -> int:
        return int(self._warn_number[_BAD_WARNING_IDX].sum())

    def _check_stability(self) -> None:
        """Cheap per-frame check: MuJoCo bad-state warnings, non-finite or runaway state."""
        d, qvel = self.data, self._qvel
        reason = ''
        qvel_sq = float(qvel.dot(qvel))
        # Comparing the raw counters first (0.2 µs) skips the per-warning count on most frames.
        counters = self._warn_number.tobytes()
        bad = False
        if counters != self._warn_bytes:
            self._warn_bytes = counters
            bad = self._bad_warning_count() != self._warn_counts
        if bad:
            names = [w.name for w in _BAD_WARNINGS if d.warning[w].number]
            reason = f'MuJoCo reported an unstable state ({", ".join(names)}) and auto-reset it'
        # The sum of a few plain floats: finite exactly when every position is (short of
        # overflow past 1e307, far beyond MuJoCo's own bad-state limit of 1e10), 4x cheaper
        # than numpy's sum here.
        elif not (math.isfinite(sum(self._qpos.tolist())) and math.isfinite(qvel_sq)):
            reason = 'non-finite joint position or velocity'
        elif qvel_sq > MAX_JOINT_SPEED**2:
            reason = f'joint speed above {MAX_JOINT_SPEED:g} (integration diverged)'
        if reason:
            self.reset(f'{reason} at t={self.time:.4f} s: reset to the initial pose')


VALVES = ('mujoco', 'python')


def make_simulator(
    leg_path=None,
    overrides=None,
    variant: str = 'equimus',
    timestep: float | None = None,
    valve: str = 'mujoco',
    **kwargs,
) -> LegSimulator:
    """Build a LegSimulator from a leg YAML (default config/leg.yaml) and optional overrides.

    overrides: dotted-key mapping or path to an override YAML (identification output).
    timestep: physics Δt (s); None keeps the description's. The valve model and the per-actuator
    pressure limits come from the description. valve: 'mujoco' (the lag as MuJoCo actuator
    dynamics) | 'python' (LegSimulator's own loop); see the module docstring.
    """
    if valve not in VALVES:
        raise ValueError(f'valve={valve!r}: use one of {", ".join(VALVES)}')
    from equimus_description.leg import load_leg

    from .leg_model import LegModel

    leg = load_leg(leg_path, overrides)
    if timestep:
        leg = leg.with_timestep(float(timestep))
    vp = leg.valve
    if valve == 'mujoco':
        # a general valve is written into the model step by step; any τ builds its actuators
        tau = vp.tau if vp.is_lag else float(np.max(vp.tau_fill))
        lm = LegModel(leg, variant, valve_tau=tau)
    else:
        lm = LegModel(leg, variant)
    return LegSimulator(lm, vp, p_max=lm.pressure_max_kpa, **kwargs)
