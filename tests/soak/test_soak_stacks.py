"""A soak whose control does not resume after a fault says where the control path's live
processes stand (docs/reliability.md: an estimator that took no pose from a restarted bridge)."""

import time

from equimus_soak.faults import STACKS_SHOWN, FaultInjection


class _Board:
    def __init__(self) -> None:
        self.frames: list = []

    def frames_since(self, t: float) -> list:
        return [f for f in self.frames if f.t > t]


class _Sup:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def dump_stacks(self, names):
        self.asked = list(names)
        return {'estimator': ['LWP 9 "python": futex_wait < pthread_mutex_lock']}


class _Soak(FaultInjection):
    def __init__(self) -> None:
        self.board, self.sup, self.lines = _Board(), _Sup(), []
        self.log = self.lines.append

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def test_control_that_does_not_resume_shows_the_native_stacks_of_the_control_path():
    soak = _Soak()
    assert soak.wait_resumed(time.monotonic(), 0.2) is None
    assert soak.sup.asked == list(STACKS_SHOWN)
    assert soak.lines[0].startswith('[soak] control did not resume within 0.2 s'), soak.lines
    assert soak.lines[1:] == [
        '[soak]   estimator: LWP 9 "python": futex_wait < pthread_mutex_lock'
    ], soak.lines


def test_control_that_resumes_asks_no_stacks():
    class Frame:
        t, accepted, codes = 0.0, True, (5, 0)

    soak = _Soak()
    Frame.t = time.monotonic() + 0.05
    soak.board.frames.append(Frame())
    assert soak.wait_resumed(Frame.t - 0.1, 1.0) == Frame.t
    assert soak.sup.asked == [] and soak.lines == []
