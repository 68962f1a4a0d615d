"""`equimus check rig`: the commissioning check a lab runs before every session on the real leg.

    equimus check rig serial_port:=/dev/ttyACM0 natnet_server:=192.168.42.2 natnet_local:=...

It takes the hardware graph's launch arguments that concern the rig (graph.RIG_ARGUMENTS) and
reads the same parameter files, so it checks what `hardware.launch.py` with those arguments runs:

1. Motive: it answers, its version and NatNet version decode, every configured rigid body is
   streamed and tracked, the frame rate is the estimator's, latency and dropped frames are low,
   and the calf hangs below the base along the configured up axis.
2. Estimator: the joint angles of the leg as it rests are inside the controller's safe range.
3. Board: it answers HELLO with the configured channels, DAC and firmware protocol; its round
   trip; no corrupted frames; its watchdog vents an output left without a SET.
4. Valves, one at a time, the other vented, while the leg's pose is watched (leaving the safe
   range or losing the motion capture vents and stops): 10, 20, 30, 40 kPa and each read back
   from the valve's actual-value output; each channel's gain, offset, dead time, time constants
   and t90; 25 kPa with the new calibration; vent. With every valve passed, the calibration file
   is written (calibration:=, default graph's), which the hardware graph's valve driver loads.

One report: the lines on stdout, the same in DIR/report.txt with DIR/rig_check.png (each valve's
steps and its fit) and DIR/valve_steps.csv (every read-back of every step; the report lists each
step's t10, t50 and overshoot). Exit 0 when every check passed; 2 otherwise, each failure one
line on stderr.
Only this program may drive the board meanwhile: it opens the port exclusively.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from equimus_bringup import prestart
from equimus_bringup.graph import (
    BOARD_TIMEOUT_RANGE_S,
    HOLD_RANGE_S,
    MOCAP_TIMEOUT_RANGE_S,
    NO_CALIBRATION,
    RIG_ARGUMENTS,
    describe_graph,
    resolve_args,
)
from equimus_description.interface import ACTUATORS
from equimus_description.motive import NAN_POSE, motive_to_ros

#: s the stream is watched for its rate, latency, drops and tracking.
MOTIVE_S = 2.0
#: Rate off the estimator's nominal one by more than this fraction: the estimator is misled.
RATE_TOLERANCE = 0.1
#: Frames lost on the way (frame-number gaps) above this fraction.
MAX_DROPPED = 0.02
#: Median latency (mid-exposure to arrival) above this, s: something between Motive and this PC
#: queues the frames.
MAX_LATENCY_S = 0.05
#: A configured body tracked in fewer frames than this fraction.
MIN_TRACKED = 0.95
#: s without a mocap frame while a valve is stepped: the pose is no longer watched, the valve
#: is vented and its test stopped (the default of --mocap-timeout).
STALE_S = 0.25


class CheckError(RuntimeError):
    """A check failed; str() is its one line."""


@dataclasses.dataclass
class Item:
    section: str
    ok: bool | None  # None: not run
    text: str


class Report:
    """The check's lines, printed as they come; each failure also one line on stderr."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.notes: list[str] = []

    def add(self, section: str, ok: bool | None, text: str) -> None:
        self.items.append(Item(section, ok, text))
        mark = {True: 'PASS', False: 'FAIL', None: 'SKIP'}[ok]
        print(f'{section:11s} {mark}  {text}', flush=True)
        if ok is False:
            print(f'equimus check rig: {section}: {text}', file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(text, flush=True)

    def passed(self, section: str) -> bool:
        return any(i.section == section and i.ok for i in self.items)

    @property
    def failed(self) -> bool:
        return any(i.ok is False for i in self.items)

    def text(self) -> str:
        mark = {True: 'PASS', False: 'FAIL', None: 'SKIP'}
        lines = [f'{i.section:11s} {mark[i.ok]}  {i.text}' for i in self.items]
        return '\n'.join([*lines, *self.notes]) + '\n'


@dataclasses.dataclass
class RigConfig:
    """What the hardware graph's nodes would run with, from its parameter files."""

    args: dict[str, str]
    natnet: Any  # NatNetConfig
    bridge: Any  # BridgeConfig
    driver: Any  # DriverConfig
    estimator: Any  # EstimatorParams
    safety: Any  # SafetyConfig


def rig_config(overrides: Mapping[str, str]) -> RigConfig:
    """The hardware graph's configuration for these arguments; prestart.StartError (one line)
    for an unknown argument or a bad parameter file."""
    from equimus_control.estimator_node import EstimatorParams
    from equimus_control.supervisor import SafetyConfig
    from equimus_hw.natnet.bridge_node import BridgeConfig
    from equimus_hw.natnet.client import NatNetConfig
    from equimus_hw.valve.config import DriverConfig
    from equimus_ros.params import configured

    unknown = sorted(set(overrides) - set(RIG_ARGUMENTS))
    if unknown:
        raise prestart.StartError(
            f'{unknown[0]}:= is not an argument of the rig check (it takes '
            f'{", ".join(RIG_ARGUMENTS)})'
        )
    try:
        args = resolve_args('hardware', dict(overrides))
        specs = describe_graph('hardware', {**overrides, 'bag': args['bag']})
    except ValueError as exc:
        raise prestart.StartError(str(exc)) from None
    prestart.check_parameters(specs, args)
    spec = {s.name: s for s in specs}

    def values(node: str) -> dict[str, Any]:
        return prestart.node_values(spec[node], node)

    try:
        return RigConfig(
            args,
            configured(NatNetConfig(), values('natnet_bridge')),
            configured(BridgeConfig(), values('natnet_bridge')),
            configured(DriverConfig(), values('valve_driver')),
            configured(EstimatorParams(), values('estimator')),
            configured(SafetyConfig(), values('controller')),
        )
    except ValueError as exc:
        raise prestart.StartError(str(exc)) from None


# --------------------------------------------------------------------------- Motive


@dataclasses.dataclass
class Seen:
    """One frame as the check saw it."""

    arrival: float  # s, monotonic
    number: int
    stamp: float  # s, Motive's own frame timestamp (its camera clock)
    latency: float  # s, mid-exposure to arrival
    tracked: frozenset[str]
    q: np.ndarray | None  # joint angles (rad), None when not all bodies were tracked
    up: dict[str, float]  # each body's height along the up axis (m)


class Mocap:
    """The NatNet stream in a thread of its own, each frame through the estimator's geometry."""

    def __init__(self, cfg: RigConfig) -> None:
        from equimus_control.estimation import JointStateEstimator
        from equimus_hw.natnet.checks import topic_token
        from equimus_hw.natnet.client import NatNetClient

        self.cfg = cfg
        self.client = NatNetClient.from_config(cfg.natnet, on_frame=self._on_frame)
        self.token = topic_token
        self.bodies, _, joints = cfg.estimator.bodies_and_joints()
        self.estimator = JointStateEstimator(cfg.estimator.estimator(joints))
        self.frames: collections.deque[Seen] = collections.deque(maxlen=100_000)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def connect(self, timeout: float) -> Any:
        self.client.open()
        return self.client.connect(timeout)

    def start(self) -> None:
        def run() -> None:
            while not self._stop.is_set():
                self.client.poll(0.05)

        self._thread = threading.Thread(target=run, name='rig_check_natnet', daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self.client.close()

    def _on_frame(self, ev: Any) -> None:
        up_axis = self.cfg.bridge.up_axis
        poses = {}
        for b in ev.bodies:
            if b.tracking_valid:
                poses[self.token(b.name)] = motive_to_ros(b.position, b.orientation, up_axis)
        q = self.estimator.measure([poses.get(name, NAN_POSE) for name in self.bodies])
        seen = Seen(
            time.monotonic(),
            ev.frame.frame_number,
            ev.frame.timestamp,
            ev.exposure_age_s,
            frozenset(poses),
            q,
            {name: pose[0][2] for name, pose in poses.items()},
        )
        with self._lock:
            self.frames.append(seen)

    def since(self, t: float) -> list[Seen]:
        with self._lock:
            return [f for f in self.frames if f.arrival >= t]

    def latest(self) -> Seen | None:
        with self._lock:
            return self.frames[-1] if self.frames else None


def check_motive(cfg: RigConfig, mocap: Mocap, seconds: float, wait_s: float) -> str:
    """Motive's line (CheckError: the failure's line)."""
    from equimus_hw.natnet import protocol as P
    from equimus_hw.natnet.checks import match_bodies
    from equimus_hw.natnet.client import NatNetConnectError

    n = cfg.natnet
    try:
        info = mocap.connect(max(3.0, wait_s))
    except NatNetConnectError:
        raise CheckError(
            f'no answer from {n.server_address}:{n.command_port}: is Motive running with '
            'Streaming on (Broadcast Frame Data), and are natnet_server:= (its address) and '
            'natnet_local:= (this PC on the same network) right? (docs/rig.md, "Motive")'
        ) from None
    except OSError as exc:
        raise CheckError(
            f'cannot listen on {n.local_address}: {exc}; natnet_local:= must be an address of '
            'this PC on the network to Motive'
        ) from None
    c = mocap.client
    version = P.version_text(info.natnet_version)
    app = f'{info.app_name} {P.version_text(info.app_version)}, NatNet {version}'
    if c.version_error:
        raise CheckError(f'{app}: {c.version_error}')
    if c.model is None:
        raise CheckError(f'{app} sent no model definitions (asset list): restart streaming')
    wanted = [b for b in cfg.bridge.rigid_bodies if b] or None
    match = match_bodies(wanted, c.model)
    if not match.ok:
        raise CheckError(f'{app}: {match.error()}')
    bridged = {mocap.token(name) for name in match.ids}
    lost = [b for b in mocap.bodies if b not in bridged]
    if lost:
        raise CheckError(
            f'the estimator needs rigid bodies {lost}, which rigid_bodies in config/natnet.yaml '
            'does not publish: add them'
        )
    start = time.monotonic()
    mocap.start()
    time.sleep(seconds)
    frames = mocap.since(start)
    if len(frames) < 2:
        raise CheckError(
            f'{app} answers but no frames arrive: enable Broadcast Frame Data (Streaming pane), '
            f'and check that natnet_local:={n.local_address} is the interface that receives the '
            f'{"multicast " + n.multicast_group if n.multicast else "unicast"} stream (firewall: '
            f'UDP {n.data_port})'
        )
    # The camera rate is Motive's own: frame numbers over its timestamps. How many frames reached
    # this PC in that time is another matter (a busy PC receives late, in bursts): the dropped
    # frames and the latency below say that.
    span = frames[-1].arrival - frames[0].arrival
    delivered = (len(frames) - 1) / span if span > 0 else 0.0
    motive_span = frames[-1].stamp - frames[0].stamp
    numbered = frames[-1].number - frames[0].number
    rate = numbered / motive_span if motive_span > 0 and numbered > 0 else delivered
    expected = 1.0 / cfg.estimator.period
    if abs(rate - expected) > RATE_TOLERANCE * expected:
        raise CheckError(
            f'{app} streams {rate:.0f} frames/s, the estimator expects {expected:.0f} (period '
            f'in config/control.yaml): set the camera frame rate in Motive to {expected:.0f} Hz, '
            'or period to match it'
        )
    numbers = [f.number for f in frames]
    dropped = sum(max(0, b - a - 1) for a, b in zip(numbers, numbers[1:], strict=False))
    drop_share = dropped / max(1, dropped + len(frames))
    if drop_share > MAX_DROPPED:
        raise CheckError(
            f'{dropped} of {dropped + len(frames)} frames lost on the way ({drop_share:.1%}): a '
            'wired network between Motive and this PC, with nothing else on it (docs/rig.md)'
        )
    latency = np.array([f.latency for f in frames])
    p50, p99 = float(np.percentile(latency, 50)), float(np.percentile(latency, 99))
    if p50 > MAX_LATENCY_S:
        raise CheckError(
            f'frames arrive {p50 * 1e3:.0f} ms after their exposure (median): check the '
            "network and Motive's load"
        )
    for body in mocap.bodies:
        share = sum(body in f.tracked for f in frames) / len(frames)
        if share < MIN_TRACKED:
            raise CheckError(
                f'rigid body {body} is tracked in {share:.0%} of the frames: check its markers '
                "and the cameras' view of it"
            )
    ups = [f.up for f in frames if {'base', 'calf'} <= set(f.up)]
    up_axis = cfg.bridge.up_axis
    if ups and np.mean([u['base'] - u['calf'] for u in ups]) <= 0:
        raise CheckError(
            f"the calf is not below the base along Motive's up axis as up_axis={up_axis} reads "
            "it: set Motive's Streaming > Up Axis to match up_axis in config/natnet.yaml"
        )
    return (
        f'{app}, bodies {", ".join(match.ids)}; {rate:.1f} frames/s (estimator '
        f'{expected:.0f}; {delivered:.1f}/s received); latency p50 {p50 * 1e3:.1f} ms, '
        f'p99 {p99 * 1e3:.1f} ms; {dropped} of '
        f'{dropped + len(frames)} frames dropped; up axis {up_axis}'
    )


def pose_problem(q: np.ndarray | None, safety: Any) -> str:
    """'' if the joint angles are inside the controller's safe range, else what is wrong."""
    if q is None or not np.all(np.isfinite(q)):
        return 'the leg is not tracked (base, thigh and calf)'
    lo, hi = np.asarray(safety.safe_min, float), np.asarray(safety.safe_max, float)
    if len(q) == len(lo) and np.all(q >= lo) and np.all(q <= hi):
        return ''
    return f'joint angles {angles_text(q)} outside the safe range {range_text(safety)}'


def angles_text(q: np.ndarray) -> str:
    names = ('hip', 'knee') if len(q) == 2 else tuple(f'joint {i}' for i in range(len(q)))
    return ', '.join(
        f'{n} {v:.2f} rad ({math.degrees(v):.0f}°)' for n, v in zip(names, q, strict=True)
    )


def range_text(safety: Any) -> str:
    return ' × '.join(
        f'[{lo:.2f}, {hi:.2f}]' for lo, hi in zip(safety.safe_min, safety.safe_max, strict=True)
    )


def check_pose(cfg: RigConfig, mocap: Mocap) -> str:
    qs = [f.q for f in mocap.since(time.monotonic() - 0.5) if f.q is not None]
    if not qs:
        raise CheckError('no frame with base, thigh and calf all tracked in the last 0.5 s')
    q = np.mean(qs, axis=0)
    problem = pose_problem(q, cfg.safety)
    if problem:
        raise CheckError(
            f'{problem}: let the leg hang at rest, valves vented; if it does, the hinge '
            'calibration (hip_offset, knee_offset in config/control.yaml) is off'
        )
    return f'{angles_text(q)}: inside the safe range {range_text(cfg.safety)}'


# --------------------------------------------------------------------------- board and valves


def check_board(cfg: RigConfig, probe: Any, wait_s: float) -> str:
    from equimus_hw.valve import commission as C

    try:
        probe.open(wait_s)
        b = C.check_board(probe, cfg.driver.calibration(), len(ACTUATORS))
    except C.CommissionError as exc:
        raise CheckError(str(exc)) from None
    info = b.info
    crc = probe.stats.crc_errors
    if crc:
        raise CheckError(
            f'{crc} corrupted frames in {probe.stats.frames}: check the USB cable (short, '
            'shielded) and that the board shares ground with the PC'
        )
    return (
        f'firmware {".".join(map(str, info.firmware))} (protocol v{info.protocol_version}), '
        f'{info.channels} channels, {info.dac_bits}-bit DAC, '
        f'{info.adc_bits}-bit read-back ADC, max code {info.max_code}; round trip p50 '
        f'{b.rtt_ms["p50"]:.2f} ms, p99 {b.rtt_ms["p99"]:.2f} ms; 0 corrupted frames in '
        f'{probe.stats.frames}; watchdog ({info.watchdog_ms} ms) vented after '
        f'{b.watchdog_vent_ms:.0f} ms'
        + ('' if b.watchdog_flagged else ' (without its WATCHDOG_VENTED flag)')
    )


def check_valves(
    cfg: RigConfig,
    probe: Any,
    mocap: Mocap,
    report: Report,
    hold_s: float,
    stale_s: float = STALE_S,
) -> dict[str, Any]:
    """Each valve's result (commission.ValveResult), the failed ones left out."""
    from equimus_hw.valve import commission as C

    nominal = cfg.driver.calibration()
    adc_bits = probe.info.adc_bits

    def to_kpa(code: int) -> float:
        return nominal.adc_to_kpa(code, adc_bits)

    def watch() -> str:
        last = mocap.latest()
        age = math.inf if last is None else time.monotonic() - last.arrival
        if age > stale_s:
            return f'no motion-capture frame for {age:.2f} s'
        return pose_problem(last.q if last else None, cfg.safety)

    results = {}
    for channel, name in enumerate(ACTUATORS):
        section = f'Valve {name}'
        if not adc_bits:
            report.add(section, False, 'the board has no read-back ADC (INFO adc_bits 0)')
            continue
        try:
            r = C.check_valve(probe, name, channel, nominal, to_kpa, watch, hold_s=hold_s)
        except C.CommissionError as exc:
            report.add(section, False, str(exc))
            continue
        f = r.fit
        assert f is not None, 'check_valve returns a fitted valve'
        report.add(
            section,
            True,
            f'gain {f.dac_gain:.4f}, offset {f.dac_offset_kpa:+.2f} kPa (±{f.residual_kpa:.2f} '
            f'kPa rms); dead time {f.dead_time_s * 1e3:.0f} ms, τ fill {f.tau_fill_s:.3f} s, '
            f'τ vent {f.tau_vent_s:.3f} s, t90 {f.t90_s:.2f} s; {r.verify_kpa:g} kPa with the '
            f'new calibration read back {r.verify_read_kpa:.1f} kPa',
        )
        results[name] = r
        report.note(f'{name} steps, read back: ' + '; '.join(map(shape_text, C.step_shapes(r))))
    return results


def shape_text(s: Any) -> str:
    """One step of a valve (commission.StepShape) in a line of the report."""
    head = f'{s.from_kpa:.1f} -> {s.to_kpa:.1f} kPa'
    if not math.isfinite(s.t50_s):
        return f'{head} (too small to time)'
    return f'{head}: t10 {s.t10_s:.2f} s, t50 {s.t50_s:.2f} s, overshoot {s.overshoot_kpa:.1f} kPa'


def write_steps(path: str, results: Mapping[str, Any]) -> None:
    """Every read-back of every step, one row each (valve, step in run order, its nominal kPa,
    s since the step's command, kPa per channel): the valves' responses for identification
    (docs/identification.md), which the authors' recordings do not have."""
    import csv

    with open(path, 'w', newline='', encoding='utf-8') as f:
        w = csv.writer(f)
        w.writerow(['valve', 'step', 'nominal_kpa', 't_s', *(f'{a}_kpa' for a in ACTUATORS)])
        for name, r in results.items():
            for i, lv in enumerate(r.steps()):
                nominal = f'{lv.nominal_kpa:.3f}'
                for t, kpa in zip(lv.t, lv.kpa, strict=True):
                    w.writerow([name, i, nominal, f'{t:.4f}', *map('{:.3f}'.format, kpa)])


def write_calibration(cfg: RigConfig, probe: Any, results: Mapping[str, Any]) -> str:
    from equimus_hw.valve.calibration import CalibrationFile, write_calibration

    info = probe.info
    cal = CalibrationFile(
        {name: results[name].fit for name in ACTUATORS},
        info.max_code,
        firmware='.'.join(map(str, info.firmware)),
        port=cfg.args['serial_port'],
    )
    return write_calibration(cfg.args['calibration'], cal)


# --------------------------------------------------------------------------- the report


def plot(path: str, results: Mapping[str, Any]) -> None:
    """Each valve's read-back over its steps (top) and its settled read-backs against the
    nominal pressures with the fitted line (bottom)."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(ACTUATORS), figsize=(6 * len(ACTUATORS), 7), squeeze=False)
    for col, name in enumerate(ACTUATORS):
        top, bottom = axes[0][col], axes[1][col]
        r = results.get(name)
        if r is None:
            top.set_title(f'{name}: failed or not run')
            continue
        ch = r.channel
        t0 = 0.0
        for lv in r.steps():
            t = np.array(lv.t) + t0
            top.plot(t, [p[ch] for p in lv.kpa], color='C0', lw=1)
            top.hlines(lv.nominal_kpa, t0, t[-1] if len(t) else t0, colors='C1', lw=1)
            t0 = float(t[-1]) if len(t) else t0
        top.set(title=f'{name}: read-back (blue), command (orange)', xlabel='s', ylabel='kPa')
        x = np.array([lv.nominal_kpa for lv in r.levels if lv.nominal_kpa > 0])
        y = np.array([lv.end for lv in r.levels if lv.nominal_kpa > 0])
        grid = np.linspace(0.0, max(x) * 1.1, 50)
        bottom.plot(x, y, 'o', label='read-back at the end of each step')
        bottom.plot(grid, r.fit.dac_gain * grid + r.fit.dac_offset_kpa, label='fit')
        bottom.plot(grid, grid, ':', color='gray', label='nominal')
        bottom.set(
            title=f'gain {r.fit.dac_gain:.4f}, offset {r.fit.dac_offset_kpa:+.2f} kPa',
            xlabel='nominal kPa of the DAC code',
            ylabel='kPa read back',
        )
        bottom.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# --------------------------------------------------------------------------- the command


def run(
    overrides: Mapping[str, str],
    out: str,
    hold_s: float,
    wait_s: float,
    stale_s: float = STALE_S,
    board_timeout_s: float | None = None,
) -> int:
    from equimus_hw.valve import commission as C

    board_timeout_s = C.SILENT_S if board_timeout_s is None else board_timeout_s

    try:
        cfg = rig_config(overrides)
        prestart.check_new_folder(out, '--out ')
        os.makedirs(out)
    except prestart.StartError as exc:
        print(f'equimus check rig: {exc}', file=sys.stderr)
        return 2
    except OSError as exc:
        print(f'equimus check rig: cannot create {out}: {exc.strerror}', file=sys.stderr)
        return 2
    args = cfg.args
    report = Report()
    report.note(
        f'equimus check rig: Motive {args["natnet_server"]}:{args["natnet_command_port"]}, '
        f'board {args["serial_port"]}, report {out}'
    )
    mocap = Mocap(cfg)
    probe = C.BoardProbe(args['serial_port'], cfg.driver.baud, silent_s=board_timeout_s)
    results: dict[str, Any] = {}
    try:  # a Ctrl-C (KeyboardInterrupt) leaves through here too: the board is vented
        step(report, 'Motive', lambda: check_motive(cfg, mocap, MOTIVE_S, wait_s))
        if report.passed('Motive'):
            step(report, 'Estimator', lambda: check_pose(cfg, mocap))
        else:
            report.add('Estimator', None, 'needs the motion capture')
        step(report, 'Board', lambda: check_board(cfg, probe, wait_s))
        ready = report.passed('Board') and report.passed('Estimator')
        if ready:
            report.note(f'arming: each valve in turn to {", ".join(map(str, C.LEVELS_KPA))} kPa')
            results = check_valves(cfg, probe, mocap, report, hold_s, stale_s)
        else:
            for name in ACTUATORS:
                report.add(f'Valve {name}', None, 'needs the board and the leg in a safe pose')
    finally:
        probe.close()
        mocap.close()
    if len(results) == len(ACTUATORS) and args['calibration'] != NO_CALIBRATION:
        try:
            path = write_calibration(cfg, probe, results)
            report.note(f'calibration written to {path}')
        except OSError as exc:
            report.add('Calibration', False, f'cannot write {args["calibration"]}: {exc}')
    elif args['calibration'] != NO_CALIBRATION:
        report.note(f'calibration NOT written ({args["calibration"]} left as it was)')
    try:
        if results:
            plot(os.path.join(out, 'rig_check.png'), results)
            write_steps(os.path.join(out, 'valve_steps.csv'), results)
        with open(os.path.join(out, 'report.txt'), 'w', encoding='utf-8') as f:
            f.write(report.text())
        print(
            f'report: {out}/report.txt'
            + (f', {out}/rig_check.png, {out}/valve_steps.csv' if results else '')
        )
    except OSError as exc:
        print(f'equimus check rig: cannot write the report in {out}: {exc}', file=sys.stderr)
        return 2
    return 2 if report.failed else 0


def step(report: Report, section: str, check: Callable[[], str]) -> None:
    try:
        report.add(section, True, check())
    except CheckError as exc:
        report.add(section, False, str(exc))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='equimus check',
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest='what', required=True)
    r = sub.add_parser('rig', help='Motive, estimator, board and valves; writes the calibration')
    r.add_argument(
        'assignments',
        nargs='*',
        help=f'hardware launch arguments as name:=value ({", ".join(RIG_ARGUMENTS)})',
    )
    r.add_argument(
        '--out',
        default=os.path.join('rig_checks', time.strftime('%Y%m%d-%H%M%S')),
        help='report folder to create (default: %(default)s)',
    )
    r.add_argument(
        '--hold',
        type=float,
        default=None,
        help='s each valve pressure is held (default 1.5; the valve must settle within it)',
    )
    r.add_argument(
        '--mocap-timeout',
        type=float,
        default=STALE_S,
        help='s without a motion-capture frame while a valve is stepped before it is vented '
        'and its test stopped (default %(default)s)',
    )
    r.add_argument(
        '--board-timeout',
        type=float,
        default=None,
        help='s without a reply before the board counts as gone (default 1; more for a board '
        'behind a slow hub, or a computer busy with other work)',
    )
    r.add_argument(
        '--wait',
        type=float,
        default=0.0,
        help='s to wait for the serial port and Motive to appear (a rig starting up)',
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from equimus_bringup.cli import parse_assignments
    from equimus_hw.valve.commission import HOLD_S, SILENT_S

    ns = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        overrides = parse_assignments(ns.assignments)
    except prestart.StartError as exc:
        print(f'equimus check rig: {exc}', file=sys.stderr)
        return 2
    hold = HOLD_S if ns.hold is None else ns.hold
    board = SILENT_S if ns.board_timeout is None else ns.board_timeout
    lo, hi = MOCAP_TIMEOUT_RANGE_S
    b_lo, b_hi = BOARD_TIMEOUT_RANGE_S
    h_lo, h_hi = HOLD_RANGE_S
    if (
        not h_lo <= hold <= h_hi
        or not 0.0 <= ns.wait <= 600.0
        or not lo <= ns.mocap_timeout <= hi
        or not b_lo <= board <= b_hi
    ):
        print(
            f'equimus check rig: --hold must be {h_lo:g}-{h_hi:g} s, --wait 0-600 s, '
            f'--board-timeout {b_lo:g}-{b_hi:g} s and --mocap-timeout {lo:g}-{hi:g} s',
            file=sys.stderr,
        )
        return 2
    try:
        return run(overrides, ns.out, hold, ns.wait, ns.mocap_timeout, board)
    except KeyboardInterrupt:
        print('equimus check rig: interrupted; the board was vented', file=sys.stderr)
        return 130


if __name__ == '__main__':
    sys.exit(main())
