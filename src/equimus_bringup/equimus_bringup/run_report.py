"""Tracking summary and plot of a recorded run, read from its bag (no ROS imports)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from equimus_description.interface import (
    ACTUATORS,
    JOINT_STATES,
    JOINTS,
    REFERENCE,
    SIM_JOINT_STATES,
    VALVE_APPLIED,
    VALVE_COMMAND,
    VALVE_PRESSURE,
)
from equimus_description.valve import HARD_MAX_KPA, P_MIN_KPA
from equimus_record import bag as bagio

JS, TRUTH, REF = JOINT_STATES.name, SIM_JOINT_STATES.name, REFERENCE.name
CMD, APPLIED, PRESSURE = VALVE_COMMAND.name, VALVE_APPLIED.name, VALVE_PRESSURE.name


@dataclass
class Series:
    t: np.ndarray
    values: np.ndarray  # (n, k)


def _stamp(msg, log_ns: int) -> float:
    h = getattr(msg, 'header', None)
    if h is not None and (h.stamp.sec or h.stamp.nanosec):
        return h.stamp.sec + h.stamp.nanosec * 1e-9
    return log_ns * 1e-9


def load_series(bag_path: Path) -> dict[str, Series]:
    """The topics a tracking report needs, as time series (seconds, header stamps when present)."""
    wanted = {
        JS: 'position',
        TRUTH: 'position',
        REF: 'position',
        CMD: 'data',
        PRESSURE: 'effort',  # stamped pressures (bagio.pressures also reads older array bags)
        APPLIED: 'effort',
    }
    rows: dict[str, list] = {k: [] for k in wanted}
    for topic, log_ns, msg in bagio.read_messages(bag_path, list(wanted)):
        field = wanted[topic]
        vals = np.asarray(
            bagio.pressures(msg) if field == 'effort' else getattr(msg, field), dtype=float
        )
        if vals.size:
            rows[topic].append((_stamp(msg, log_ns), vals))
    out = {}
    for topic, r in rows.items():
        if r:
            width = min(len(v) for _, v in r)
            out[topic] = Series(np.array([t for t, _ in r]), np.array([v[:width] for _, v in r]))
    return out


@dataclass
class Summary:
    duration: float
    rmse: dict[str, float] = field(default_factory=dict)
    maxae: dict[str, float] = field(default_factory=dict)
    estimator_rmse: dict[str, float] = field(default_factory=dict)
    #: Share of the tracked samples with no valid joint state (NaN: tracking lost, or nothing
    #: came for longer than the estimator holds); the RMSE and MaxAE are over the others.
    invalid: dict[str, float] = field(default_factory=dict)
    pressure_max: float = float('nan')
    pressure_min: float = float('nan')
    counts: dict[str, int] = field(default_factory=dict)

    def table(self) -> str:
        lines = [f'run length (sim time): {self.duration:.2f} s']
        lines.append(
            f'{"joint":6s} {"tracking RMSE":>14s} {"tracking MaxAE":>15s} {"estimator RMSE":>15s}'
        )
        for j in JOINTS:
            est = self.estimator_rmse.get(j)
            est_txt = f'{est:12.5f} rad' if est is not None else '   n/a (no ground truth)'
            lines.append(
                f'{j:6s} {self.rmse.get(j, np.nan):11.4f} rad '
                f'{self.maxae.get(j, np.nan):12.4f} rad {est_txt}'
            )
        bad = {j: v for j, v in self.invalid.items() if v > 0}
        if bad:
            lines.append(
                'no valid joint state in '
                + ', '.join(f'{100 * v:.1f} % of the {j} samples' for j, v in bad.items())
                + ' (estimator NaN: mocap tracking lost, or the graph stalled); the errors above '
                'leave them out'
            )
        lines.append(
            f'valve commands: {self.pressure_min:.2f} .. {self.pressure_max:.2f} kPa '
            f'(hard limit {P_MIN_KPA:g} .. {HARD_MAX_KPA:g} kPa)'
        )
        lines.append('messages: ' + ', '.join(f'{k} {v}' for k, v in sorted(self.counts.items())))
        return '\n'.join(lines)


def summarize(series: dict[str, Series], settle: float = 0.0) -> Summary:
    """Tracking error of the true joint angles (sim) or the estimate (hardware) vs the reference."""
    truth = series.get(TRUTH) or series.get(JS)
    ref = series.get(REF)
    if truth is None or ref is None:
        missing = ([f'{TRUTH} or {JS}'] if truth is None else []) + ([REF] if ref is None else [])
        raise bagio.BagError(f'the bag lacks {", ".join(missing)}: was the whole graph running?')
    t0 = max(truth.t[0], ref.t[0]) + settle
    mask = truth.t >= t0
    s = Summary(duration=float(truth.t[-1] - truth.t[0]))
    for i, j in enumerate(JOINTS):
        r = np.interp(truth.t[mask], ref.t, ref.values[:, i])
        e = truth.values[mask, i] - r
        ok = np.isfinite(e)
        s.invalid[j] = float(1.0 - ok.mean()) if e.size else 0.0
        s.rmse[j] = float(np.sqrt(np.mean(e[ok] ** 2))) if ok.any() else float('nan')
        s.maxae[j] = float(np.max(np.abs(e[ok]))) if ok.any() else float('nan')
    est = series.get(JS)
    if est is not None and TRUTH in series:
        # Only where both were recorded (the recorder may discover the topics at different times).
        inside = (est.t >= truth.t[0]) & (est.t <= truth.t[-1])
        for i, j in enumerate(JOINTS):
            tr = np.interp(est.t, truth.t, truth.values[:, i])
            ok = inside & np.isfinite(est.values[:, i])
            s.estimator_rmse[j] = float(np.sqrt(np.mean((est.values[ok, i] - tr[ok]) ** 2)))
    cmd = series.get(CMD)
    if cmd is not None:
        s.pressure_max = float(np.nanmax(cmd.values))
        s.pressure_min = float(np.nanmin(cmd.values))
    s.counts = {k: len(v.t) for k, v in series.items()}
    return s


def plot(series: dict[str, Series], path: Path, title: str = '') -> Path:
    """Reference vs measured joint angles and the valve pressures, one PNG."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    t0 = min(v.t[0] for v in series.values())
    styles = {
        REF: ('reference', 'k--'),
        TRUTH: ('true (sim)', 'C0-'),
        JS: ('estimated (mocap)', 'C1:'),
    }
    for i, j in enumerate(JOINTS):
        ax = axes[i]
        for topic, (label, style) in styles.items():
            if topic in series:
                ax.plot(
                    series[topic].t - t0,
                    np.degrees(series[topic].values[:, i]),
                    style,
                    label=label,
                    lw=1.2,
                )
        ax.set_ylabel(f'θ{i + 1} {j} (deg)')
        ax.grid(alpha=0.3)
        ax.legend(loc='best', fontsize=8)
    ax = axes[2]
    for topic, style in ((CMD, '-'), (PRESSURE, ':')):
        if topic in series:
            for k, name in enumerate(a.upper() for a in ACTUATORS):
                ax.plot(
                    series[topic].t - t0,
                    series[topic].values[:, k],
                    f'C{k}{style}',
                    label=f'{name} {topic.rsplit("/", 1)[-1]}',
                    lw=1.2,
                )
    ax.axhline(HARD_MAX_KPA, color='r', lw=0.8, alpha=0.5)
    ax.set_ylabel('pressure (kPa)')
    ax.set_xlabel('time (s)')
    ax.grid(alpha=0.3)
    ax.legend(loc='best', fontsize=8, ncol=2)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def report(
    bag_path: Path, plot_path: Path | None = None, title: str = '', settle: float = 0.0
) -> Summary:
    series = load_series(bag_path)
    s = summarize(series, settle=settle)
    if plot_path is not None:
        plot(series, plot_path, title)
    return s


def video(bag_path: Path, path: Path, fps: float | None = None) -> Path:
    """An mp4 of the run from its bag: the leg model posed at the recorded joint angles (the
    simulator's truth when recorded, else the estimate), `fps` frames per second of sim time."""
    import mujoco

    from equimus_sim.leg_model import LegModel
    from equimus_sim.render import RENDER_FPS, FrameRenderer, write_video

    fps = fps or RENDER_FPS
    series = load_series(bag_path)
    s = series.get(TRUTH) or series.get(JS)
    if s is None or len(s.t) < 2:
        raise ValueError(f'{bag_path}: no joint states to film')
    lm = LegModel()
    data = mujoco.MjData(lm.model)
    renderer = FrameRenderer(lm.model)
    times = np.arange(s.t[0], s.t[-1], 1.0 / fps)
    q = np.column_stack([np.interp(times, s.t, s.values[:, j]) for j in range(s.values.shape[1])])

    def frames():
        for row in q:
            lm.reset(data, row[: len(JOINTS)])
            yield renderer.render(data)

    try:
        return write_video(path, frames(), fps)
    finally:
        renderer.close()
