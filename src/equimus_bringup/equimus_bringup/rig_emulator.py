"""An emulated rig: the simulated leg behind the real-rig protocols, for the hardware graph.

One process holds a DAC board emulator on a pseudo-terminal (the valve driver's serial port), a
NatNet server emulator (what the NatNet bridge connects to) and the MuJoCo leg between them:
every 1/120 s it reads the valve pressures the board emulator's valve model has reached, applies
them to the leg, steps the physics in real time and streams the rigid-body poses over NatNet.
So `hardware.launch.py emulator:=true` closes the same loop as the real rig, through real bytes on
a serial line and real UDP packets, with no ROS in this process.

    rig_emulator --link /tmp/equimus_dac --command-port 1510 --data-port 1511 --multicast

`--firmware BINARY` puts the board's own firmware, built for this computer
(firmware/host/README.md), behind the pseudo-terminal instead of the Python board.

`--truth FILE | random --seed S` makes the emulated rig a plant the stack does not know
(equimus_sim.truth.RigTruth: the leg's and the valves' parameters, hinge friction, the VPPE's
hysteresis and repeatability, each channel's DAC gain and offset error, noise on the ADC's
read-back of the valve pressure, the motion capture's latency and marker noise); `--truth-out`
writes it (truth.yaml) for the run's records. Without it the rig is the nominal model.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import signal
import sys
import threading
import time
from collections.abc import Sequence

import numpy as np

from equimus_description.interface import BODIES
from equimus_description.leg import load_leg
from equimus_hw.natnet.emulator import NatNetEmulator
from equimus_hw.valve.board_emulator import BoardEmulator, add_valve_error_arguments
from equimus_hw.valve.host_firmware import FirmwareBoard
from equimus_ros.owner import stop_with_supervisor
from equimus_sim.leg_model import LegModel
from equimus_sim.mocap import MocapConfig, VirtualMocap
from equimus_sim.simulator import LegSimulator
from equimus_sim.truth import RigTruth, TruthError, dump, parse_spec

SWITCH_INTERVAL_S = 0.0005  # GIL hand-over bound for the emulators' threads (CPython: 5 ms)
# After a stop signal the rig waits for the driver's vent, at most VENT_GRACE_S (launch sends
# SIGTERM 5 s after SIGINT); the driver is gone once it has sent nothing for DRIVER_GONE_S.
VENT_GRACE_S = 4.0
DRIVER_GONE_S = 0.5


class EmulatedRig:
    """Board emulator → leg physics → NatNet emulator, paced by the NatNet stream.

    The physics steps in the NatNet emulator's stream thread just before each frame is built, as
    a camera system computes poses and then sends them: after a frame has gone out this process
    stays idle for the rest of the period, so the board emulator's thread reads the controller's
    answer at once instead of waiting for a physics step to release the GIL.
    """

    def __init__(
        self,
        link: str,
        natnet: NatNetEmulator,
        rate: float = 120.0,
        leg_overrides: str | None = None,
        position_noise: float = 0.0,
        seed: int = 0,
        board_log: str | None = None,
        firmware: str | None = None,
        dac_gain: Sequence[float] | None = None,
        dac_offset_kpa: Sequence[float] | None = None,
        adc_noise_kpa: Sequence[float] | None = None,
        truth: RigTruth | None = None,
    ):
        """board_log: JSON-lines file of every frame and vent event the board sees (soak checks).
        firmware: the board firmware built for this computer (firmware/host/README.md) runs the
        board instead of the Python emulation; the valves stay this process's.
        dac_gain, dac_offset_kpa, adc_noise_kpa: each valve's DAC chain error and read-back
        noise, per channel (ValveModel); a truth may set them instead.
        truth: the plant (equimus_sim.truth); it sets the leg, the valves' errors and the mocap
        (its noise replaces `position_noise`); None: the nominal model."""
        if truth is not None and leg_overrides:
            raise ValueError('a rig truth and leg overrides both set the emulated leg: give one')
        self.truth = truth
        leg = truth.leg() if truth is not None else load_leg(None, leg_overrides or None)
        device = truth.board_keywords() if truth is not None else {}
        channel = {
            k: v
            for k, v in (
                ('dac_gain', dac_gain),
                ('dac_offset_kpa', dac_offset_kpa),
                ('adc_noise_kpa', adc_noise_kpa),
            )
            if v is not None
        }
        both = sorted(set(device) & set(channel))
        if both:
            raise ValueError(f'the truth and the options both set {", ".join(both)}: give one')
        device.update(channel)
        missing = sorted(set(device) - set(inspect.signature(BoardEmulator).parameters))
        if missing and not firmware:
            raise ValueError(
                f'the truth sets {", ".join(missing)}, which this board emulator does not '
                'model: leave them out of the truth file'
            )
        self.board: BoardEmulator | FirmwareBoard
        if firmware:
            if 'regulation' in device:
                raise ValueError(
                    "--firmware runs the board's own code: a truth with VPPE hysteresis or "
                    'repeatability needs the Python board (drop --firmware)'
                )
            self.board = FirmwareBoard(
                firmware,
                channels=len(leg.actuators),
                link=link,
                valve=leg.valve,
                log_path=board_log,
                **device,
            )
        else:
            self.board = BoardEmulator(
                channels=len(leg.actuators),
                link=link,
                valve=leg.valve,
                log_path=board_log,
                seed=seed if truth is None or truth.seed is None else truth.seed,
                **device,
            )
        lm = LegModel(leg.with_timestep(1.0 / (rate * 5)))
        # The board emulator's valve model is the valve: the simulator has none of its own.
        self.sim = LegSimulator(lm, valve=None, p_max=lm.pressure_max_kpa)
        # Motive's latency: a frame leaves `exposure_latency_s` after its exposure. Whole frames
        # of it hold poses back (the mocap's delay line), the rest is a lead of the stream's
        # clock over the physics (whole physics steps): a pose goes out when it is that old, and
        # the stream reports exactly that latency, so every stamp is the state's own time.
        self.period = 1.0 / natnet.rate_hz
        whole, rest = divmod(natnet.exposure_latency_s, self.period)
        step = self.sim.dt
        self.exposure_lead_s = min(round(rest / step) * step, self.period)
        delay = int(whole) + (truth.mocap_delay_frames(rate) if truth is not None else 0)
        self.mocap = VirtualMocap(
            MocapConfig(
                rate=rate,
                position_noise=truth.position_noise_m if truth is not None else position_noise,
                orientation_noise=truth.orientation_noise_rad if truth is not None else 0.0,
                latency=delay / rate,
                seed=seed,
            )
        )
        natnet.exposure_latency_s = delay / rate + self.exposure_lead_s
        self.natnet = natnet
        # the valve pressures read at the last two frames (older, last), each acting from its
        # frame's time until the next one's
        self._held = (np.zeros(len(leg.actuators)), np.zeros(len(leg.actuators)))
        if abs(natnet.rate_hz - rate) > 1e-9:
            raise ValueError(
                f'rig rate {rate} Hz differs from the NatNet stream rate {natnet.rate_hz} Hz'
            )
        natnet.before_frame = self.tick
        self.frames = 0
        self._untracked_until: dict[str, float] = {}  # body -> monotonic time it reappears
        self._stop = threading.Event()

    @property
    def serial_port(self) -> str | None:
        """The board's link path, else its pty (None until the board is opened)."""
        return self.board.link or self.board.slave_path

    def tick(self) -> None:
        """One mocap period: the physics up to this frame's exposure, poses out, valve pressures in.

        The physics runs `exposure_lead_s` behind the frame clock: each pressure reading acts
        from the frame it was read at until the next reading, as the real valves' pressures act
        on the real leg, and each pose is the state at its exposure time."""
        older, last = self._held
        self.sim.set_command(older)
        self.sim.advance(self.exposure_lead_s)
        self.sim.set_command(last)
        self.sim.advance(self.period - self.exposure_lead_s)
        self.mocap.capture(self.sim.time, self.sim.body_poses(BODIES))
        self._held = (last, np.asarray(self.board.pressures(), float))
        self.frames += 1
        now = time.monotonic()
        # A frame goes out at its release time, a whole number of frames after its capture (at
        # once without a latency); NatNet carries the latency in its own timestamps.
        for frame in self.mocap.release(self.sim.time):
            for name, pose in frame.bodies.items():
                if name not in self.natnet.ids:  # a body the Motive project lacks (--omit-body)
                    continue
                w, x, y, z = pose.orientation
                lost = self._untracked_until.get(name, 0.0) > now
                self.natnet.set_pose(
                    name, pose.position, (x, y, z, w), tracked=pose.tracked and not lost
                )

    def untrack(self, name: str, duration: float) -> None:
        """Body `name` loses tracking for `duration` s (NatNetEmulator.untrack would be undone
        by the next set_pose, which marks the body tracked again)."""
        self._untracked_until[name] = time.monotonic() + duration

    def run(self, duration: float = 0.0) -> None:
        """Wait until stop() (or `duration` s); the NatNet stream thread drives the physics."""
        self._stop.wait(duration or None)

    def stop(self) -> None:
        self._stop.set()

    def wait_released(self, grace_s: float = VENT_GRACE_S) -> bool:
        """Until the driver has let go of the board: outputs at code 0 and no frame for
        DRIVER_GONE_S (a running driver sends at least every watchdog period), at most `grace_s`.

        A real rig stays powered when the graph is stopped; a Ctrl-C reaches this process and
        the driver at once, and the driver's vent on shutdown must still find a board that
        answers."""
        end = time.monotonic() + grace_s
        while time.monotonic() < end:
            last = self.board.last_frame()
            quiet = last is None or time.monotonic() - last.t > DRIVER_GONE_S
            if quiet and not any(self.board.codes):
                return True
            time.sleep(0.02)
        return False

    def __enter__(self):
        # The board answers and the NatNet server sends from threads of this process; neither may
        # wait out CPython's default 5 ms GIL switch interval behind the physics thread.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self.board.start()
        self.natnet.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        self.natnet.stop()
        self.board.close()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='rig_emulator',
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        '--link', default='/tmp/equimus_dac', help='symlink to the board pty (the driver opens it)'
    )
    p.add_argument(
        '--version', default='4.1', choices=['3.0', '3.1', '4.0', '4.1'], help='NatNet bitstream'
    )
    p.add_argument('--address', default='127.0.0.1')
    p.add_argument('--command-port', type=int, default=1510)
    p.add_argument('--data-port', type=int, default=1511)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument('--multicast', dest='multicast', action='store_true', default=True)
    mode.add_argument('--unicast', dest='multicast', action='store_false')
    p.add_argument('--rate', type=float, default=120.0, help='mocap rate (Hz)')
    p.add_argument('--leg-overrides', default='', help='fitted-parameter YAML for the emulated leg')
    p.add_argument('--position-noise', type=float, default=0.0002, help='mocap noise σ (m)')
    p.add_argument('--duration', type=float, default=0.0, help='stop after this many s (0 = run)')
    p.add_argument(
        '--truth',
        default='',
        metavar='FILE|random',
        help='the plant to emulate: a truth file (truth.yaml), a fitted parameter file (its '
        'parameters, e.g. config/leg_fit.yaml), random (a draw, --seed) or random:SEED; '
        'default: the nominal model (equimus_sim.truth)',
    )
    p.add_argument('--seed', type=int, default=None, help='seed of --truth random')
    p.add_argument('--truth-out', default='', help='write the emulated truth here (truth.yaml)')
    p.add_argument(
        '--firmware',
        default='',
        metavar='BINARY',
        help='run the board firmware built for this computer instead of the Python board '
        '(firmware/host/README.md)',
    )
    p.add_argument(
        '--omit-body',
        action='append',
        default=[],
        choices=BODIES,
        metavar='NAME',
        help='a rigid body Motive does not stream (a project without it); repeatable',
    )
    add_valve_error_arguments(p)
    return p


