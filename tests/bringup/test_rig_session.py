"""A rig session's phase starts when the valve driver obeys the phase's commander, not when it
was armed: a driver that has not discovered the new process's publisher yet (DDS discovery,
1.2 s in one CI run) keeps the valves vented meanwhile."""

import threading
import time

import pytest

from equimus_bringup import rig_session
from equimus_bringup.supervisor import GraphError, Supervisor
from equimus_hw.valve.driver_node import COMMANDER_BOUND


class _Lifecycle:
    def trigger(self, service: str, timeout: float) -> tuple[bool, str]:
        assert service == '/valve_driver/arm'
        return True, ''


class _Supervisor:
    """What `_arm` uses of the session's supervisor: the processes' output lines, poll, the
    lifecycle client, and the supervisor's own arming."""

    arm_driver = Supervisor.arm_driver
    dump_stacks = Supervisor.dump_stacks

    def __init__(self) -> None:
        # A commander bound in an earlier phase: it must not start this one.
        self.output = {rig_session.DRIVER: [f'[valve_driver] {COMMANDER_BOUND}/controller']}
        self.lifecycle = _Lifecycle()
        self.procs: dict = {}  # none running: no stacks to ask for

    def poll(self) -> str:
        return ''


def _session() -> rig_session.RigSession:
    return rig_session.RigSession({}, log=lambda *_: None)


def test_the_phase_starts_when_the_driver_obeys_the_commander():
    sup = _Supervisor()
    delay = 0.3

    def bind_later() -> None:
        time.sleep(delay)
        sup.output[rig_session.DRIVER].append(f'[valve_driver] {COMMANDER_BOUND}/controller')

    threading.Thread(target=bind_later).start()
    arm_call, started = _session()._arm(sup)
    assert started - arm_call >= delay * 0.9


def test_a_driver_that_never_hears_the_commander_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(rig_session, 'ARM_TIMEOUT_S', 0.3)
    with pytest.raises(GraphError, match='obeyed no command'):
        _session()._arm(_Supervisor())


class _Refusing(_Lifecycle):
    """A driver that refuses `n` arms (a commander that has just gone is still listed)."""

    def __init__(self, n: int) -> None:
        self.n, self.calls = n, 0

    def trigger(self, service: str, timeout: float) -> tuple[bool, str]:
        self.calls += 1
        return self.calls > self.n, 'two publishers'


def test_arming_is_asked_again_until_the_driver_accepts_or_a_process_ends():
    sup = _Supervisor()
    sup.lifecycle = _Refusing(2)
    sup.arm_driver(5.0)
    assert sup.lifecycle.calls == 3
    sup.lifecycle = _Refusing(1000)
    with pytest.raises(GraphError, match='did not arm: two publishers'):
        sup.arm_driver(0.3)
    sup.poll = lambda: 'controller exited with code -9'
    with pytest.raises(GraphError, match='controller exited'):
        sup.arm_driver(5.0)
    sup.lifecycle = _Refusing(1)
    sup.arm_driver(5.0, watch=False)  # the soak kills its own nodes
    assert sup.lifecycle.calls == 2


def test_a_phase_that_times_out_shows_what_its_processes_last_said_and_where_they_stand():
    sup = _Supervisor()
    sup.output['controller'] = [f'line {i}\n' for i in range(30)] + ['venting: stale\n']
    asked = []

    def dump_stacks(names):  # a node prints its stacks on STACK_DUMP_SIGNAL
        asked.extend(names)
        sup.output['controller'] += ['Thread 0x1 (most recent call first):\n', '  File "x"\n']
        return {'controller': ['LWP 7 "python": poll < spin']}

    sup.dump_stacks = dump_stacks
    with pytest.raises(GraphError) as err:
        rig_session._wait_until(
            sup, lambda: False, time.monotonic() + 0.1, 'no start', show=('controller', 'absent')
        )
    text = str(err.value)
    assert asked == ['controller', 'absent']
    assert text.startswith('no start\ncontroller'), text
    assert 'venting: stale\nThread 0x1' in text, text
    assert text.endswith('File "x"\n  LWP 7 "python": poll < spin'), text
    assert 'line 18' not in text and 'line 19' in text and 'absent' not in text
