"""Soak analysis (no ROS imports): board output timeline, cycle/latency alignment, RSS slopes.

Everything here works on plain records so it can be tested without running a graph:
- board log events (the DAC board emulator's JSON lines) -> the valve setpoint codes over time;
- mocap send times and /valve/command arrival times -> which frames got a command (missed
  cycles), mocap->command and mocap->serial-bytes latency, command inter-arrival at the board;
- /proc samples -> CPU share and RSS growth per minute.
All times are seconds on the monotonic clock (CLOCK_MONOTONIC is shared by every process).
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


# ------------------------------------------------------------------------------ board timeline
@dataclass
class BoardTimeline:
    """The board's output codes over time: one entry per SET, vent or unplug event."""

    t: list[float]
    codes: list[tuple[int, ...]]
    sets: list[tuple[float, tuple[int, ...], bool]]  # every decoded SET: (t, codes, accepted)
    watchdog_vents: list[float]
    rejections: list[float]
    loop_gaps: list[tuple[float, float]] = field(default_factory=list)  # (t, s the loop stood)

    def __post_init__(self):
        self.set_t = [s[0] for s in self.sets]

    @classmethod
    def from_log(cls, path: str, channels: int) -> BoardTimeline:
        zero = (0,) * channels
        events: list[tuple[float, tuple[int, ...]]] = []
        sets, wd, rej, gaps = [], [], [], []
        with open(path) as fh:
            for line in fh:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue  # a line cut short when the soak stopped
                kind, t = e.get('event'), e.get('t')
                if kind == 'set':
                    codes = tuple(e['codes'])
                    sets.append((t, codes, bool(e['accepted'])))
                    events.append((t, codes if e['accepted'] else zero))
                elif kind == 'watchdog_vent':
                    wd.append(t)
                    events.append((t, zero))
                elif kind == 'unpowered':  # unplugged: the setpoint wires read 0 V
                    events.append((t, zero))
                elif kind == 'rejected':
                    rej.append(t)
                    events.append((t, zero))  # the firmware vents on a bad frame
                elif kind == 'loop_gap':
                    gaps.append((t, float(e['gap'])))
        events.sort(key=lambda x: x[0])
        return cls([e[0] for e in events], [e[1] for e in events], sets, wd, rej, gaps)

    def stood(self, a: float, b: float) -> float:
        """The longest time the emulated board's loop did not run, in gaps overlapping [a, b]:
        an event it logged then is late by up to that much, through no fault of the host."""
        return max((g for t, g in self.loop_gaps if t - g <= b and t >= a), default=0.0)

    def codes_at(self, t: float) -> tuple[int, ...]:
        i = bisect.bisect_right(self.t, t) - 1
        return self.codes[i] if i >= 0 else (0,) * (len(self.codes[0]) if self.codes else 2)

    def vented_from(self, t_from: float, t_to: float) -> float | None:
        """Earliest time in [t_from, t_to] from which every output is 0 up to t_to, else None."""
        i = bisect.bisect_right(self.t, t_to) - 1
        if i >= 0 and any(self.codes[i]):
            return None
        while i >= 0 and self.t[i] > t_from and not any(self.codes[i]):
            i -= 1
        if i >= 0 and any(self.codes[i]):
            return max(self.t[i + 1], t_from)
        return t_from

    def nonzero_after(self, t_from: float, t_to: float) -> float | None:
        """First accepted SET in [t_from, t_to] with a non-zero code."""
        i = bisect.bisect_left(self.set_t, t_from)
        for t, codes, ok in self.sets[i:]:
            if t > t_to:
                break
            if ok and any(codes):
                return t
        return None

    def sets_between(self, a: float, b: float) -> list[tuple[float, tuple[int, ...], bool]]:
        return self.sets[bisect.bisect_left(self.set_t, a) : bisect.bisect_left(self.set_t, b)]

    def longest_unrefreshed_output(
        self, exclude: Sequence[tuple[float, float]] = ()
    ) -> tuple[float, float]:
        """(seconds, at) of the longest time a non-zero output stood without a newer event.

        A board that vents on its watchdog keeps this at most its watchdog time (+ its loop
        period); `exclude` lists windows (e.g. an injected firmware stall) not counted.
        """
        worst, at = 0.0, 0.0
        for i in range(len(self.t) - 1):
            if not any(self.codes[i]):
                continue
            a, b = self.t[i], self.t[i + 1]
            if any(x0 <= a <= x1 or x0 <= b <= x1 for x0, x1 in exclude):
                continue
            if b - a > worst:
                worst, at = b - a, a
        return worst, at


# ------------------------------------------------------------------------------ cycles / latency
def percentiles_ms(values: Sequence[float]) -> dict[str, float]:
    if not len(values):
        return {'p50': math.nan, 'p99': math.nan, 'max': math.nan, 'n': 0}
    a = np.asarray(values, float) * 1e3
    return {
        'p50': float(np.percentile(a, 50)),
        'p99': float(np.percentile(a, 99)),
        'max': float(a.max()),
        'n': int(a.size),
    }


