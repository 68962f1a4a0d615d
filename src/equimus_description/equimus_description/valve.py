"""Valve facts and the one valve/chamber model (no ROS, no MuJoCo).

The model: each channel's muscle pressure p follows the setpoint u through a pure dead time T_d
and a first-order chamber whose time constant depends on the direction of the flow,

    v(t) = u(t − T_d),    τ(p, v)·ṗ = v − p,    τ = τ_fill when v > p, else τ_vent.

Why this form (../shared/spec/valve.md): the Festo VPPE is a closed-loop pressure regulator that
fills from the supply and exhausts to the atmosphere through different ports ("3-way (fills and
exhausts)"), so filling and venting are two different flow paths and get two constants; Festo
publishes no response time, and the rigs it cites report "dead time 20–40 ms plus τ of
40–130 ms", i.e. exactly a dead time plus a first-order lag; the EquiMus authors' model is the
lag alone (τ = 0.2171 s). A physical orifice-and-volume model would need the supply pressure, the
orifice conductances and the muscle volume as it changes with length; none of them is
documented, and the recordings measure angles, not pressures, so those would be unidentifiable.
One piece of it is available: a fill no faster than `fill_rate` (kPa/s; choked supply flow fills
at a constant rate), off by default. At T_d = 0, τ_fill = τ_vent and no rate limit the model is
the authors' first-order lag.

The regulator (off by default): the VPPE is itself a pressure regulator with integral action
("closed-loop pressure regulator" in ../shared/spec/valve.md), and a vented muscle first takes up
slack — its braid and bladder unfold — before its pressure rises. So a fill from a vented muscle
loses `slack` kPa of inflow to that slack, the regulator's integral I winds up while the
pressure lags (dI/dt = integral_gain·(v − p) − integral_leak·I) and drives the chamber towards
v + I, then unwinds: the pressure starts late, overshoots and relaxes back, the more so the lower
the setpoint (the same wind-up is a larger share of a small setpoint), as the recorded knee does
(docs/identification.md). Below MIN_REGULATED_KPA the valve vents and its integral is reset; a
muscle vented below VENTED_KPA has its slack back. The slack is taken up in proportion to the
inflow, or, with `slack_rate` (kPa/s) set, at least that fast once the valve regulates (a
step in which the slack runs out fills the chamber for the rest of it, so the pressure is
continuous in the rate): the VPPE opens to the supply whatever the setpoint, so the slack
costs the same time at 10 kPa as at 50 (the rig's fills start 0.2-0.3 s after the command at
every level; docs/identification.md).
The regulator is a recursion, not a closed form: per step of at most REGULATOR_STEP_S the
chamber is solved exactly for the target held and the integral by an Euler step
(integral_gain·REGULATOR_STEP_S ≤ 0.1 over the fitted range).
Its state (the integral and the slack left) travels with the dead time's history in a
`ValveMemory`.

`ValveParams` holds the parameters (from the leg description's `valve` section:
`LegDescription.valve`); the time constants and the rate limit are one value for every channel
or one per channel. Three pure functions give its exact solution for inputs held piecewise
constant — over a fixed step grid for arrays of any batch shape, or stepped by the clock:

- `hold(params, p, u, n, dt, history)`: a command held over n steps (a frame of a simulator or an
  environment; batch over leading axes, e.g. N environments);
- `follow(params, u, p0, dt, history)`: a command per step (identification, the planners);
- `Valve.step(u, dt)`: a stateful valve stepped by an irregular clock (the DAC-board emulator).

All three are the same closed-form solution (`relax`: the flow direction cannot change while the
input is held, the pressure approaches the input without crossing it). With neutral parameters
(`ValveParams.is_lag`) each evaluates the lag exactly as its callers did before the model had a
dead time (`hold`: u + (p − u)·aᵏ, `follow`: the recursive filter p ← a·p + (1 − a)·u via
scipy's lfilter, `Valve.step`: a·p + (1 − a)·u, a = exp(−Δt/τ)), so every figure of a neutral
description stays bit-identical (tests/description/test_valve_model.py).

Dead time on a step grid: T_d = (D + f)·Δt with D an integer and 0 ≤ f < 1; over step k the
valve sees u[k − D − 1] for the first f·Δt and u[k − D] for the rest, so T_d is a continuous
parameter (identification needs the loss smooth in it). `history` is the last
`params.history_steps(dt)` per-step commands before the first one (oldest first); None means the
valve had settled: the commands were p.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    'ACTUATORS',
    'HARD_MAX_KPA',
    'MIN_REGULATED_KPA',
    'P_MIN_KPA',
    'REPEATABILITY_KPA',
    'REGULATOR_STEP_S',
    'SLEW_RATE_KPA_S',
    'VALVE_TAU_S',
    'VENTED_KPA',
    'Valve',
    'ValveLag',
    'ValveMemory',
    'ValveParams',
    'follow',
    'hold',
    'hold_steps',
    'lag_coefficient',
    'relax',
]

#: Valve channels in array order: maa (mono-articular, hip), baa (bi-articular).
ACTUATORS: tuple[str, ...] = ('maa', 'baa')

HARD_MAX_KPA = 50.0
"""The rig's absolute pressure ceiling (kPa). Configuration may lower it, never raise it."""

