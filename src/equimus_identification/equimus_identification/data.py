"""Recordings in, identification experiments out.

Two sources:
- rosbag2 recordings of this project (`/valve/applied` or `/valve/command`, `/valve/pressure`,
  `/joint_states` or `/sim/joint_states`), cut into one experiment per pressure step, kept on
  their 120 Hz grid and fitted against the raw angles (a moving average flattens step
  transients and biased the damping and valve-lag estimates by tens of per cent);
- the EquiMus authors' CSVs (../shared/data/equimus/physical/): static equilibria (Set A / B) and
  the ToCenter step releases, prepared as the authors do: from the release onwards, 4 s resampled
  to 100 Hz by linear interpolation, then an 11-sample moving average.

An `Experiment` is what the dynamic fit simulates: a measured joint trajectory on a uniform time
grid, the valve command held over each sample interval, and the valve pressure at its start.
Angles are the paper's θ1 (hip), θ2 (knee) in rad; pressures in kPa.
"""

from __future__ import annotations

import pathlib
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.signal import savgol_filter

from equimus_description.interface import (
    JOINT_STATES,
    SIM_JOINT_STATES,
    VALVE_APPLIED,
    VALVE_COMMAND,
    VALVE_PRESSURE,
)

RATE_HZ = 100.0  # the authors' resampling rate
#: s of recorded pressures kept beyond an experiment's ends (a read-back lag moves its window)
SERIES_MARGIN_S = 0.1
SMOOTH_SAMPLES = 11  # the authors' moving-average window
BAG_RATE_HZ = 120.0  # our recordings: the mocap frame rate, so nothing is interpolated
START_WINDOW = 11  # samples of the local cubic fit that estimates restart angles and velocities
DURATION_S = 4.0  # the authors' identification window after the release
HOLD_S = 5.0  # ToCenter: start pressures are held this long, then released

# Set A of the paper: the 13 (P1, P2) kPa pairs without antagonistic actuation
# (static/StaticPoint_effective_13.csv lists the same pairs; a test checks they agree).
EFFECTIVE_13 = (
    (0, 0),
    (0, 10),
    (0, 20),
    (0, 30),
    (10, 0),
    (10, 10),
    (10, 20),
    (20, 0),
    (20, 10),
    (30, 0),
    (30, 10),
    (40, 0),
    (50, 0),
)

JOINT_TOPICS = (JOINT_STATES.name, SIM_JOINT_STATES.name)
COMMAND_TOPICS = (VALVE_APPLIED.name, VALVE_COMMAND.name)
PRESSURE_TOPIC = VALVE_PRESSURE.name


class DataError(ValueError):
    """A recording cannot be used for identification; the message says why and what to do."""


@dataclass
class StaticSet:
    """Equilibria: pressures (kPa) and the joint angles (rad) they hold, one row each."""

    pressures_kpa: np.ndarray
    q: np.ndarray
    name: str = ''

    def __len__(self):
        return len(self.q)


@dataclass
class Experiment:
    """One step experiment on a uniform time grid (t[0] = 0)."""

    name: str
    t: np.ndarray  # (N,) s
    q: np.ndarray  # (N, 2) rad, measured (smoothed)
    qd: np.ndarray  # (N, 2) rad/s, from the smoothed angles
    command_kpa: np.ndarray  # (N, 2) valve command, held from t[i] to t[i+1]
    p0_kpa: np.ndarray  # (2,) valve pressure at t = 0
    meta: dict = field(default_factory=dict)
    q_start: np.ndarray | None = None  # (N, 2) angles a simulation restarts from; None = q
    pressure_kpa: np.ndarray | None = None  # (N, 2) measured valve pressure, when recorded
    #: the measured pressures as recorded: (stamps in s on this experiment's clock, (M, 2) kPa)
    pressure_series: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def start_q(self) -> np.ndarray:
        return self.q if self.q_start is None else self.q_start

    @property
    def dt(self) -> float:
        return float(self.t[1] - self.t[0])

    def __len__(self):
        return len(self.t)

    def head(self, duration: float) -> Experiment:
        """The first `duration` seconds (for quick fits and tests)."""
        n = max(2, int(round(duration / self.dt)) + 1)
        return Experiment(
            self.name,
            self.t[:n],
            self.q[:n],
            self.qd[:n],
            self.command_kpa[:n],
            self.p0_kpa.copy(),
            dict(self.meta),
            None if self.q_start is None else self.q_start[:n],
            None if self.pressure_kpa is None else self.pressure_kpa[:n],
            self.pressure_series,
        )

    @property
    def is_static(self) -> bool:
        """An equilibrium held at constant pressure (scored on its settled angles only)."""
        return bool(self.meta.get('static'))


