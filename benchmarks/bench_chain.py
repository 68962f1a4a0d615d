"""The fused control loop's chain in plain code, back to back and paced (issue 30, item 3).

    python benchmarks/bench_chain.py                 # 1200 frames a schedule and form (~50 s)
    python benchmarks/bench_chain.py --frames 2400 --forms compiled

`control_loop` (hardware.launch.py fused_loop:=true) runs, per NatNet frame, in its receive
thread: the datagram decoded and accounted (NatNetClient.handle_datagram), the bodies' poses
converted to the ROS frame (motive_to_ros), the joint state estimated (JointStateEstimator), the
command computed (ControlStep: the supervisor and the PID), the safety filter (SafetyFilter:
clamp, slew, watchdog), the DAC codes (ValveCalibration) and the SET frame written to the board
(BoardLink.send_codes, to the DAC-board emulator on a pty). This benchmark runs the same code
without the nodes around it, in three schedules over the same frames (a simulated leg's poses,
streamed by the NatNet emulator's encoder):

- back to back: one frame after the other, as fast as they go (the code's own cost, its
  instructions and data in the caches);
- paced, asleep: one frame every 1/120 s, the thread asleep in between (as the receive thread
  waits in select for the next datagram);
- paced, spinning: one frame every 1/120 s, the thread polling the clock in between (the
  receive thread's busy-poll modes).

Each schedule runs twice, once per form of the estimator's and the PID's arithmetic and of the
SET frame's encoding (`--forms`): compiled (equimus_control._kernels and equimus_hw.valve._wire,
what the nodes run) and Python (the reference they match bit for bit), one after the other on
consecutive frames, so the two are measured side by side in one run.

It prints, per schedule and form, the receive thread's CPU time (time.thread_time_ns) from the
start of the decode to the end of each stage, p50 / p99 over the frames, and the ratio of the paced
schedules to back to back. A paced frame that costs several times a back-to-back one is the
machine, not the code: the same instructions, evicted from the caches by whatever ran on the
core in the 8 ms between two frames (other processes, other virtual machines on the host), so
the figure to compare with bench_latency.py's in-process latency is the paced one, and what
lowers it is less code a frame, not faster scheduling.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

STAGES = ('decoded', 'poses', 'estimator', 'controller', 'safety', 'written')
RATE_HZ = 120.0
SCHEDULES = ('back to back', 'paced, asleep', 'paced, spinning')
#: the estimator's and the PID's arithmetic: compiled (what the nodes run) and the Python reference
FORMS = ('compiled', 'python')


def _frames(n: int) -> list[bytes]:
    """n NatNet datagrams of the leg under a slowly changing command (the rig emulator's way:
    the simulated leg, the virtual mocap, the NatNet emulator's encoder)."""
    from equimus_description.interface import BODIES
    from equimus_hw.natnet.emulator import NatNetEmulator
    from equimus_sim.mocap import MocapConfig, VirtualMocap
    from equimus_sim.simulator import make_simulator

    sim = make_simulator()
    mocap = VirtualMocap(MocapConfig(rate=RATE_HZ, position_noise=0.0), BODIES)
    emu = NatNetEmulator(rate_hz=RATE_HZ)
    out = []
    for k in range(n):
        t = (k + 1) / RATE_HZ
        sim.set_command([15.0 + 10.0 * np.sin(0.7 * t), 10.0 + 8.0 * np.sin(1.1 * t)])
        sim.advance(1 / RATE_HZ)
        mocap.capture(sim.time, sim.body_poses(BODIES))
        for frame in mocap.release(sim.time):
            for name, pose in frame.bodies.items():
                w, x, y, z = pose.orientation
                emu.set_pose(name, pose.position, (x, y, z, w))
        f = emu.build_frame(t)
        f.frame_number = k + 1
        out.append(emu._stamp_and_encode(f))
    return out


class Chain:
    """The receive thread's work for one frame, stage by stage (see the module docstring), with
    an estimator and a control step per form of their arithmetic."""

    def __init__(self, port: str, forms: tuple[str, ...] = FORMS) -> None:
        from equimus_control.estimation import EstimatorConfig, JointStateEstimator
        from equimus_control.pid import PIDController
        from equimus_control.reference import make_reference
        from equimus_control.step import ControlStep
        from equimus_control.supervisor import SafetyConfig
        from equimus_description.interface import BODIES
        from equimus_description.leg import load_leg
        from equimus_description.motive import DEFAULT_UP_AXIS, motive_to_ros
        from equimus_description.statics import StaticParams
        from equimus_hw.natnet.client import NatNetClient
        from equimus_hw.natnet.emulator import NatNetEmulator
        from equimus_hw.valve.config import DriverConfig
        from equimus_hw.valve.link import BoardLink
        from equimus_hw.valve.protocol import encoder_form, set_encoder
        from equimus_hw.valve.safety import SafetyFilter

        emu = NatNetEmulator(rate_hz=RATE_HZ)
        self.client = NatNetClient()
        self.client._dispatch(emu.server_info(), 0)
        self.client._dispatch(emu.model_definitions(), 0)
        self.bodies = list(BODIES)
        self.to_ros, self.up = motive_to_ros, DEFAULT_UP_AXIS
        params = StaticParams.from_leg(load_leg())
        self.forms = {
            form: (
                JointStateEstimator(EstimatorConfig(), compiled=form == 'compiled'),
                ControlStep(
                    PIDController(params, compiled=form == 'compiled'),
                    SafetyConfig(),
                    n_joints=2,
                    n_valves=2,
                ),
            )
            for form in forms
        }
        self.encoders = {form: set_encoder(form == 'compiled') for form in forms}
        for form, (est, step) in self.forms.items():
            got = (est.kernels, step.controller.kernels, encoder_form(self.encoders[form]))
            if got != (form,) * 3:
                raise SystemExit(f'bench_chain: the {form} form is not in this build')
        self.reference = make_reference('triangle', params)
        cfg = DriverConfig()
        self.cals = cfg.channel_calibrations(('maa', 'baa'), None)
        self.safety = SafetyFilter(2, cfg.max_kpa, cfg.slew_rate_kpa_s, cfg.command_timeout_s)
        self.link = BoardLink(port, 2, cfg.calibration())
        self.link.start()
        end = time.monotonic() + 5.0
        while not self.link.connected and time.monotonic() < end:
            time.sleep(0.01)
        if not self.link.connected:
            raise SystemExit(f'bench_chain: the board emulator did not answer ({port})')

    def run(self, datagram: bytes, t: float, form: str) -> list[int]:
        """One frame; the thread's CPU ns at the end of each of STAGES, from the start."""
        clock = time.thread_time_ns
        est, step = self.forms[form]
        # The reference arrives between frames (the executor thread's subscription): not timed.
        q_ref, qd_ref = self.reference(t)
        step.set_reference(q_ref, qd_ref, t)
        self.link.encode_set = self.encoders[form]
        c0 = clock()
        ev = self.client.handle_datagram(datagram, time.perf_counter_ns())
        c1 = clock()
        if ev is None:
            raise SystemExit('bench_chain: a frame was not accepted by the NatNet client')
        by_name = {b.name: (self.to_ros(b.position, b.orientation, self.up)) for b in ev.bodies}
        poses = [by_name[name] for name in self.bodies]
        c2 = clock()
        e = est.update(t, poses)
        c3 = clock()
        now = time.monotonic()
        cmd = step.step(e.position, e.velocity, t, now)
        c4 = clock()
        self.safety.command([float(p) for p in cmd.pressures], now)
        out = self.safety.step(now, None)
        codes = [cal.kpa_to_code(p) for cal, p in zip(self.cals, out, strict=True)]
        c5 = clock()
        self.link.send_codes(codes)
        c6 = clock()
        return [c - c0 for c in (c1, c2, c3, c4, c5, c6)]

    def close(self) -> None:
        self.link.vent_and_close(0.5)


def _schedule(chain: Chain, frames: list[bytes], t0: float, name: str, form: str) -> np.ndarray:
    period = 1.0 / RATE_HZ
    rows = []
    due = time.monotonic()
    for k, datagram in enumerate(frames):
        if name != 'back to back':
            due += period
            if name == 'paced, asleep':
                time.sleep(max(0.0, due - time.monotonic()))
            else:
                while time.monotonic() < due:
                    pass
        rows.append(chain.run(datagram, t0 + k * period, form))
    return np.array(rows) * 1e-3  # µs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('--frames', type=int, default=1200, help='frames a schedule (1200 = 10 s)')
    p.add_argument('--warmup', type=int, default=120, help='frames run first in each schedule')
    p.add_argument(
        '--forms',
        default=','.join(FORMS),
        help='forms of the arithmetic, comma-separated (default: both, side by side)',
    )
    ns = p.parse_args(argv)
    forms = tuple(f for f in ns.forms.split(',') if f)
    if ns.frames < 10 or ns.warmup < 0 or not forms or not set(forms) <= set(FORMS):
        print(
            'bench_chain: --frames must be >= 10, --warmup >= 0 and --forms one or both of '
            + ', '.join(FORMS),
            file=sys.stderr,
        )
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from equimus_hw.valve.board_emulator import BoardEmulator

    per = ns.frames + ns.warmup
    runs = [(name, form) for name in SCHEDULES for form in forms]
    print(f'building {per * len(runs)} NatNet frames of the simulated leg ...', flush=True)
    frames = _frames(per * len(runs))
    with tempfile.TemporaryDirectory(prefix='bench_chain_') as tmp:
        board = BoardEmulator(channels=2, link=os.path.join(tmp, 'dac'), log_path=None)
        board.start()
        chain = Chain(board.link, forms)
        results = {}
        try:
            for i, (name, form) in enumerate(runs):
                chunk = frames[i * per : (i + 1) * per]
                t0 = i * per / RATE_HZ
                rows = _schedule(chain, chunk, t0 + 1.0, name, form)
                results[name, form] = rows[ns.warmup :]
        finally:
            chain.close()
            board.close()
    load = os.getloadavg()[0] if hasattr(os, 'getloadavg') else float('nan')
    print(
        f'\nthe fused loop chain in plain code, {ns.frames} frames a schedule after '
        f'{ns.warmup} of warm-up; CPU µs of the thread from the start of the decode to the end '
        'of each stage, p50 / p99:'
    )
    print(f'  {"schedule, form":28s}' + ''.join(f'{s:>16s}' for s in STAGES))
    for (name, form), rows in results.items():
        cells = [
            f'{np.percentile(rows[:, j], 50):7.1f}/{np.percentile(rows[:, j], 99):<7.1f}'
            for j in range(len(STAGES))
        ]
        print(f'  {name + ", " + form:28s}' + ''.join(f'{c:>16s}' for c in cells))
    for form in forms:
        hot = results['back to back', form][:, -1]
        for name in SCHEDULES[1:]:
            whole = results[name, form][:, -1]
            ratio = statistics.median(whole) / statistics.median(hot)
            print(f'  {form}, {name}: the whole chain {ratio:.2f}x its back-to-back CPU time (p50)')
    if len(forms) == len(FORMS):
        for name in SCHEDULES:
            c, py = (results[name, form][:, -1] for form in FORMS)
            p50, p99 = (np.percentile(c, q) / np.percentile(py, q) for q in (50, 99))
            print(
                f'  {name}: the whole chain compiled {p50:.2f} of Python at p50, {p99:.2f} at p99'
            )
    print(f'  (1-min load average {load:.2f} at the end, {os.cpu_count()} CPUs)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
