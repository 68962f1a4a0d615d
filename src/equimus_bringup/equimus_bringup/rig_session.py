"""The hardware graph kept running while commanders come and go (for `equimus adapt`).

The leg side of `describe_graph('hardware')` (the rig emulator or the real rig's NatNet bridge
and valve driver, the estimator, the state publisher) is started once and stays up, disarmed
and vented, between phases. A phase brings its own commander (the controller and the reference,
or the pressure player) and its own recorder, arms the valve driver for it, runs, then ends the
commander, hands the valves back (`/valve_driver/hand_over`: disarmed, vented) and closes its
bag. Every command of every phase passes the driver's safety filter.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from equimus_bringup import prestart
from equimus_bringup.graph import ProcessSpec, describe_graph, graph_environment, resolve_args
from equimus_bringup.pressure_player import DONE
from equimus_bringup.supervisor import GraphError, Supervisor
from equimus_control.controller_node import FOLLOWING
from equimus_hw.valve.driver_node import COMMANDER_BOUND

#: s the driver has to answer hand_over, and to accept arm once the last commander has gone
ARM_TIMEOUT_S = 20.0
#: the valve driver's process, whose log says when it obeys a phase's commander
DRIVER = 'valve_driver'
#: the running graph's estimator, whose output and stacks a phase's commander timeout shows
ESTIMATOR = 'estimator'
#: s a phase's recorder has to list the rig's topics before its commander starts
RECORDER_READY_S = 30.0
#: lines of a process's output, and of its stacks asked for then, a phase's timeout error shows
SHOWN_LINES = 12
STACK_LINES = 60
#: the processes a phase brings: they are not part of the running graph
PHASE_PROCESSES = ('controller', 'reference', 'recorder', 'pressure_player')
#: topics a phase's recorder must have found before the valves are armed
READY_TOPICS = ('/joint_states', '/valve/pressure', '/valve/applied', '/valve/command')

Log = Callable[[str], None]


class SessionSupervisor(Supervisor):
    """A Supervisor whose phase processes can be started and ended while the graph runs."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002,ANN003 (Supervisor's)
        super().__init__(*args, **kwargs)
        self._since: dict[str, int] = {}

    def spawn(self, spec: ProcessSpec) -> None:
        self.specs.append(spec)
        self._since[spec.name] = len(self.output.get(spec.name, []))  # this run's output
        self._spawn(spec)

    def end(self, name: str, timeout: float = 5.0) -> int | None:
        """SIGINT, then SIGTERM and SIGKILL as `stop` does; the process leaves the graph."""
        import signal

        proc = self.procs.pop(name, None)
        self.specs = [s for s in self.specs if s.name != name]
        if proc is None:
            return None
        if proc.poll() is None:
            for sig, wait in ((signal.SIGINT, timeout), (signal.SIGTERM, 2.0), (signal.SIGKILL, 5)):
                self._signal(proc, sig)
                try:
                    proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        return proc.returncode

    def said(self, name: str, text: str) -> bool:
        """Whether the process's current run has printed `text`."""
        lines = self.output.get(name, [])
        return any(text in line for line in lines[self._since.get(name, 0) :])


@dataclass
class PhaseRecord:
    """What a phase did (wall clock, s since the epoch: the hardware graph's ROS time)."""

    name: str
    bag: str
    armed_at: float
    ended_at: float
    commander: str