def moving_average(x: np.ndarray, window: int = SMOOTH_SAMPLES) -> np.ndarray:
    """Centred moving average along axis 0; edges padded with the end values (no lag, no shrink)."""
    x = np.asarray(x, dtype=float)
    if window <= 1:
        return x.copy()
    h = window // 2
    pad = np.concatenate(
        [np.repeat(x[:1], h, axis=0), x, np.repeat(x[-1:], window - 1 - h, axis=0)]
    )
    c = np.cumsum(np.concatenate([np.zeros((1,) + x.shape[1:]), pad]), axis=0)
    return (c[window:] - c[:-window]) / window


def resample(t_src, x_src, t_new) -> np.ndarray:
    """Linear interpolation of each column of x_src onto t_new."""
    x_src = np.asarray(x_src, dtype=float)
    if x_src.ndim == 1:
        return np.interp(t_new, t_src, x_src)
    return np.stack([np.interp(t_new, t_src, x_src[:, j]) for j in range(x_src.shape[1])], axis=1)


HOLD_TOLERANCE_S = 1e-7  # a grid time this close to a command's stamp counts as at or after it


def hold(t_src, x_src, t_new) -> np.ndarray:
    """Zero-order hold (last value at or before each t_new) of a command signal.

    Grid times are sums of floats and stamps are rounded nanoseconds, so a sample meant to fall
    on a command's stamp can land a hair before it; without the tolerance it would take the
    previous command (a one-sample delay of every command, 2 mrad of residual on ramps).
    """
    t_new = np.asarray(t_new, float) + HOLD_TOLERANCE_S
    idx = np.searchsorted(np.asarray(t_src), t_new, side='right') - 1
    return np.asarray(x_src, dtype=float)[np.clip(idx, 0, len(t_src) - 1)]


# ---------------------------------------------------------------- authors' CSVs


def load_static_csv(path) -> StaticSet:
    """StaticPoint_*.csv: columns P1 (kPa), P2 (kPa), theta1 (deg), theta2 (deg)."""
    path = pathlib.Path(path)
    d = np.atleast_2d(_read_csv(path, skip_header=1))
    if d.shape[1] != 4 or not np.all(np.isfinite(d)):
        raise DataError(
            f'{path}: expected 4 numeric columns P1 (kPa), P2 (kPa), theta1 (deg), '
            f'theta2 (deg); got shape {d.shape}'
        )
    return StaticSet(d[:, :2].copy(), np.deg2rad(d[:, 2:]), name=path.stem)


