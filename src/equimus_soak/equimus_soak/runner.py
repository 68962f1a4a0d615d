"""The soak run: the hardware graph's processes, the emulated rig in this process, the probe,
the fault schedule and the records (`Soak.run`)."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from equimus_bringup.graph import (
    default_config_dir,
    describe_graph,
    localhost_environment,
    realtime_problem,
)
from equimus_hw.natnet.ports import free_udp_ports
from equimus_soak import analysis as A
from equimus_soak.checks import Check, SoakChecks
from equimus_soak.faults import ALL_FAULTS, FAULTS, FUSED_AWAY, RATE_HZ, FaultInjection, FaultRecord
from equimus_soak.probes import ProbeClient, ProcSampler, SchedulingDelay
from equimus_soak.supervised import SoakSupervisor


def _load_params(config_dir: str, file: str, node: str) -> dict:
    try:
        with open(os.path.join(config_dir, file)) as fh:
            return (yaml.safe_load(fh) or {}).get(node, {}).get('ros__parameters', {}) or {}
    except OSError:
        return {}


class Soak(FaultInjection, SoakChecks):
    """One soak run. `run()` returns (figures, checks)."""

    def __init__(
        self,
        duration: float = 60.0,
        faults: Sequence[str] = FAULTS,
        out: str | None = None,
        controller: str = 'pid',
        reference: str = 'sine',
        gap: float | None = None,
        echo: bool = False,
        log: Callable[[str], None] = print,
        domain_id: int | None = None,
        rt_priority: int = 0,
        fused_loop: bool = False,
        second_recorder: bool = False,
        every_fault: bool = False,
    ):
        unknown = sorted(set(faults) - set(ALL_FAULTS))
        if unknown:
            raise ValueError(
                f'unknown fault(s) {unknown}; choose from {", ".join(ALL_FAULTS)} or all'
            )
        self.second_recorder = bool(second_recorder)
        #: Inject every fault even where a slow (loaded) machine makes the run outlast
        #: `duration` (the CI soaks: their checks need each fault, not the length).
        self.every_fault = bool(every_fault)
        self.duration = float(duration)
        self.rt_priority = int(rt_priority)
        self.fused_loop = bool(fused_loop)
        # With the fused loop the controller and the valve driver share one process: killing it
        # is kill_driver (the board's watchdog vents); there is no controller alone to kill.
        self.faults = [
            f for f in ALL_FAULTS if f in faults and not (self.fused_loop and f in FUSED_AWAY)
        ]
        self.driver_process = 'control_loop' if self.fused_loop else 'valve_driver'
        self.out = Path(out or tempfile.mkdtemp(prefix='equimus_soak_')).resolve()
        self.controller = controller
        self.reference = reference
        self.gap = gap
        self.domain_id = 102 + os.getpid() % 100 if domain_id is None else int(domain_id)
        self.echo = echo
        self.log = log
        cfg = default_config_dir()
        ctrl = _load_params(cfg, 'control.yaml', 'controller')
        est = _load_params(cfg, 'control.yaml', 'estimator')
        valve = _load_params(cfg, 'valve.yaml', 'valve_driver')
        self.stale_timeout = float(ctrl.get('stale_timeout', 0.25))
        self.max_hold = float(est.get('max_hold', 0.1))
        self.command_timeout = float(valve.get('command_timeout_s', 0.25))
        self.reconnect_max = float(valve.get('reconnect_backoff_max_s', 2.0))
        recorder = _load_params(cfg, 'recorder.yaml', 'recorder')
        self.flush_period = float(recorder.get('flush_period', 0.5))
        self.frames: list[tuple[int, float]] = []  # (frame number, transmit time)
        self.records: list[FaultRecord] = []
        self.unexpected: list[str] = []
        self.expected_down: set = set()
        self.t_start = 0.0

    # ------------------------------------------------------------------ plumbing
    def _on_sent(self, frame_number: int, stamp_ticks: int) -> None:
        self.frames.append((frame_number, stamp_ticks * 100 / 1e9))

    def sleep(self, seconds: float) -> None:
        """Sleep while watching for nodes that die on their own (a failure of the soak)."""
        end = time.monotonic() + seconds
        while True:
            for name, proc in self.sup.procs.items():
                code = proc.poll()
                if code is not None and name not in self.expected_down:
                    tail = ''.join(self.sup.output.get(name, [])[-10:])
                    self.unexpected.append(
                        f'{name} exited with code {code} at '
                        f't={time.monotonic() - self.t_start:.1f} s:\n{tail}'
                    )
                    self.expected_down.add(name)
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(0.02, left))

    def _emulate_hardware_priority(self) -> None:
        # The emulators stand in for Motive and the DAC board, which on the rig are other machines
        # and a microcontroller: with rt_priority their threads run one level above the graph's
        # control path. New threads inherit this thread's policy (SCHED_RESET_ON_FORK would reset
        # them too: Linux applies it to every new task), so it is set plainly here and dropped
        # in `_end_hardware_priority` before any graph process is started.
        problem = realtime_problem(self.rt_priority + 1)
        if problem:
            raise ValueError(f'--rt-priority {self.rt_priority}: {problem}')
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.rt_priority + 1))

    def _end_hardware_priority(self) -> None:
        """This thread back to the normal policy: the processes it starts do not inherit FIFO."""
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))

    def run(self) -> tuple[dict[str, object], list[Check]]:
        from equimus_bringup.rig_emulator import BODIES, EmulatedRig
        from equimus_hw.natnet.emulator import NatNetEmulator

        if self.rt_priority:
            self._emulate_hardware_priority()
        self.out.mkdir(parents=True, exist_ok=True)
        self.bag = self.out / 'bag'
        self.bags = [self.bag]  # the main recorder's bags (a new one after each kill)
        self.load_bag = self.out / 'bag_load' if self.second_recorder else None
        if self.bag.exists():
            raise ValueError(f'{self.bag} exists already: give the soak a new --out folder')
        link = str(self.out / 'dac')
        cmd_port, data_port = free_udp_ports(2)
        self.natnet = NatNetEmulator(
            command_port=cmd_port,
            data_port=data_port,
            multicast=True,
            rate_hz=RATE_HZ,
            bodies=BODIES,
            on_sent=self._on_sent,
        )
        board_log = str(self.out / 'board.jsonl')
        rig = EmulatedRig(
            link, self.natnet, rate=RATE_HZ, position_noise=0.0002, board_log=board_log
        )
        self.board = rig.board
        self.rig = rig
        specs = describe_graph(
            'hardware',
            {
                'controller': self.controller,
                'reference': self.reference,
                'record': 'true',
                'rt_priority': str(self.rt_priority),
                'fused_loop': str(self.fused_loop).lower(),
                'bag': str(self.bag),
                'auto_arm': 'true',
                'serial_port': link,
                'calibration': 'none',  # the emulated board's DAC chain is the nominal one
                'natnet_command_port': str(cmd_port),
                'natnet_data_port': str(data_port),
            },
        )
        if self.load_bag is not None:
            rec = next(sp for sp in specs if sp.name == 'recorder')
            specs.append(
                dataclasses.replace(
                    rec,
                    name='recorder_2',
                    parameters={**rec.parameters, 'bag_path': str(self.load_bag)},
                    env=dict(rec.env),
                )
            )
        # A DDS domain of its own: the soak kills nodes and injects bad commands, which must
        # never reach another graph (or a real rig) on this machine.
        # On this host only, UDP only (graph_environment): the kills must not leave a
        # shared-memory port locked for the restarted nodes.
        env = dict(os.environ, ROS_DOMAIN_ID=str(self.domain_id), PYTHONUNBUFFERED='1')
        local = localhost_environment('hardware', env)
        env.update(local)
        for spec in specs:  # the graph's DDS settings for the soak's range, not the caller's
            spec.env.update(local)
        self.sup = SoakSupervisor(specs, echo=self.echo, env=env)
        udp_drops0 = A.udp_receive_buffer_drops()
        self.t_start = time.monotonic()
        wall0, real0 = time.monotonic(), time.time()
        self.log(
            f'[soak] {self.duration:.0f} s, '
            f'{"fused control_loop" if self.fused_loop else "one process per node"}, '
            f'faults: {", ".join(self.faults) or "none"}; records in {self.out}'
        )
        probe = sampler = None
        delay = SchedulingDelay()
        self.sched_delays = delay.delays
        rig_thread = None
        finished = False
        try:
            rig.__enter__()
            rig_thread = threading.Thread(target=rig.run, daemon=True, name='emulated-rig')
            rig_thread.start()
            if self.rt_priority:
                self._end_hardware_priority()
            self.probe = probe = ProbeClient(env)
            self.sup.start()
            sampler = ProcSampler(
                lambda: {
                    **self.sup.pids(),
                    'soak_probe': probe.proc.pid,
                    'soak (rig emulators)': os.getpid(),
                }
            )
            sampler.start()
            delay.start()
            t_loop = self.wait_resumed(self.t_start, 60.0)
            if t_loop is None:
                raise RuntimeError(
                    'the control loop never put a non-zero pressure on the serial '
                    'line within 60 s; see graph.log'
                )
            self.t_loop = t_loop
            order, gap, warmup = self.schedule()
            self.sleep(warmup)
            # The schedule's time counts from the first pressure on the wire: graph start-up
            # (10-20 s at load 14 on 2 cores) must not eat the faults (a CI soak skipped
            # kill_controller and kill_driver that way).
            t_end = t_loop + self.duration
            for name in order:
                if not self.every_fault and time.monotonic() + 3.0 > t_end - (
                    8.0 if 'disk_full' in self.faults else 4.0
                ):
                    break
                self.log(f'[soak] t={time.monotonic() - self.t_start:6.1f} s  fault {name}')
                self.records.append(getattr(self, f'fault_{name}')())
                self.sleep(gap)
            if 'disk_full' in self.faults:
                self.sleep(max(0.0, t_end - 4.0 - time.monotonic() - 4.0))
                self.log(f'[soak] t={time.monotonic() - self.t_start:6.1f} s  fault disk_full')
                self.records.append(self.fault_disk_full())
            self.sleep(max(0.0, t_end - time.monotonic()))
            self.t_stop = time.monotonic()
            finished = True
        finally:
            try:
                codes = self.sup.stop()
            finally:
                if sampler is not None:
                    sampler.stop()
                if delay.is_alive():
                    delay.stop()
                try:
                    # Only once the graph has stopped (vented): parsing the probe's records
                    # holds this process's GIL for a second or more, and the emulated board
                    # in this process can then neither read the serial line nor run its
                    # watchdog (the one-hour soak saw a non-zero output stand 1.23 s so).
                    if probe is not None and finished:
                        probe_data = probe.dump(str(self.out / 'probe.json'))
                finally:
                    if probe is not None:
                        probe.close()
                    rig.__exit__(None, None, None)
            with open(self.out / 'graph.log', 'w') as fh:
                for name, lines in self.sup.output.items():
                    fh.writelines(f'[{name}] {line}' for line in lines)
        self.exit_codes = codes
        udp_drops1 = A.udp_receive_buffer_drops()
        self.wall = time.monotonic() - wall0
        self.real_offset = real0 - wall0  # CLOCK_REALTIME - CLOCK_MONOTONIC
        self.run_delays = sampler.run_delays
        figures, checks = self.analyse(probe_data, sampler.samples)
        # host-wide: on a quiet machine, the graph's (and the rig emulators') sockets
        figures['udp_receive_buffer_drops_host'] = (
            udp_drops1 - udp_drops0 if udp_drops0 is not None and udp_drops1 is not None else 'n/a'
        )
        (self.out / 'soak.json').write_text(
            json.dumps(
                {
                    'figures': figures,
                    'checks': [c.__dict__ for c in checks],
                    'faults': [r.__dict__ for r in self.records],
                },
                indent=1,
                default=str,
            )
        )
        return figures, checks