class RigSession:
    """The running hardware graph (see the module docstring). `args` are its launch arguments
    (e.g. emulator, rig_truth, serial_port, natnet_server, natnet ports)."""

    def __init__(self, args: Mapping[str, str], log: Log = print, echo: bool = False):
        self.args = {k: v for k, v in args.items() if k not in ('record', 'bag', 'auto_arm')}
        self.log = log
        self.echo = echo
        self.sup: SessionSupervisor | None = None
        self._output: dict[str, list[str]] = {}

    def _specs(self, extra: Mapping[str, str]) -> tuple[list[ProcessSpec], dict[str, str]]:
        overrides = {**self.args, **extra}
        try:
            args = resolve_args('hardware', overrides)
            return describe_graph('hardware', {**overrides, 'bag': args['bag']}), args
        except ValueError as exc:
            raise prestart.StartError(str(exc)) from None

    def start(self) -> None:
        """Checks (parameter files, the domain) and starts the graph without commander."""
        start = prestart.check('hardware', {**self.args, 'auto_arm': 'false', 'record': 'false'})
        specs = [s for s in start.specs if s.name not in PHASE_PROCESSES]
        self.sup = SessionSupervisor(specs, echo=self.echo, drivers_listed=start.drivers_listed)
        self.log(f'[rig] hardware graph: {", ".join(s.name for s in specs)}')
        try:
            self.sup.start()
        except GraphError:
            self.stop()
            raise

    @property
    def running(self) -> bool:
        return self.sup is not None

    def stop(self) -> dict[str, int]:
        if self.sup is None:
            return {}
        codes = self.sup.stop()
        self._output = dict(self.sup.output)
        self.sup = None
        return codes

    def output(self) -> dict[str, list[str]]:
        """Every process's output so far (also after `stop`)."""
        return dict(self.sup.output) if self.sup is not None else dict(self._output)

    # ----- phases ------------------------------------------------------------------------------
    def task(
        self,
        name: str,
        bag: Path,
        duration: float,
        controller: str,
        params_file: str = '',
        policy_file: str = '',
        reference: str = 'triangle',
    ) -> PhaseRecord:
        """The controller and the reference for `duration` s after the valves are armed."""
        extra = {
            'controller': controller,
            'params_file': params_file,
            'policy_file': policy_file,
            'reference': reference,
            'record': 'true',
            'bag': str(bag),
        }
        specs, args = self._specs(extra)
        chosen = [s for s in specs if s.name in ('recorder', 'reference', 'controller')]
        prestart.check_parameters(chosen, args)
        return self._phase(
            name,
            bag,
            chosen,
            lambda armed: time.time() >= armed + duration,
            ready=('controller', FOLLOWING),
        )

    def play(self, name: str, bag: Path, csv: Path, timeout: float) -> PhaseRecord:
        """A pressure trajectory (pressure_player) until it is done (at most `timeout` s)."""
        specs, args = self._specs({'record': 'true', 'bag': str(bag)})
        recorder = next(s for s in specs if s.name == 'recorder')
        player = ProcessSpec(
            'pressure_player',
            'equimus_bringup',
            'pressure_player',
            parameters={'file': str(Path(csv).resolve())},
            env=graph_environment('hardware'),
        )
        assert self.sup is not None
        sup = self.sup
        end = time.time() + timeout

        def finished(armed: float) -> bool:
            if time.time() > end:
                raise GraphError(f'{name}: the trajectory did not end within {timeout:g} s')
            return sup.said('pressure_player', DONE)

        return self._phase(
            name,
            bag,
            [recorder, player],
            finished,
            settle=0.5,
            ready=('pressure_player', 'waiting for the valve driver to arm'),
        )

    def _phase(
        self,
        name: str,
        bag: Path,
        specs: Sequence[ProcessSpec],
        done: Callable[[float], bool],
        settle: float = 0.0,
        ready: tuple[str, str] = ('', ''),
    ) -> PhaseRecord:
        """ready: (process, text of its log): the commander is up, arm for it."""
        if self.sup is None:
            raise GraphError('the rig session is not running')
        sup = self.sup
        recorder = next(s for s in specs if s.name == 'recorder')
        commanders = [s for s in specs if s is not recorder]
        try:
            for spec in specs:  # all at once: their start-up (imports, discovery) overlaps
                sup.spawn(spec)
            self._wait_said(sup, *ready)
            self._wait_recording(sup)
            arm_call, armed = self._arm(sup)
            self.log(
                f'[rig] {name}: armed, running (the commander obeyed {armed - arm_call:.2f} s '
                'after the arm)'
            )
            while not done(armed):
                failed = sup.poll()
                if failed:
                    raise GraphError(failed)
                time.sleep(0.05)
            if settle:
                time.sleep(settle)
            ended = time.time()
            commander = next(
                (s.name for s in commanders if s.name in ('controller', 'pressure_player')), ''
            )
            for spec in commanders:
                sup.end(spec.name)
            ok, message = sup.lifecycle.trigger('/valve_driver/hand_over', ARM_TIMEOUT_S)
            if not ok:
                raise GraphError(f'valve_driver refused the hand-over: {message}')
        finally:
            for spec in specs:
                sup.end(spec.name)
        self.log(f'[rig] {name}: done, vented; bag {bag}')
        return PhaseRecord(name, str(bag), armed, ended, commander)

    def _wait_said(self, sup: SessionSupervisor, process: str, text: str) -> None:
        if process:
            _wait_until(
                sup,
                lambda: sup.said(process, text),
                time.monotonic() + RECORDER_READY_S,
                f'{process} did not start within {RECORDER_READY_S:g} s (no "{text}")',
                show=(process, ESTIMATOR),
            )

    def _wait_recording(self, sup: SessionSupervisor) -> None:
        _wait_until(
            sup,
            lambda: all(sup.said('recorder', f'recording {t} ') for t in READY_TOPICS),
            time.monotonic() + RECORDER_READY_S,
            f'the recorder did not find {", ".join(READY_TOPICS)} within {RECORDER_READY_S:g} s',
            show=('recorder',),
        )

    def _arm(self, sup: SessionSupervisor) -> tuple[float, float]:
        """Arm the driver once the phase's commander is its only publisher; the wall times of
        the arm and of the driver then obeying that commander's first command (the phase's
        start).

        A driver that has not discovered the new process's publisher yet does not hear its
        commands (DDS discovery; 1.2 s after the arm in one CI run), and meanwhile the valves
        stay vented, which a phase timed from the arm would score as the controller's."""
        end = time.monotonic() + ARM_TIMEOUT_S
        since = len(sup.output.get(DRIVER, []))  # this phase's lines of the driver from here
        sup.arm_driver(ARM_TIMEOUT_S)
        armed = time.time()
        _wait_until(
            sup,
            lambda: any(COMMANDER_BOUND in line for line in sup.output.get(DRIVER, [])[since:]),
            end,
            f'valve_driver was armed but obeyed no command of the phase within '
            f'{ARM_TIMEOUT_S:g} s: it does not hear the commander (DDS discovery between the '
            'processes; check ROS_DOMAIN_ID and the network interfaces)',
            period=0.02,
        )
        return armed, time.time()


def _wait_until(
    sup: SessionSupervisor,
    done: Callable[[], bool],
    end: float,
    timeout_error: str,
    period: float = 0.05,
    show: Sequence[str] = (),
) -> None:
    """Until `done()`; a GraphError if a process of the graph failed or at monotonic `end`,
    then with the last lines of the processes `show` names (what they were waiting for) and
    their threads' stacks, Python's and native (where a live but silent one stands)."""
    while not done():
        failed = sup.poll()
        if failed:
            raise GraphError(failed)
        if time.monotonic() > end:
            said = {name: len(sup.output.get(name, [])) for name in show}
            native = sup.dump_stacks(show) if show else {}
            tails = [
                f"{name}'s last output, then its threads' stacks:\n"
                + ''.join(
                    lines[: said[name]][-SHOWN_LINES:] + lines[said[name] :][:STACK_LINES]
                ).rstrip()
                + ''.join(f'\n  {line}' for line in native.get(name, []))
                for name in show
                if (lines := sup.output.get(name, []))
            ]
            raise GraphError('\n'.join([timeout_error, *tails]))
        time.sleep(period)