P_MIN_KPA = 0.0
"""Venting: the lowest pressure, and the safe state of every channel."""

MIN_REGULATED_KPA = 6.0
"""The lowest pressure the VPPE regulates (kPa): it treats setpoints below 0.1 V (60 kPa/V) as
zero and vents, so 0-6 kPa cannot be held (the valve driver's min_regulated_kpa default)."""

SLEW_RATE_KPA_S = 1000.0
"""The valve driver's default slew limit of the command (kPa/s, its slew_rate_kpa_s)."""

REPEATABILITY_KPA = 3.0
"""The VPPE's repeatability (kPa; its datasheet: 0.5 % FS): the spread (±2σ) of the level it
regulates to for one setpoint, from one approach to the next."""

VALVE_TAU_S = 0.2171
"""Default valve time constant (s) when a leg description gives none."""

VENTED_KPA = 1.0
"""A muscle below this pressure (kPa) has vented: its slack is back (the regulator's)."""

REGULATOR_STEP_S = 0.01
"""The longest step (s) of the regulator's recursion; longer steps are split evenly."""

_GRID_TOL = 1e-9  # a dead time this close to a whole number of steps is that number


def lag_coefficient(dt: float, tau: float) -> float:
    """a = exp(−Δt/τ): the exact zero-order-hold discretisation of the lag over Δt."""
    return math.exp(-dt / tau) if tau > 0 else 0.0


Channelwise = float | tuple[float, ...]


def _channelwise(value, name: str, ok, what: str) -> Channelwise:
    """A number, or one number per channel (a tuple), each passing ok()."""
    seq = isinstance(value, (list, tuple, np.ndarray))
    values = list(np.asarray(value, float).ravel()) if seq else [value]
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not ok(float(v)):
            raise ValueError(f'valve {name} must be {what}, got {value!r}')
    return tuple(float(v) for v in values) if seq else value