def truth_from_arguments(spec: str, seed: int | None) -> RigTruth | None:
    """`--truth` and `--seed` as a truth (None: the nominal rig, as before truths existed)."""
    if not spec:
        if seed is not None:
            raise TruthError('--seed draws a truth: give --truth random with it')
        return None
    if spec == 'random':
        if seed is None:
            raise TruthError('--truth random needs --seed S (the draw is reproducible)')
        spec = f'random:{seed}'
    return parse_spec(spec)


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    natnet = NatNetEmulator(
        version=a.version,
        address=a.address,
        command_port=a.command_port,
        data_port=a.data_port,
        multicast=a.multicast,
        rate_hz=a.rate,
        bodies=[b for b in BODIES if b not in a.omit_body],
    )
    try:
        truth = truth_from_arguments(a.truth, a.seed)
        rig = EmulatedRig(
            a.link,
            natnet,
            rate=a.rate,
            leg_overrides=a.leg_overrides,
            position_noise=a.position_noise,
            firmware=a.firmware or None,
            dac_gain=a.dac_gain,
            dac_offset_kpa=a.dac_offset_kpa,
            adc_noise_kpa=a.adc_noise_kpa,
            truth=truth,
        )
        if truth is not None and a.truth_out:
            dump(truth, a.truth_out)
    except (OSError, RuntimeError, ValueError) as exc:
        print(f'rig_emulator: cannot start: {exc}', file=sys.stderr)
        return 2
    # Explicit for SIGINT too: started from a background job, a process inherits SIGINT ignored,
    # and the supervisor stops the rig with SIGINT.
    try:
        rig.natnet.open()  # before anything runs: a port in use is a clear error, not a traceback
    except OSError as exc:
        rig.board.close()  # its pty link goes with it: no driver finds a board that never answers
        print(
            f'rig_emulator: cannot bind NatNet {a.address} ports {a.command_port}/{a.data_port}: '
            f'{exc.strerror}. Is another server (Motive, an emulator) running? Choose other '
            'ports (natnet_command_port:=, natnet_data_port:=, or --command-port/--data-port).',
            file=sys.stderr,
        )
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: rig.stop())
    stop_with_supervisor()
    with rig:
        print(
            f'rig_emulator: DAC board on {rig.serial_port}; NatNet {a.version} on '
            f'{a.address}:{a.command_port}/{a.data_port} '
            f'({"multicast" if a.multicast else "unicast"}); plant: '
            + (
                'nominal'
                if rig.truth is None
                else f'truth {a.truth}' + (f' (seed {rig.truth.seed})' if rig.truth.seed else '')
            ),
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            rig.run(a.duration)
            rig.wait_released()
    print(
        f'rig_emulator: {rig.frames} frames, {rig.natnet.frames_sent} sent, '
        f'board watchdog trips {rig.board.watchdog_trips}, '
        f'code-limit violations {len(rig.board.invariant_violations)}, '
        f'outputs at stop {list(rig.board.codes)}',
        flush=True,
    )
    return 0


if __name__ == '__main__':
    sys.exit(main())
