"""The soak's graph of processes: the supervisor's, with a node killed by SIGKILL and started
again, the valve driver handed over and armed, and a recorder that a full disk does not stop by
a signal."""

from __future__ import annotations

import signal

from equimus_bringup.graph import ProcessSpec
from equimus_bringup.supervisor import GraphError, Supervisor

#: s the soak gives the valve driver to answer ~/hand_over and to accept ~/arm after it.
HAND_OVER_TIMEOUT_S = 10.0


class SoakSupervisor(Supervisor):
    """The graph's processes, with SIGKILL/restart; the recorder ignores SIGXFSZ (disk full)."""

    def start(self) -> None:
        self.check_realtime()
        for spec in self.specs:
            self.spawn(spec.name, bring_up=False)
        for spec in self.specs:  # all processes start at once, then the managed ones go active
            self.bring_up(spec.name)

    def command(self, spec: ProcessSpec) -> list[str]:
        cmd = super().command(spec)
        if spec.name == 'recorder':
            # A full disk makes write() fail (ENOSPC) without a signal; with RLIMIT_FSIZE the
            # kernel would also send SIGXFSZ, so the recorder ignores it and sees EFBIG instead.
            cmd = ['sh', '-c', 'trap "" XFSZ; exec "$@"', 'sh', *cmd]
        return cmd

    def spawn(self, name: str, bring_up: bool = True) -> None:
        self._spawn(next(s for s in self.specs if s.name == name))
        if bring_up:
            self.bring_up(name)  # a restarted managed node: configure and activate it

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        self._signal(proc, signal.SIGKILL)
        proc.wait()

    def hand_over_and_arm(self) -> None:
        """The controller this supervisor killed is forgotten by the valve driver (not after its
        DDS lease), and the driver armed for the next lone publisher."""
        ok, message = self.lifecycle.trigger('/valve_driver/hand_over', HAND_OVER_TIMEOUT_S)
        if not ok:
            raise GraphError(f'valve_driver refused the hand-over: {message}')
        self.arm()

    def arm(self) -> None:
        """Arm the valve driver, asked again while a publisher that has just gone (the probe's)
        is still on its view of the graph."""
        self.arm_driver(HAND_OVER_TIMEOUT_S, watch=False)  # a killed node may be down

    def pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self.procs.items() if p.poll() is None}