@dataclass(frozen=True)
class ValveParams:
    """Dead time (s), fill and vent time constants (s), the fill rate limit (kPa/s) and the
    regulator: the muscle's slack (kPa of inflow before its pressure rises), the integral gain
    (1/s), the integral's leak (1/s) and the slack's least uptake rate (kPa/s; 0 = in
    proportion to the inflow).

    All but the dead time are one number for every channel or a tuple with one per channel
    (array order of ACTUATORS); the dead time is the command path's, one for all.
    """

    tau_fill: Channelwise = VALVE_TAU_S
    tau_vent: Channelwise = VALVE_TAU_S
    dead_time: float = 0.0
    fill_rate: Channelwise = math.inf  # kPa/s, the fastest fill (choked supply flow); inf = none
    slack: Channelwise = 0.0  # kPa
    integral_gain: Channelwise = 0.0  # 1/s
    integral_leak: Channelwise = 0.0  # 1/s
    slack_rate: Channelwise = 0.0  # kPa/s

    def __post_init__(self) -> None:
        positive = 'a finite number > 0 s (or one per channel)'
        for name in ('tau_fill', 'tau_vent'):
            v = _channelwise(
                getattr(self, name), name, lambda x: math.isfinite(x) and x > 0, positive
            )
            object.__setattr__(self, name, v)
        rate = _channelwise(
            self.fill_rate,
            'fill_rate',
            lambda x: x > 0,
            '> 0 kPa/s, inf for none (or one per channel)',
        )
        object.__setattr__(self, 'fill_rate', rate)
        for name, unit in (
            ('slack', 'kPa'),
            ('integral_gain', '1/s'),
            ('integral_leak', '1/s'),
            ('slack_rate', 'kPa/s'),
        ):
            v = _channelwise(
                getattr(self, name),
                name,
                lambda x: math.isfinite(x) and x >= 0,
                f'a finite number >= 0 {unit} (or one per channel)',
            )
            object.__setattr__(self, name, v)
        if self.has_regulator and not np.all(np.isinf(self.fill_rate)):
            raise ValueError(
                'valve fill_rate and the regulator (slack, integral_gain) cannot be combined: '
                'set one of them'
            )
        d = self.dead_time
        if not (isinstance(d, (int, float)) and math.isfinite(d) and d >= 0):
            raise ValueError(f'valve dead_time must be a finite number >= 0 s, got {d!r}')

    @classmethod
    def lag(cls, tau: float) -> ValveParams:
        """The first-order lag τ (no dead time, filling as fast as venting)."""
        return cls(float(tau), float(tau), 0.0)

    @property
    def has_regulator(self) -> bool:
        """A slack or an integral: the regulator's recursion, not the chamber's closed form."""
        return bool(
            np.any(np.asarray(self.slack) > 0) or np.any(np.asarray(self.integral_gain) > 0)
        )

    @property
    def is_lag(self) -> bool:
        """No dead time, one time constant, no fill rate limit, no regulator: the authors'
        first-order lag."""
        taus = set(np.atleast_1d(self.tau_fill).tolist()) | set(
            np.atleast_1d(self.tau_vent).tolist()
        )
        return (
            self.dead_time == 0.0
            and len(taus) == 1
            and bool(np.all(np.isinf(self.fill_rate)))
            and not self.has_regulator
        )

    @property
    def tau(self) -> float:
        """The one time constant of a lag (ValueError when fill and vent differ)."""
        taus = set(np.atleast_1d(self.tau_fill).tolist()) | set(
            np.atleast_1d(self.tau_vent).tolist()
        )
        if len(taus) != 1:
            raise ValueError(
                f'valve fills with τ {self.tau_fill} s and vents with {self.tau_vent} s: '
                'it has no single time constant'
            )
        return float(taus.pop())

    def channel(self, i: int) -> ValveParams:
        """The parameters of channel i alone (every field one number)."""

        def pick(v):
            return v[i] if isinstance(v, tuple) else v

        return ValveParams(
            pick(self.tau_fill),
            pick(self.tau_vent),
            self.dead_time,
            pick(self.fill_rate),
            pick(self.slack),
            pick(self.integral_gain),
            pick(self.integral_leak),
            pick(self.slack_rate),
        )

    def delay_steps(self, dt: float) -> tuple[int, float]:
        """(D, f) with dead_time = (D + f)·dt, D ≥ 0 whole steps and 0 ≤ f < 1."""
        r = self.dead_time / dt
        whole = round(r)
        if abs(r - whole) < _GRID_TOL:
            return int(whole), 0.0
        d = math.floor(r)
        return int(d), r - d

    def history_steps(self, dt: float) -> int:
        """How many past per-step commands the dead time needs on a grid of dt."""
        d, f = self.delay_steps(dt)
        return d + (1 if f > 0 else 0)

    def taus(self, p: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Time constant of each element when pressure p is driven towards input v (the last
        axis is the channel when the constants are per channel)."""
        return np.where(v > p, np.asarray(self.tau_fill), np.asarray(self.tau_vent))


def relax(params: ValveParams, p, v, h) -> np.ndarray:
    """Pressure after h seconds with input v held (the chamber only; broadcasts). A fill
    faster than fill_rate ramps at fill_rate until the lag's own slope (v − p)/τ_fill is
    slower, then follows the lag (the slope is continuous at the switch)."""
    p, v, h = np.asarray(p, float), np.asarray(v, float), np.asarray(h, float)
    out = v + (p - v) * np.exp(-h / params.taus(p, v))
    r = np.asarray(params.fill_rate, float)
    if np.all(np.isinf(r)):
        return out
    tau = np.asarray(params.tau_fill, float)
    with np.errstate(invalid='ignore'):
        # time spent on the ramp (> 0: the fill is rate-limited; never without a limit)
        t_ramp = np.where(np.isinf(r), -1.0, (v - p - r * tau) / r)
    ramped = t_ramp > 0
    if not np.any(ramped):
        return out
    with np.errstate(invalid='ignore', over='ignore'):
        on_ramp = p + r * h
        after = v - r * tau * np.exp(-np.maximum(h - t_ramp, 0.0) / tau)
    return np.where(ramped, np.where(h <= t_ramp, on_ramp, after), out)


@dataclass(frozen=True)
class ValveMemory:
    """What a valve with a regulator carries from one call to the next: the per-step commands
    its dead time still holds (what `history` is without a regulator), the regulator's
    integral (kPa) and the slack not yet taken up (kPa) of every channel. Arrays with the
    pressures' leading axes, or tuples of floats from `hold_steps`."""

    commands: Any
    integral: Any
    slack: Any

    @classmethod
    def settled(cls, params: ValveParams, p, dt: float) -> ValveMemory:
        """A valve at rest at pressures p (…, channels) on a grid of dt: no command in flight,
        no integral, the slack of a vented muscle (arrays)."""
        p = np.asarray(p, float)
        h = params.history_steps(dt)
        return cls(_settled(p, h), np.zeros_like(p), _initial_slack(params, p))


def _per_channel(value: Channelwise, channels: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(value, float), (channels,))


@functools.lru_cache(maxsize=256)
def _regulator_plan(
    params: ValveParams, h: float, channels: int
) -> tuple[int, float, np.ndarray, np.ndarray]:
    """A piece of h seconds with one input: (sub-steps, their length, the chamber's fill and
    vent fractions 1 − exp(−hs/τ) per channel over one sub-step). Read-only arrays: the cache
    hands them to every caller."""
    m = max(1, math.ceil(h / REGULATOR_STEP_S - _GRID_TOL))
    hs = h / m
    cf = 1.0 - np.exp(-hs / _per_channel(params.tau_fill, channels))
    cv = 1.0 - np.exp(-hs / _per_channel(params.tau_vent, channels))
    cf.flags.writeable = cv.flags.writeable = False
    return m, hs, cf, cv


def _regulate(params: ValveParams, p, integral, slack, v, h: float):
    """The regulator over h seconds with input v held (arrays, the last axis the channel):
    (pressure, integral, slack) after it. `_regulate_channel` is the same for plain floats."""
    ch = np.shape(v)[-1]
    m, hs, cf, cv = _regulator_plan(params, h, ch)
    s0 = _per_channel(params.slack, ch)
    ki = _per_channel(params.integral_gain, ch)
    leak = _per_channel(params.integral_leak, ch)
    on = v >= MIN_REGULATED_KPA
    least = np.where(on, _per_channel(params.slack_rate, ch) * hs, 0.0)
    for _ in range(m):
        target = v + integral
        fill = target > p
        d = (target - p) * np.where(fill, cf, cv)
        rated = fill & (slack > 0.0) & (d < least)
        rated_take = np.minimum(slack, least)
        take = np.where(fill, np.where(rated, rated_take, np.minimum(slack, d)), 0.0)
        rated_gain = (1.0 - rated_take / np.where(rated, least, 1.0)) * d
        slack = slack - take
        p = np.maximum(p + np.where(rated, rated_gain, d - take), 0.0)
        slack = np.where(~fill & ~on & (p < VENTED_KPA), s0, slack)
        integral = np.where(on, integral + (ki * (v - p) - leak * integral) * hs, 0.0)
    return p, integral, slack


def _initial_slack(params: ValveParams, p0: np.ndarray) -> np.ndarray:
    """A muscle at rest above VENTED_KPA has taken its slack up; a vented one has it all."""
    return np.where(p0 < VENTED_KPA, _per_channel(params.slack, p0.shape[-1]), 0.0)


def _run_regulated(params, p0, steps, dt, history):
    """`_run` with the regulator: (pressures, ValveMemory); one set of channels takes the
    plain-float path (numpy's per-step cost dominates there), a batch the array path."""
    p0 = np.asarray(p0, float)
    if steps.ndim == 2 and p0.ndim == 1:  # one set of channels: plain floats, the same numbers
        commands = history.commands if isinstance(history, ValveMemory) else history
        if commands is not None and not isinstance(commands, tuple):
            commands = np.asarray(commands, float).tolist()
            history = (
                ValveMemory(commands, history.integral, history.slack)
                if isinstance(history, ValveMemory)
                else commands
            )
        rows = [tuple(r) for r in steps.tolist()]
        pressures, memory = _steps_regulated(params, p0.tolist(), rows, dt, history)
        return np.array(pressures, float).reshape(steps.shape), ValveMemory(
            np.array(memory.commands, float).reshape(-1, steps.shape[-1]),
            np.array(memory.integral, float),
            np.array(memory.slack, float),
        )
    if isinstance(history, ValveMemory):
        commands = None if history.commands is None else np.asarray(history.commands, float)
        integral = np.asarray(history.integral, float)
        slack = np.asarray(history.slack, float)
    else:
        commands, integral, slack = history, np.zeros_like(p0), _initial_slack(params, p0)
    first, second, f, hist = _inputs(params, steps, p0, dt, commands)
    shape = second.shape[:-2] + second.shape[-1:]
    p = np.broadcast_to(p0, shape)
    integral, slack = np.broadcast_to(integral, shape), np.broadcast_to(slack, shape)
    out = np.empty(second.shape, float)
    for k in range(second.shape[-2]):
        if f > 0:
            p, integral, slack = _regulate(params, p, integral, slack, first[..., k, :], f * dt)
            h = (1.0 - f) * dt
        else:
            h = dt
        p, integral, slack = _regulate(params, p, integral, slack, second[..., k, :], h)
        out[..., k, :] = p
    return out, ValveMemory(hist, integral, slack)


def _settled(p0: np.ndarray, h: int) -> np.ndarray:
    return np.repeat(np.asarray(p0, float)[..., None, :], h, axis=-2)


def _inputs(
    params: ValveParams, u: np.ndarray, p0: np.ndarray, dt: float, history
) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
    """Per-step inputs the chamber sees: (first part, second part, f, new history)."""
    d, f = params.delay_steps(dt)
    h = d + (1 if f > 0 else 0)
    hist = _settled(p0, h) if history is None else np.asarray(history, float)
    if hist.shape[-2] != h:
        raise ValueError(
            f'valve history has {hist.shape[-2]} steps; dead time {params.dead_time} s at '
            f'dt {dt} s needs {h}'
        )
    full = np.concatenate([np.broadcast_to(hist, u.shape[:-2] + hist.shape[-2:]), u], axis=-2)
    n = u.shape[-2]
    second = full[..., h - d : h - d + n, :]
    first = full[..., h - d - 1 : h - d - 1 + n, :] if f > 0 else second
    return first, second, f, full[..., full.shape[-2] - h :, :]


def _exact(
    params: ValveParams, p0: np.ndarray, first: np.ndarray, second: np.ndarray, f: float, dt: float
) -> np.ndarray:
    """Pressure at the end of every step; over step k the chamber sees first[k] for f·dt, then
    second[k]. A run of steps with one input is `relax` from the run's start."""
    n = second.shape[-2]
    out = np.empty(second.shape, float)
    flat_s = second.reshape(-1, n, second.shape[-1])
    flat_f = first.reshape(-1, n, first.shape[-1])
    split = np.any(flat_f != flat_s, axis=(0, 2)) if f > 0 else np.zeros(n, bool)
    change = np.zeros(n, bool)
    change[0] = True
    change[1:] = np.any(flat_s[:, 1:] != flat_s[:, :-1], axis=(0, 2))
    after_split = np.concatenate(([False], split[:-1]))
    starts = np.flatnonzero(change | split | after_split)
    ends = np.append(starts[1:], n)
    p = np.asarray(p0, float)
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        if split[s]:
            p = relax(
                params,
                relax(params, p, first[..., s, :], f * dt),
                second[..., s, :],
                (1.0 - f) * dt,
            )
            out[..., s, :] = p
            continue
        v = second[..., s, :]
        h = dt * np.arange(1, e - s + 1, dtype=float)[:, None]
        seg = relax(params, p[..., None, :], v[..., None, :], h)
        out[..., s:e, :] = seg
        p = seg[..., -1, :]
    return out


def hold(
    params: ValveParams,
    p: np.ndarray,
    u: np.ndarray,
    n: int,
    dt: float,
    history: np.ndarray | ValveMemory | None = None,
) -> tuple[np.ndarray, Any]:
    """Command u (…, channels) held over n steps of dt from pressure p (…, channels).

    Returns (pressure at the end of each step (…, n, channels), the new history: a
    `ValveMemory` with a regulator). A lag evaluates u + (p − u)·aᵏ, k = 1..n (what
    LegSimulator and VectorTrackEnv did)."""
    p, u = np.asarray(p, float), np.asarray(u, float)
    if params.is_lag:
        a = lag_coefficient(dt, params.tau)
        decay = a ** np.arange(1, n + 1, dtype=float)
        return u[..., None, :] + (p - u)[..., None, :] * decay[:, None], history
    steps = np.broadcast_to(u[..., None, :], u.shape[:-1] + (n, u.shape[-1]))
    return _run(params, p, steps, dt, history)


@functools.lru_cache(maxsize=64)
def _step_plan(
    params: ValveParams, dt: float, channels: int
) -> tuple[tuple[float, ...], tuple[float, ...], int, float, int] | None:
    """hold_steps' constants of a valve on a step grid (fill and vent constants per channel,
    the dead time's whole and fractional steps, the history length), or None where hold's own
    path applies (a lag, a fill rate limit)."""
    if params.is_lag or not np.all(np.isinf(params.fill_rate)):
        return None
    # tuples: the cache hands the same plan to every caller
    tf = tuple(np.broadcast_to(np.asarray(params.tau_fill, float), (channels,)).tolist())
    tv = tuple(np.broadcast_to(np.asarray(params.tau_vent, float), (channels,)).tolist())
    d, f = params.delay_steps(dt)
    return tf, tv, d, f, d + (1 if f > 0 else 0)


Row = tuple[float, ...]  # one step's value of every channel


def hold_steps(
    params: ValveParams,
    p: Sequence[float],
    u: Sequence[float],
    n: int,
    dt: float,
    history: Sequence[Sequence[float]] | np.ndarray | ValveMemory | None = None,
) -> tuple[list[list[float]], Any]:
    """`hold` for one set of channels, in plain floats: (pressure at the end of each of the n
    steps, the new history). The same numbers bit for bit (the same IEEE operations in the same
    order, and numpy's exp, which can differ from math.exp in the last digit) at a fraction of
    the cost: `hold`'s array bookkeeping costs more than its arithmetic for two channels and a
    frame's five steps, and the simulator calls it every frame (tests/description/
    test_valve_model.py compares the two). With a regulator the history is a `ValveMemory` of
    tuples."""
    if params.has_regulator:
        return _hold_steps_regulated(params, p, u, n, dt, history)
    if isinstance(history, ValveMemory):
        history = history.commands
    plan = _step_plan(params, dt, len(u))
    if plan is None:
        arr = None if history is None else np.asarray(history, float)
        steps, new = hold(params, np.asarray(p, float), np.asarray(u, float), n, dt, arr)
        rows = None if new is None else tuple(tuple(r) for r in np.asarray(new).tolist())
        return steps.tolist(), rows
    tf, tv, d, f, h = plan
    channels = len(u)
    now = [float(v) for v in p]
    held: Row = tuple(float(v) for v in u)
    # rows as tuples, so that rows compare by value (a list never equals a tuple)
    hist = _rows(history, tuple(now), h, params, dt)
    full = hist + [held] * n
    second = full[h - d : h - d + n]
    first = full[h - d - 1 : h - d - 1 + n] if f > 0 else second
    split = [f > 0 and a != b for a, b in zip(first, second, strict=True)]
    out: list[list[float]] = []

    def relax1(p: list[float], v: Row, hs: float) -> list[float]:
        taus = [tf[c] if v[c] > p[c] else tv[c] for c in range(channels)]
        e = np.exp([-hs / t for t in taus]).tolist()
        return [v[c] + (p[c] - v[c]) * e[c] for c in range(channels)]

    k = 0
    while k < n:
        if split[k]:
            now = relax1(relax1(now, first[k], f * dt), second[k], (1.0 - f) * dt)
            out.append(now)
            k += 1
            continue
        v = second[k]
        e = k + 1  # the run of steps with this input: until it changes or a split comes
        while e < n and second[e] == v and not split[e]:
            e += 1
        taus = [tf[c] if v[c] > now[c] else tv[c] for c in range(channels)]
        ex: list[float] = np.exp(
            [-(dt * float(j)) / taus[c] for j in range(1, e - k + 1) for c in range(channels)]
        ).tolist()
        for j in range(e - k):
            out.append([v[c] + (now[c] - v[c]) * ex[j * channels + c] for c in range(channels)])
        now = out[-1]
        k = e
    return out, tuple(full[len(full) - h :])


def _rows(history, now: Row, h: int, params: ValveParams, dt: float) -> list[Row]:
    """The dead time's per-step commands as a list of tuples (None: settled at `now`)."""
    if history is None:
        return [now] * h
    if isinstance(history, tuple) and all(type(row) is tuple for row in history[:1]):
        rows = list(history)  # as hold_steps returned it: rows are tuples already
    else:
        rows = [tuple(float(v) for v in row) for row in history]
    if len(rows) != h:
        raise ValueError(
            f'valve history has {len(rows)} steps; dead time {params.dead_time} s at dt {dt} s '
            f'needs {h}'
        )
    return rows


@functools.lru_cache(maxsize=256)
def _row_plan(params: ValveParams, h: float, channels: int) -> tuple:
    """`_regulator_plan` and the regulator's parameters as tuples of plain floats."""
    m, hs, cf, cv = _regulator_plan(params, h, channels)
    return (
        m,
        hs,
        tuple(cf.tolist()),
        tuple(cv.tolist()),
        tuple(_per_channel(params.slack, channels).tolist()),
        tuple(_per_channel(params.integral_gain, channels).tolist()),
        tuple(_per_channel(params.integral_leak, channels).tolist()),
        tuple((_per_channel(params.slack_rate, channels) * hs).tolist()),
    )


def _regulate_channel(
    c: int, pieces: list[tuple[tuple, list[Row]]], n: int, p: float, i: float, s: float
) -> tuple[list[float], float, float, float]:
    """`_regulate` for channel c alone over n steps in plain floats: the same operations in the
    same order, so the same numbers bit for bit, without numpy's per-call cost. Each step runs
    the pieces in order, each (plan, its per-step inputs). Returns (the pressure at the end of
    each step, the final pressure, integral and slack)."""
    prepared = [
        (plan[0], plan[1], plan[2][c], plan[3][c], plan[4][c], plan[5][c], plan[6][c],
         plan[7][c], [row[c] for row in inputs])
        for plan, inputs in pieces
    ]  # fmt: skip
    out = [0.0] * n
    for k in range(n):
        for m, hs, cf, cv, s0, ki, leak, rate_hs, inputs in prepared:
            v = inputs[k]
            on = v >= MIN_REGULATED_KPA
            least = rate_hs if on else 0.0
            for _ in range(m):
                target = v + i
                if target > p:
                    d = (target - p) * cf
                    if s > 0.0 and d < least:  # the slack taken up at its least rate
                        take = min(s, least)
                        gain = (1.0 - take / least) * d  # the step's rest after the slack
                    else:
                        take = min(s, d)
                        gain = d - take
                    s = s - take
                    p = max(p + gain, 0.0)
                else:
                    p = max(p + (target - p) * cv, 0.0)
                    if not on and p < VENTED_KPA:
                        s = s0
                i = i + (ki * (v - p) - leak * i) * hs if on else 0.0
        out[k] = p
    return out, p, i, s


def _steps_regulated(
    params: ValveParams, p, rows: list[Row], dt: float, history
) -> tuple[list[list[float]], ValveMemory]:
    """The regulator over one set of channels, one command row per step, in plain floats:
    (pressure at the end of each step, the memory with tuples)."""
    channels = len(p)
    now = [float(v) for v in p]
    d, f = params.delay_steps(dt)
    h = d + (1 if f > 0 else 0)
    if isinstance(history, ValveMemory):
        commands = history.commands
        integral = [float(v) for v in np.asarray(history.integral, float).ravel()]
        slack = [float(v) for v in np.asarray(history.slack, float).ravel()]
    else:
        commands, integral = history, [0.0] * channels
        slack = _initial_slack(params, np.asarray(now)).tolist()
    n = len(rows)
    full = _rows(commands, tuple(now), h, params, dt) + rows
    second = full[h - d : h - d + n]
    if f > 0:
        first = full[h - d - 1 : h - d - 1 + n]
        pieces = [
            (_row_plan(params, f * dt, channels), first),
            (_row_plan(params, (1.0 - f) * dt, channels), second),
        ]
    else:
        pieces = [(_row_plan(params, dt, channels), second)]
    columns = []
    for c in range(channels):
        col, now[c], integral[c], slack[c] = _regulate_channel(
            c, pieces, n, now[c], integral[c], slack[c]
        )
        columns.append(col)
    out = [list(step) for step in zip(*columns, strict=True)]
    return out, ValveMemory(tuple(full[len(full) - h :]), tuple(integral), tuple(slack))


def _hold_steps_regulated(params, p, u, n, dt, history):
    held: Row = tuple(float(v) for v in u)
    return _steps_regulated(params, p, [held] * n, dt, history)


def follow(
    params: ValveParams,
    u: np.ndarray,
    p0: np.ndarray,
    dt: float,
    history: np.ndarray | ValveMemory | None = None,
) -> tuple[np.ndarray, Any]:
    """Per-step commands u (…, n, channels) from pressure p0 (…, channels).

    Returns (pressure at the end of each step, the new history: a `ValveMemory` with a
    regulator). A lag runs the recursive filter
    p ← a·p + (1 − a)·u (scipy's lfilter along the step axis, what identification and the
    sampling planner did)."""
    u, p0 = np.asarray(u, float), np.asarray(p0, float)
    if params.is_lag:
        from scipy.signal import lfilter

        a = lag_coefficient(dt, params.tau)
        zi = np.broadcast_to(a * p0, u.shape[:-2] + (1,) + u.shape[-1:])
        out, _ = lfilter([1.0 - a], [1.0, -a], u, axis=-2, zi=zi)
        return out, history
    return _run(params, p0, u, dt, history)


def _run(params, p0, steps, dt, history):
    if params.has_regulator:
        return _run_regulated(params, p0, steps, dt, history)
    if isinstance(history, ValveMemory):
        history = history.commands
    first, second, f, hist = _inputs(params, steps, p0, dt, history)
    return _exact(params, p0, first, second, f, dt), hist


class Valve:
    """One valve per channel stepped by a clock (irregular steps allowed): `step(u, dt)` sets
    the command u now and advances dt seconds. The dead time is a queue of timed commands."""

    def __init__(
        self,
        params: ValveParams | float,
        n: int = len(ACTUATORS),
        p0: Sequence[float] | np.ndarray | None = None,
    ):
        if not isinstance(params, ValveParams):
            tau = params
            if not (isinstance(tau, (int, float)) and tau > 0 and math.isfinite(tau)):
                raise ValueError(f'valve time constant must be > 0 s, got {tau!r}')
            params = ValveParams.lag(float(tau))
        self.params = params
        self.p = np.zeros(n) if p0 is None else np.array(p0, float).reshape(n)
        self._dt: float | None = None
        self._a = 0.0
        self.t = 0.0  # the valve's own clock (s), advanced by step()
        # (time the valve starts to see a command, command); the first entry is in effect
        self._queue: deque[tuple[float, np.ndarray]] = deque([(-math.inf, self.p.copy())])
        self.integral = np.zeros(n)  # the regulator's (kPa)
        self.slack = _initial_slack(params, self.p)  # kPa not yet taken up

    @property
    def tau(self) -> float:
        """The lag's time constant (ValueError when filling and venting differ)."""
        return self.params.tau

    def coefficient(self, dt: float) -> float:
        """a = exp(−dt/τ) of a lag (cached for the last dt)."""
        if dt != self._dt:
            self._dt = dt
            self._a = lag_coefficient(dt, self.params.tau)
        return self._a

    def reset(self, p: Sequence[float] | np.ndarray) -> None:
        """Settled at pressure p: no command in flight."""
        self.p = np.array(p, float).reshape(self.p.shape)
        self._queue = deque([(-math.inf, self.p.copy())])
        self.integral = np.zeros_like(self.p)
        self.slack = _initial_slack(self.params, self.p)

    def step(self, u: Sequence[float] | np.ndarray, dt: float) -> np.ndarray:
        if self.params.is_lag:
            a = self.coefficient(dt)
            self.p = a * self.p + (1.0 - a) * np.asarray(u, float)
            return self.p
        u = np.asarray(u, float).reshape(self.p.shape)
        if not np.array_equal(u, self._queue[-1][1]):
            self._queue.append((self.t + self.params.dead_time, u.copy()))
        t, end = self.t, self.t + dt
        while t < end:
            while len(self._queue) > 1 and self._queue[1][0] <= t:
                self._queue.popleft()
            nxt = self._queue[1][0] if len(self._queue) > 1 else math.inf
            h = min(end, nxt) - t
            if self.params.has_regulator:
                self.p, self.integral, self.slack = _regulate(
                    self.params, self.p, self.integral, self.slack, self._queue[0][1], h
                )
            else:
                self.p = relax(self.params, self.p, self._queue[0][1], h)
            t += h
        self.t = end
        return self.p

    @staticmethod
    def closed_form(p0: Sequence[float], u: Sequence[float], t: float, tau: float) -> np.ndarray:
        """Response of the lag τ·ṗ = u − p to a step held for time t."""
        u_ = np.asarray(u, float)
        return u_ + (np.asarray(p0, float) - u_) * np.exp(-np.asarray(t) / tau)


ValveLag = Valve
"""The earlier name of `Valve` (a lag when built from one time constant)."""