def _read_csv(path, **kwargs) -> np.ndarray:
    """np.genfromtxt of a comma-separated file with a header line; DataError (one line) if it
    cannot be read, is malformed, or has no data rows (numpy only warns about that)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')  # "Empty input file": reported below
            d = np.genfromtxt(path, delimiter=',', dtype=float, **kwargs)
    except OSError as exc:
        raise DataError(f'{path}: cannot read ({exc})') from exc
    except ValueError as exc:  # rows of different lengths; numpy names the lines
        raise DataError(f'{path}: malformed CSV: {" ".join(str(exc).split())}') from None
    if d.size == 0:
        raise DataError(f'{path}: no data rows (a header line only?)')
    return d


def _read_named_csv(path) -> np.ndarray:
    return np.atleast_1d(_read_csv(path, names=True))


TOCENTER_COLUMNS = (
    'relative_time',
    'pressure1_start',
    'pressure2_start',
    'pressure1_end',
    'pressure2_end',
    'current_pressure1',
    'current_pressure2',
    'thigh_theta21',
    'calf_theta32',
)


def is_tocenter_csv(path) -> bool:
    try:
        with open(path) as f:
            header = f.readline()
    except OSError:
        return False
    return all(c in header for c in TOCENTER_COLUMNS)


def tocenter_groups(path) -> list[dict]:
    """Split a ToCenter CSV into its groups (relative_time restarts at each group).

    Each group: dict with t (s), command (N, 2) kPa, q (N, 2) rad, start/end pressures in kPa.
    """
    d = _read_named_csv(path)
    missing = [c for c in TOCENTER_COLUMNS if c not in (d.dtype.names or ())]
    if missing:
        raise DataError(f'{path}: not a ToCenter CSV, missing columns {missing}')
    t = d['relative_time']
    cuts = np.r_[0, np.where(np.diff(t) < 0)[0] + 1, len(d)]
    groups = []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        g = d[a:b]
        groups.append(
            dict(
                t=g['relative_time'] - g['relative_time'][0],
                command=np.stack([g['current_pressure1'], g['current_pressure2']], 1) / 1e3,
                q=np.deg2rad(np.stack([g['thigh_theta21'], g['calf_theta32']], 1)),
                start=(g['pressure1_start'][0] / 1e3, g['pressure2_start'][0] / 1e3),
                end=(g['pressure1_end'][0] / 1e3, g['pressure2_end'][0] / 1e3),
            )
        )
    return groups


def holds_as_static_set(path, tail_s: float = 0.5) -> StaticSet:
    """The equilibria a ToCenter session held: per group, the start pair and the mean angles of
    the hold's last `tail_s` seconds. StaticPoint_all_36 (Set B) is this for the 2025-02-20
    session, within 0.39° (tests/identification/test_data_dynamic.py)."""
    rows_p, rows_q = [], []
    for g in tocenter_groups(path):
        i = release_index(g)
        t_rel = g['t'][i]
        m = (g['t'] >= t_rel - tail_s) & (g['t'] < t_rel)
        rows_p.append(g['start'])
        rows_q.append(g['q'][m].mean(axis=0))
    return StaticSet(
        np.array(rows_p, float), np.array(rows_q), name=f'{pathlib.Path(path).stem} holds'
    )


def release_index(g: dict, hold_s: float = HOLD_S) -> int:
    """First sample where the command leaves the start pressures; for a (0, 0) group, t ≥ hold_s."""
    start = np.asarray(g['start'])
    moved = np.where(np.any(np.abs(g['command'] - start) > 1e-9, axis=1))[0]
    moved = moved[g['t'][moved] > 0.5 * hold_s] if len(moved) else moved
    if len(moved):
        return int(moved[0])
    return int(np.searchsorted(g['t'], hold_s))


def local_cubic(q: np.ndarray, rate: float, window: int = START_WINDOW):
    """Angles and velocities from a sliding local cubic fit (Savitzky-Golay).

    Unlike a moving average it follows a step transient without flattening it, so simulations
    restarted from these states are not biased towards slower dynamics.
    """
    w = min(window, len(q) if len(q) % 2 else len(q) - 1)
    if w < 5:
        return q.copy(), np.gradient(q, 1.0 / rate, axis=0)
    return (
        savgol_filter(q, w, 3, axis=0, mode='interp'),
        savgol_filter(q, w, 3, deriv=1, delta=1.0 / rate, axis=0, mode='interp'),
    )


def prepare(
    t_src,
    q_src,
    command_src,
    t0: float,
    duration: float,
    rate: float,
    smooth: int,
    p0_kpa,
    name: str,
    meta: dict | None = None,
    target: str = 'smoothed',
) -> Experiment:
    """Resample the whole signal to `rate`, filter it, then cut [t0, t0 + duration].

    target 'smoothed' (the authors' way, for their CSVs): the fit compares with the moving average
    of `smooth` samples and restarts from it. target 'raw' (our bags): the fit compares with the
    measured angles themselves, which is unbiased under noise, and restarts from a local cubic fit.
    Filtering before cutting keeps the window's edges honest (no padding at the release).
    """
    if target not in ('smoothed', 'raw'):
        raise ValueError(f"target must be 'smoothed' or 'raw', got {target!r}")
    t_src = np.asarray(t_src, float)
    grid = np.arange(t_src[0], t_src[-1] + 1e-9, 1.0 / rate)
    q_grid = resample(t_src, q_src, grid)
    if target == 'smoothed':
        qs = moving_average(q_grid, smooth)
        q_start, qd = None, np.gradient(qs, 1.0 / rate, axis=0)
    else:
        qs = q_grid
        q_start, qd = local_cubic(q_grid, rate)
    i0 = int(np.searchsorted(grid, t0 - 1e-9))
    n = int(round(duration * rate)) + 1
    if i0 + n > len(grid):
        n = len(grid) - i0
    if n < 3:
        raise DataError(f'{name}: fewer than 3 samples after t = {t0:.3f} s')
    sl = slice(i0, i0 + n)
    cmd = hold(t_src, command_src, grid[sl])
    return Experiment(
        name=name,
        t=grid[sl] - grid[i0],
        q=qs[sl],
        qd=qd[sl],
        command_kpa=cmd,
        p0_kpa=np.asarray(p0_kpa, float).copy(),
        meta=dict(meta or {}),
        q_start=None if q_start is None else q_start[sl],
    )


def load_tocenter(
    path,
    groups='effective',
    duration: float = DURATION_S,
    rate: float = RATE_HZ,
    smooth: int = SMOOTH_SAMPLES,
) -> list[Experiment]:
    """The ToCenter releases as experiments, prepared the authors' way.

    groups: 'effective' (Set A's 13 pairs), 'all' (36), or an iterable of (P1, P2) kPa pairs.
    The valve starts at the held start pressure (held for 5 s, so settled) and is commanded to
    the end pressure (0) at the release.
    """
    wanted = (
        None
        if groups == 'all'
        else {tuple(map(float, p)) for p in (EFFECTIVE_13 if groups == 'effective' else groups)}
    )
    out = []
    for g in tocenter_groups(path):
        key = tuple(float(round(v, 6)) for v in g['start'])
        if wanted is not None and key not in wanted:
            continue
        i = release_index(g)
        # A release logged at sample i happened between samples i−1 and i: take the midpoint.
        t_rel = 0.5 * (g['t'][max(i - 1, 0)] + g['t'][i])
        e = prepare(
            g['t'],
            g['q'],
            g['command'],
            t_rel,
            duration,
            rate,
            smooth,
            p0_kpa=g['start'],
            name=f'P{key[0]:g}-{key[1]:g}',
            meta={'start_kpa': list(key), 'end_kpa': list(g['end']), 'source': str(path)},
        )
        e.command_kpa[:] = np.asarray(g['end'])  # from the release instant on: the end pressure
        out.append(e)
    if wanted is not None and len(out) != len(wanted):
        have = {tuple(e.meta['start_kpa']) for e in out}
        raise DataError(f'{path}: groups {sorted(wanted - have)} not found in the file')
    return out


# ---------------------------------------------------------------- rosbag2 recordings


@dataclass
class Recording:
    """Raw time series from one bag (t in s from the bag's first message)."""

    t_q: np.ndarray
    q: np.ndarray
    t_cmd: np.ndarray
    command_kpa: np.ndarray
    t_p: np.ndarray | None = None
    pressure_kpa: np.ndarray | None = None
    source: str = ''
    joint_topic: str = ''
    command_topic: str = ''
    t0_ns: int = 0  # the stamp (ns) that t = 0 is: a bag's first joint-state or command stamp


def _joint_order(names: Sequence[str]) -> list[int]:
    names = list(names)
    if {'hip', 'knee'} <= set(names):
        return [names.index('hip'), names.index('knee')]
    return [0, 1]


def bag_folder(path: pathlib.Path) -> pathlib.Path:
    """The bag directory of a bag folder or of its .mcap file; DataError when neither exists
    (the parent of a mistyped file name would be read as the bag)."""
    if path.is_dir():
        return path
    if not path.is_file():
        raise DataError(f'{path}: no such bag (neither a bag folder nor an .mcap file)')
    return path.parent


def load_bag(path, joint_topic: str | None = None, command_topic: str | None = None) -> Recording:
    """Read joint angles, valve commands and valve pressures from a rosbag2 recording.

    By default the estimated `/joint_states` is used (what the rig measures), falling back to
    `/sim/joint_states`; the command is `/valve/applied` (after the safety clamp), falling back to
    `/valve/command`. Stamped messages are placed at their header stamps, the rest (the
    command arrays) at the recorder's log time.
    """
    from equimus_record.bag import BagError, pressures, read_messages

    path = pathlib.Path(path)
    topics = list(JOINT_TOPICS + COMMAND_TOPICS + (PRESSURE_TOPIC,))

    def messages():
        try:
            yield from read_messages(path, topics)
        except BagError as exc:  # garbage, a cut or a corrupt chunk: one line saying which
            raise DataError(str(exc)) from None

    # topic → (stamp ns, rows); stamps stay integers until the first one is subtracted: an
    # epoch time in float seconds keeps only ~0.2 µs, enough to move a grid sample across a stamp
    series: dict[str, tuple[list[int], list[list[float]]]] = {}
    for topic, logged, msg in messages():
        # The header's stamp where the message has one (the capture or the command's time);
        # the log time is when the recorder got it, late by however long a loaded machine
        # held the message up (tens of ms, unequally per topic).
        stamp = _header_ns(msg) or logged
        if topic in JOINT_TOPICS:
            pos = list(msg.position)
            if len(pos) < 2:
                continue
            idx = _joint_order(msg.name)
            row = [pos[idx[0]], pos[idx[1]]]
        elif topic == VALVE_COMMAND.name:
            row = list(msg.data)[:2]
        else:  # measured or applied: stamped pressures (older bags: arrays)
            row = pressures(msg)[:2]
            if len(row) < 2:
                continue
        if not np.all(np.isfinite(row)):
            continue
        series.setdefault(topic, ([], []))
        series[topic][0].append(int(stamp))
        series[topic][1].append(row)

    def pick(choice, options, what):
        if choice is not None:
            if choice not in series:
                raise DataError(f'{path}: no {what} messages on {choice} (have {sorted(series)})')
            return choice
        for o in options:
            if o in series and len(series[o][0]) >= 2:
                return o
        raise DataError(
            f'{path}: no {what} topic with data (looked for {", ".join(options)}; '
            f'have {sorted(series) or "none"}). Record these topics (docs/interfaces.md).'
        )

    jt = pick(joint_topic, JOINT_TOPICS, 'joint-state')
    ct = pick(command_topic, COMMAND_TOPICS, 'valve-command')
    t0 = min(series[jt][0][0], series[ct][0][0])

    def arr(topic):
        t, x = series[topic]
        order = np.argsort(t, kind='stable')
        return (np.asarray(t, np.int64)[order] - t0) * 1e-9, np.asarray(x, float)[order]

    tq, q = arr(jt)
    tc, c = arr(ct)
    tp, p = arr(PRESSURE_TOPIC) if PRESSURE_TOPIC in series else (None, None)
    return Recording(
        tq, q, tc, c, tp, p, source=str(path), joint_topic=jt, command_topic=ct, t0_ns=t0
    )


def _header_ns(msg) -> int:
    header = getattr(msg, 'header', None)
    if header is None:
        return 0
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


def step_times(rec: Recording, threshold_kpa: float = 0.5) -> np.ndarray:
    """Times at which the command jumps by more than threshold_kpa on any channel."""
    jumps = np.any(np.abs(np.diff(rec.command_kpa, axis=0)) > threshold_kpa, axis=1)
    return rec.t_cmd[1:][jumps]


def segment_steps(
    rec: Recording,
    max_duration: float = DURATION_S,
    min_duration: float = 0.5,
    rate: float = BAG_RATE_HZ,
    smooth: int = SMOOTH_SAMPLES,
    threshold_kpa: float = 0.5,
    name: str = 'bag',
    target: str = 'raw',
) -> list[Experiment]:
    """One experiment per pressure step: from the step to the next step (at most max_duration).

    By default on the recording's own 120 Hz grid, fitted against the raw angles (see `prepare`).

    The valve pressure at the step is the measured `/valve/pressure` when recorded, else the
    command held before the step (assumes the valve had settled).
    """
    steps = step_times(rec, threshold_kpa)
    t_end = min(rec.t_q[-1], rec.t_cmd[-1] + max_duration)
    bounds = list(steps) + [t_end]
    out = []
    for k, ts in enumerate(steps):
        # stop one sample before the next step so every sample of the experiment has this command
        dur = min(max_duration, bounds[k + 1] - ts - 1.0 / rate, rec.t_q[-1] - ts)
        if dur < min_duration:
            continue
        if rec.t_p is not None and len(rec.t_p) >= 2:
            p0 = resample(rec.t_p, rec.pressure_kpa, np.array([ts]))[0]
        else:
            p0 = hold(rec.t_cmd, rec.command_kpa, np.array([ts - 1e-6]))[0]
        q_src_t = rec.t_q
        exp = prepare(
            q_src_t,
            rec.q,
            hold(rec.t_cmd, rec.command_kpa, q_src_t),
            ts,
            dur,
            rate,
            smooth,
            p0_kpa=p0,
            name=f'{name}#{k}',
            target=target,
            meta={
                'source': rec.source,
                't_step': float(ts),
                'command_kpa': hold(rec.t_cmd, rec.command_kpa, np.array([ts]))[0].tolist(),
            },
        )
        # the command on the experiment grid from the recorded command itself (exact step time)
        exp.command_kpa = hold(rec.t_cmd, rec.command_kpa, exp.t + ts)
        out.append(exp)
    if not out:
        raise DataError(
            f'{rec.source}: no pressure step of at least {min_duration} s found '
            f'(steps > {threshold_kpa} kPa on {rec.command_topic}); record step commands'
        )
    return out


# ---------------------------------------------------------------- any dynamic trajectory CSV

# The EquiMus trajectory CSVs: a time that restarts at every segment, the commanded pressures
# (Pa) and the two relative joint angles (deg); measured valve pressures (Pa) are optional.
TRAJECTORY_COLUMNS = ('relative_time', 'current_pressure1', 'current_pressure2')
ANGLE_COLUMNS = ('thigh_theta21', 'calf_theta32')
# The authors' segment files without the command log: each segment commands its start pair at
# its first sample, holds it HOLD_S seconds, then commands its end pair (as ToCenter does).
SEGMENT_COLUMNS = (
    'relative_time',
    'pressure1_start',
    'pressure2_start',
    'pressure1_end',
    'pressure2_end',
)
MEASURED_PRESSURE_COLUMNS = (
    ('measured_pressure1', 'measured_pressure2'),
    ('real_pressure1', 'real_pressure2'),
    ('pressure1_measured', 'pressure2_measured'),
)
FILL_S = 1.5  # the fill phase of a segment: its first 1.5 s (the leg settles within ~1.2 s)
PHASES = ('fill', 'hold', 'release')
USABLE_LAYOUTS = (
    'usable CSV layouts: a trajectory (relative_time, current_pressure1, current_pressure2 [Pa], '
    'thigh_theta21, calf_theta32 [deg]), a segment file (relative_time, pressure1_start, '
    'pressure2_start, pressure1_end, pressure2_end [Pa], thigh_theta21, calf_theta32 [deg]) or '
    'a static set (P1 (kPa), P2 (kPa), theta1 (deg), theta2 (deg))'
)


def csv_header(path) -> list[str]:
    try:
        with open(path) as f:
            return [c.strip() for c in f.readline().split(',')]
    except OSError as exc:
        raise DataError(f'{path}: cannot read ({exc})') from exc


def csv_kind(path) -> str:
    """'tocenter', 'trajectory' (any dynamic CSV with its command log), 'segments' (start and end
    pairs only) or 'static', from the header line; DataError (one line, listing the usable
    layouts) for anything else."""
    cols = set(csv_header(path))
    angles = all(c in cols for c in ANGLE_COLUMNS)
    if all(c in cols for c in TOCENTER_COLUMNS):
        return 'tocenter'
    if angles and all(c in cols for c in TRAJECTORY_COLUMNS):
        return 'trajectory'
    if angles and all(c in cols for c in SEGMENT_COLUMNS):
        return 'segments'
    if 'relative_time' not in cols and len(csv_header(path)) == 4:
        return 'static'  # P1 (kPa), P2 (kPa), theta1 (deg), theta2 (deg) by position
    logged = any(c.startswith('current_pressure') for c in cols)
    layout = TRAJECTORY_COLUMNS if logged else SEGMENT_COLUMNS
    missing = [c for c in layout + ANGLE_COLUMNS if c not in cols]
    raise DataError(
        f'{path}: unknown CSV layout, columns missing: {", ".join(missing)} '
        f'(have {", ".join(sorted(c for c in cols if c)) or "none"}); {USABLE_LAYOUTS}'
    )


def segment_phases(t: np.ndarray, command: np.ndarray) -> list[tuple[str, float, float]]:
    """(phase, t0, t1) of one segment: fill = its first FILL_S s, hold = until the command
    changes, release = from there to the end (the authors' releases are this part)."""
    moved = np.flatnonzero(np.any(np.abs(command - command[0]) > 1e-9, axis=1))
    t_rel = float(t[moved[0]]) if len(moved) else float(t[-1]) + 1e-9
    end = float(t[-1]) + 1e-9
    fill_end = min(FILL_S, t_rel)
    return [('fill', 0.0, fill_end), ('hold', fill_end, t_rel), ('release', t_rel, end)]


def load_trajectory_csv(
    path, rate: float = RATE_HZ, min_duration: float = 0.2, hold_s: float = HOLD_S
) -> list[Experiment]:
    """Every segment of a dynamic CSV (relative_time restarts per segment) as one experiment
    from the segment's first sample to its last, on a `rate` grid, against the raw angles.

    The command is the logged one (current_pressure1/2), or for a segment file (start and end
    pairs only) the start pair from the segment's first sample and the end pair from hold_s on.
    The valve starts at the previous segment's last command (the rig is logged continuously;
    ToCenter groups start from the vented rest), the first segment at its first command; measured
    pressures, when the file has them, are kept in Experiment.pressure_kpa for replay through
    `--pressure measured`. Segments with start and end pairs get meta['phases']
    (`segment_phases`) and meta['pair'] (the start pair, kPa).
    """
    path = pathlib.Path(path)
    kind = csv_kind(path)
    if kind == 'static':
        raise DataError(f'{path}: a static set, not a dynamic CSV; {USABLE_LAYOUTS}')
    d = _read_named_csv(path)
    names = d.dtype.names or ()
    meas = next((c for c in MEASURED_PRESSURE_COLUMNS if all(x in names for x in c)), None)
    pairs = all(c in names for c in SEGMENT_COLUMNS)
    t = np.asarray(d['relative_time'], float)
    cuts = np.r_[0, np.where(np.diff(t) < 0)[0] + 1, len(d)]
    out = []
    prev = None
    for k, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
        g = d[a:b]
        tg = g['relative_time'] - g['relative_time'][0]
        if kind == 'segments':
            start = np.array([g['pressure1_start'][0], g['pressure2_start'][0]])
            end = np.array([g['pressure1_end'][0], g['pressure2_end'][0]])
            cmd = np.where((tg < hold_s - 1e-9)[:, None], start, end) / 1e3
        else:
            cmd = np.stack([g['current_pressure1'], g['current_pressure2']], 1) / 1e3
        p0, prev = (cmd[0] if prev is None else prev), cmd[-1]
        if len(g) < 3 or tg[-1] < min_duration:
            continue
        q = np.deg2rad(np.stack([g[ANGLE_COLUMNS[0]], g[ANGLE_COLUMNS[1]]], 1))
        if not (np.all(np.isfinite(cmd)) and np.all(np.isfinite(q))):
            raise DataError(f'{path}: segment {k} has non-numeric pressures or angles')
        meta: dict = {'source': str(path), 'segment': k}
        if pairs:
            meta['start_kpa'] = [g['pressure1_start'][0] / 1e3, g['pressure2_start'][0] / 1e3]
            meta['end_kpa'] = [g['pressure1_end'][0] / 1e3, g['pressure2_end'][0] / 1e3]
            meta['pair'] = tuple(float(round(v, 6)) for v in meta['start_kpa'])
        e = prepare(
            tg,
            q,
            cmd,
            0.0,
            float(tg[-1]),
            rate,
            SMOOTH_SAMPLES,
            p0,
            name=f'{path.stem}#{k}',
            meta=meta,
            target='raw',
        )
        e.command_kpa = hold(tg, cmd, e.t)
        if pairs:
            e.meta['phases'] = segment_phases(e.t, e.command_kpa)
        if meas is not None:
            pm = np.stack([g[meas[0]], g[meas[1]]], 1) / 1e3
            e.pressure_kpa = resample(tg, pm, e.t)
            e.p0_kpa = e.pressure_kpa[0].copy()
        out.append(e)
    if not out:
        raise DataError(f'{path}: no segment of at least {min_duration} s')
    return out


def continuous(exps: Sequence[Experiment], name: str | None = None) -> Experiment:
    """Segments of one recording end to end as one experiment (one open-loop replay from the
    first measured state: the authors' protocol). Each segment starts one sample after the
    previous one's last; meta['segments'] has their start times, meta['phases'] their phases
    on the joined time axis, meta['segment_names'] their names."""
    if not exps:
        raise DataError('no segments to join')
    dt = exps[0].dt
    if any(abs(e.dt - dt) > 1e-9 for e in exps):
        raise DataError('segments on different time grids cannot be joined')
    offsets = np.cumsum([0] + [len(e) for e in exps[:-1]]) * dt
    phases = [
        (ph, float(o + a), float(o + b), e.name)
        for e, o in zip(exps, offsets, strict=True)
        for ph, a, b in e.meta.get('phases', ())
    ]
    have_p = all(e.pressure_kpa is not None for e in exps)
    return Experiment(
        name=name or exps[0].name.split('#')[0],
        t=np.arange(sum(len(e) for e in exps)) * dt,
        q=np.concatenate([e.q for e in exps]),
        qd=np.concatenate([e.qd for e in exps]),
        command_kpa=np.concatenate([e.command_kpa for e in exps]),
        p0_kpa=exps[0].p0_kpa.copy(),
        meta={
            'source': exps[0].meta.get('source', ''),
            'segments': [float(o) for o in offsets],
            'segment_names': [e.name for e in exps],
            'phases': phases,
            'continuous': True,
        },
        q_start=np.concatenate([e.start_q for e in exps]),
        pressure_kpa=(
            np.concatenate([e.pressure_kpa for e in exps if e.pressure_kpa is not None])
            if have_p
            else None
        ),
    )


STATIC_STARTS = ('measured', 'rest')


def static_experiments(
    s: StaticSet, duration: float = 3.0, rate: float = RATE_HZ, start: str = 'measured'
) -> list[Experiment]:
    """Each equilibrium as a constant-pressure hold, scored on where the model comes to rest.

    start 'measured': the model starts at the measured pose with the valve settled at the
    measured pressures. 'rest': as the ToCenter session reached them (Set B is its hold phase),
    from the set's vented rest pose (its 0/0 row, else its first) with the valve at 0 kPa,
    filled to the pair at t = 0 — with dry friction the rest angle depends on where the leg came
    from, and a hold started at the measured pose would simply stay there.
    """
    if start not in STATIC_STARTS:
        raise ValueError(f'start must be one of {STATIC_STARTS}, got {start!r}')
    n = int(round(duration * rate)) + 1
    t = np.arange(n) / rate
    vented = np.flatnonzero(np.all(s.pressures_kpa == 0.0, axis=1))
    q_rest = s.q[vented[0] if len(vented) else 0]
    out = []
    for i, (p, q) in enumerate(zip(s.pressures_kpa, s.q, strict=True)):
        from_rest = start == 'rest'
        out.append(
            Experiment(
                name=f'{s.name or "static"}[{i}] P{p[0]:g}-{p[1]:g}',
                t=t,
                q=np.repeat(q[None, :], n, axis=0),
                qd=np.zeros((n, 2)),
                command_kpa=np.repeat(np.asarray(p, float)[None, :], n, axis=0),
                p0_kpa=np.zeros(2) if from_rest else np.asarray(p, float).copy(),
                meta={
                    'static': True,
                    'set': s.name,
                    'index': i,
                    'pressure_kpa': list(map(float, p)),
                    'pair': tuple(float(round(v, 6)) for v in p),
                    'start': start,
                },
                q_start=np.repeat(q_rest[None, :], n, axis=0) if from_rest else None,
            )
        )
    return out


def bag_trajectory(rec: Recording, rate: float = BAG_RATE_HZ, threshold_kpa: float = 0.5):
    """A whole bag as one experiment (for open-loop replay), with its step times as segments."""
    t0 = max(rec.t_q[0], rec.t_cmd[0])
    t1 = rec.t_q[-1]
    if t1 - t0 < 3.0 / rate:
        raise DataError(f'{rec.source}: joint states and valve commands overlap for < 3 samples')
    e = _bag_experiment(rec, t0, t1, rate, pathlib.Path(rec.source).name, {'source': rec.source})
    steps = step_times(rec, threshold_kpa) - t0
    e.meta['segments'] = [0.0] + [float(s) for s in steps if 0.0 < s < e.t[-1]]
    return e


def gap_free_windows(
    rec: Recording, t0: float, t1: float, max_gap: float = 0.1, min_len: float = 1.0
) -> list[tuple[float, float]]:
    """The stretches of [t0, t1) in which no joint state, command or measured pressure is
    missing for longer than `max_gap` s (a loaded machine's recorder drops messages), each at
    least `min_len` s long."""
    gaps: list[tuple[float, float]] = []
    for t in (rec.t_q, rec.t_cmd, rec.t_p):
        if t is None:
            continue
        t = t[(t >= t0) & (t < t1)]
        d = np.diff(t)
        gaps += [
            (float(a), float(a + g))
            for a, g in zip(t[:-1][d > max_gap], d[d > max_gap], strict=True)
        ]
    out, start = [], t0
    for a, b in sorted(gaps):
        if a - start >= min_len:
            out.append((start, a))
        start = max(start, b)
    if t1 - start >= min_len:
        out.append((start, t1))
    return out


def bag_window(rec: Recording, t0: float, t1: float, rate: float = BAG_RATE_HZ) -> Experiment:
    """[t0, t1) of a recording as one experiment (raw angles, local-cubic restart states),
    with the measured pressures on its grid when recorded."""
    return _bag_experiment(
        rec,
        t0,
        t1,
        rate,
        f'{pathlib.Path(rec.source).name}@{t0:.2f}s',
        {'source': rec.source, 't0': float(t0)},
    )


def _bag_experiment(
    rec: Recording, t0: float, t1: float, rate: float, name: str, meta: dict
) -> Experiment:
    """[t0, t1) of a recording resampled at `rate` (raw angles, the commands held, the measured
    pressures when recorded): what a whole bag and a window of one are made of."""
    e = prepare(
        rec.t_q,
        rec.q,
        hold(rec.t_cmd, rec.command_kpa, rec.t_q),
        t0,
        t1 - t0,
        rate,
        SMOOTH_SAMPLES,
        hold(rec.t_cmd, rec.command_kpa, np.array([t0]))[0],
        name=name,
        meta=meta,
        target='raw',
    )
    e.command_kpa = hold(rec.t_cmd, rec.command_kpa, e.t + t0)
    if rec.t_p is not None and len(rec.t_p) >= 2:
        e.pressure_kpa = resample(rec.t_p, rec.pressure_kpa, e.t + t0)
        e.p0_kpa = e.pressure_kpa[0].copy()
        near = (rec.t_p >= t0 - SERIES_MARGIN_S) & (rec.t_p <= t1 + SERIES_MARGIN_S)
        e.pressure_series = (rec.t_p[near] - t0, np.asarray(rec.pressure_kpa, float)[near])
    return e


TOCENTER_MODES = ('segments', 'releases')


def load_any(
    paths: Iterable,
    groups='effective',
    duration: float = DURATION_S,
    bags: str = 'steps',
    tocenter: str = 'segments',
) -> dict:
    """Sort inputs into {'static': [StaticSet], 'dynamic': [Experiment]} by what they contain.

    bags: 'steps' cuts a bag at every command jump (step experiments); 'whole' keeps it as one
    experiment (for ramped excitation such as `equimus excite`'s, where every ramp sample is a
    jump; the multiple-shooting loss cuts it into segments anyway).
    tocenter: 'segments' = every sample of every segment of a ToCenter file (fill, hold and
    release; all 36 groups), 'releases' = the authors' prepared releases (`load_tocenter`:
    `groups`, `duration` s after the release, 11-sample moving average).
    """
    if bags not in ('steps', 'whole'):
        raise ValueError(f"bags must be 'steps' or 'whole', got {bags!r}")
    if tocenter not in TOCENTER_MODES:
        raise ValueError(f'tocenter must be one of {TOCENTER_MODES}, got {tocenter!r}')
    out: dict[str, list] = {'static': [], 'dynamic': []}
    for p in paths:
        p = pathlib.Path(p)
        if p.is_dir() or p.suffix == '.mcap':
            bag = bag_folder(p)
            if bags == 'whole':
                out['dynamic'].append(bag_trajectory(load_bag(bag)))
                continue
            out['dynamic'] += segment_steps(load_bag(bag), max_duration=duration, name=bag.name)
        elif p.suffix == '.csv':
            kind = csv_kind(p)
            if kind == 'tocenter' and tocenter == 'releases':
                out['dynamic'] += load_tocenter(p, groups=groups, duration=duration)
            elif kind != 'static':
                out['dynamic'] += load_trajectory_csv(p)
            else:
                out['static'].append(load_static_csv(p))
        else:
            raise DataError(f'{p}: not a rosbag2 folder, .mcap file or EquiMus CSV')
    return out