def align_commands(
    frames: Sequence[float],
    commands: Sequence[float],
    window: tuple[float, float],
    max_latency: float = 0.1,
) -> dict[int, int]:
    """Map commands to the mocap frames that caused them, inside one fault-free window.

    Each frame makes at most one command and commands come out in frame order, so: give each
    command the latest frame sent before it, then walk backwards making the frame indices
    strictly increasing (a command that arrived after the next frame was sent was late, not
    early). Commands further than `max_latency` from their frame are left out.
    Returns {frame index: command index}.
    """
    a, b = window
    f0 = bisect.bisect_left(frames, a)
    f1 = bisect.bisect_left(frames, b)
    if f1 <= f0:
        return {}
    c0 = bisect.bisect_left(commands, frames[f0])
    c1 = bisect.bisect_left(commands, frames[f1 - 1] + max_latency)
    idx = list(range(c0, c1))
    assign = [bisect.bisect_left(frames, commands[j]) - 1 for j in idx]
    for k in range(len(assign) - 2, -1, -1):
        assign[k] = min(assign[k], assign[k + 1] - 1)
    out: dict[int, int] = {}
    for j, fi in zip(idx, assign, strict=True):
        if f0 <= fi < f1 and 0 < commands[j] - frames[fi] <= max_latency:
            out[fi] = j
    return out


def expected_codes(values: Sequence[float], to_code, max_kpa: float = 50.0) -> tuple[int, ...]:
    """What the driver puts on the wire for a command when its slew limit does not bind."""
    out = []
    for v in values:
        v = float(v)
        out.append(0 if not math.isfinite(v) else to_code(min(max(v, 0.0), max_kpa)))
    return tuple(out)


# ------------------------------------------------------------------------------ /proc sampling
def udp_receive_buffer_drops(snmp: str | None = None) -> int | None:
    """UDP datagrams this host dropped because a socket's receive buffer was full (Linux's
    `RcvbufErrors` in /proc/net/snmp), or None where it cannot be read. The graph's DDS runs
    over UDP on the loopback: a reliable reader that lost a datagram this way gets it again only
    at its writer's next heartbeat, and hands on nothing newer until then. `snmp`: the file's
    text (read here when None)."""
    if snmp is None:
        try:
            with open('/proc/net/snmp') as fh:
                snmp = fh.read()
        except OSError:
            return None
    rows = [line.split() for line in snmp.splitlines() if line.startswith('Udp:')]
    if len(rows) < 2 or 'RcvbufErrors' not in rows[0]:
        return None
    try:
        return int(rows[1][rows[0].index('RcvbufErrors')])
    except (IndexError, ValueError):
        return None


def read_proc(pid: int) -> tuple[float, float] | None:
    """(CPU seconds used, RSS MB) of a process, or None if it is gone."""
    import os

    try:
        with open(f'/proc/{pid}/stat') as fh:
            stat = fh.read()
        fields = stat[stat.rindex(')') + 2 :].split()
        tck = os.sysconf('SC_CLK_TCK')
        cpu = (int(fields[11]) + int(fields[12])) / tck
        with open(f'/proc/{pid}/status') as fh:
            for line in fh:
                if line.startswith('VmRSS:'):
                    return cpu, int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def read_run_delay(pid: int) -> dict[int, tuple[int, int]] | None:
    """Per thread of the process: (ns waited on a run queue, times run) since it started, the
    kernel's own scheduling figures (/proc/<pid>/task/*/schedstat); None if it is gone."""
    import os

    out: dict[int, tuple[int, int]] = {}
    try:
        tasks = os.listdir(f'/proc/{pid}/task')
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f'/proc/{pid}/task/{tid}/schedstat') as fh:
                _, waited, runs = fh.read().split()[:3]
            out[int(tid)] = (int(waited), int(runs))
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
    return out


def wait_per_wake(a: dict[int, tuple[int, int]], b: dict[int, tuple[int, int]]) -> float:
    """Seconds a thread of the process waited on a run queue per time it was woken, between
    two `read_run_delay` samples: the most of any thread (the one on the critical path is
    at most that late each time it is woken)."""
    worst = 0.0
    for tid, (w1, r1) in b.items():
        w0, r0 = a.get(tid, (0, 0))
        if r1 > r0:
            worst = max(worst, (w1 - w0) / (r1 - r0) / 1e9)
    return worst


def rss_slope_mb_per_min(samples: Sequence[tuple[float, float]]) -> float:
    """Least-squares RSS growth (MB per minute) of (t_s, rss_mb) samples."""
    if len(samples) < 5:
        return math.nan
    t = np.array([s[0] for s in samples]) / 60.0
    r = np.array([s[1] for s in samples])
    if t[-1] - t[0] <= 0:
        return math.nan
    return float(np.polyfit(t, r, 1)[0])
