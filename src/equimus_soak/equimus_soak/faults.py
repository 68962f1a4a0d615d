"""Soak faults: what is thrown at the graph and when (the fault methods of a run).

Each `fault_<name>` injects one fault through the emulators' Python API, a SIGKILL of a node
process or the probe's bad commands, waits for its outcome and returns a `FaultRecord` with the
times and facts that `checks` judges afterwards. `FaultInjection` is a mixin of `runner.Soak`,
which owns the graph, the emulated rig and the probe these methods use.
"""

from __future__ import annotations

import math
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from equimus_bringup.graph import FUSED_NODES

if TYPE_CHECKING:
    from equimus_bringup.rig_emulator import EmulatedRig
    from equimus_hw.natnet.emulator import NatNetEmulator
    from equimus_hw.valve.board_emulator import BoardEmulator
    from equimus_hw.valve.host_firmware import FirmwareBoard
    from equimus_soak.probes import ProbeClient
    from equimus_soak.supervised import SoakSupervisor

RATE_HZ = 120.0  # the emulated Motive's frame rate
FAULTS = (
    'mocap_stall',
    'untrack',
    'natnet_garbage',
    'serial_faults',
    'serial_unplug',
    'kill_controller',
    'kill_driver',
    'disk_full',
)
#: Kills of the remaining nodes of the hardware graph (kill_controller/kill_driver are in FAULTS).
KILLS = ('kill_bridge', 'kill_estimator', 'kill_reference', 'kill_recorder')
#: Every fault, in schedule order (disk_full last: it ends the recording).
ALL_FAULTS = (*FAULTS[:-1], *KILLS, FAULTS[-1])
#: Process killed by each kill fault.
KILLED = {
    'kill_bridge': 'natnet_bridge',
    'kill_estimator': 'estimator',
    'kill_reference': 'reference',
    'kill_recorder': 'recorder',
}
#: The node processes between the mocap and the valves, whose stacks a stall shows: the fused
#: loop's nodes apart or in control_loop (graph.CONTROL_PATH less the rig emulator and the sim,
#: which are no nodes of a hardware graph that print their stacks when asked).
STACKS_SHOWN = (*FUSED_NODES, 'control_loop')
#: Processes of the control path that the fused loop merges into one (cannot be killed alone).
FUSED_AWAY = ('kill_controller', 'kill_bridge', 'kill_estimator')
# After a killed node is restarted, the other processes discover its publishers within one Fast DDS
# participant announcement period (3 s); until then the recorder and the probe may miss its
# messages, so the fault-free window starts this long after control resumed.
RESTART_SETTLE_S = 3.5
BAD_COMMANDS = (
    [1e6, 1e6],
    [math.nan, 20.0],
    [-10.0, math.inf],
    [30.0, 30.0, 30.0],
    [math.inf, -math.inf],
    [math.nan, math.nan],
)


@dataclass
class FaultRecord:
    name: str
    t0: float  # fault starts
    t1: float  # fault removed
    t_clear: float  # from here the loop is expected to run normally again
    info: dict = field(default_factory=dict)


class FaultInjection:
    """The faults of a soak run (mixed into `runner.Soak`, which sets these attributes)."""

    board: BoardEmulator | FirmwareBoard
    natnet: NatNetEmulator
    rig: EmulatedRig
    sup: SoakSupervisor
    probe: ProbeClient
    frames: list[tuple[int, float]]
    faults: list[str]
    gap: float | None
    duration: float
    expected_down: set
    bags: list[Path]
    out: Path
    driver_process: str
    command_timeout: float
    stale_timeout: float
    reconnect_max: float
    log: Callable[[str], None]

    def sleep(self, seconds: float) -> None:
        raise NotImplementedError  # runner.Soak.sleep

    def wait_nonzero(self, timeout: float = 3.0) -> bool:
        """Wait until the board's outputs are non-zero, so a vent is an observable event."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            f = self.board.last_frame()
            if f is not None and f.accepted and any(f.codes) and time.monotonic() - f.t < 0.05:
                return True
            self.sleep(0.01)
        return False

    def wait_on_wire(self, t: float, cmd: list[float], timeout: float = 2.0) -> None:
        """Until the board has a SET frame after `t` with what `cmd` must settle at. The next
        injection waits for this, not a fixed 0.12 s: on a loaded machine the driver can take
        longer, and the check then found a command without its frame (the check itself is
        unchanged, in checks.py). A command the driver must ignore changes nothing to wait
        for: 0.12 s as before (below the driver's watchdog, which would vent)."""
        from equimus_soak.analysis import expected_codes

        if len(cmd) != 2:
            self.sleep(max(0.0, t + 0.12 - time.monotonic()))
            return
        want = expected_codes(cmd, self.board.cal.kpa_to_code)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(f.accepted and f.codes == want for f in self.board.frames_since(t)):
                return
            self.sleep(0.01)

    def wait_resumed(self, t_from: float, timeout: float) -> float | None:
        """First accepted non-zero SET after t_from (control has resumed), waiting up to
        timeout; if none, where the control path's live processes stand (`show_stacks`)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            first = next(
                (f.t for f in self.board.frames_since(t_from) if f.accepted and any(f.codes)), None
            )
            if first is not None:
                return first
            self.sleep(0.05)
        self.show_stacks(f'control did not resume within {timeout:g} s')
        return None

    def show_stacks(self, why: str) -> None:
        """The control path's live processes print their Python stacks into their logs, and
        their native stacks go to the soak's log: a live but silent node (an estimator that
        took no pose from a restarted bridge, docs/reliability.md) says where it stands."""
        native = self.sup.dump_stacks(STACKS_SHOWN)
        self.log(f'[soak] {why}; native stacks of the control path ({", ".join(native)}):')
        for name, lines in native.items():
            for line in lines:
                self.log(f'[soak]   {name}: {line}')

    # ------------------------------------------------------------------ faults
    def _mocap_outage(
        self, name: str, start: Callable[[float], None], seconds: float = 1.0
    ) -> FaultRecord:
        """A mocap fault that lasts `seconds` once started; control must resume after it."""
        nz = self.wait_nonzero()
        t0 = time.monotonic()
        start(seconds)
        self.sleep(seconds)
        t1 = time.monotonic()
        resumed = self.wait_resumed(t1, 3.0)
        self.sleep(1.0)
        return FaultRecord(
            name,
            t0,
            t1,
            time.monotonic(),
            {'nonzero_before': nz, 'resumed': resumed, 'seconds': seconds},
        )

    def fault_mocap_stall(self) -> FaultRecord:
        return self._mocap_outage('mocap_stall', self.natnet.stall)

    def fault_untrack(self) -> FaultRecord:
        return self._mocap_outage('untrack', lambda s: self.rig.untrack('thigh', s))

    def fault_natnet_garbage(self) -> FaultRecord:
        from equimus_hw.natnet import protocol as NP
        from equimus_hw.natnet.emulator import CLOCK_HZ, ticks_now

        t0 = time.monotonic()
        malformed = out_of_order = 0
        data_sock = self.natnet.data_sock
        assert data_sock is not None, 'the rig (and its NatNet emulator) runs during the faults'
        for _ in range(6):
            self.natnet.inject_malformed(10)
            malformed += 10
            last = self.frames[-1][0]
            for back in (2, 3, 4):
                f = self.natnet.build_frame(time.monotonic() - self.natnet.t_start)
                f.frame_number = last - back
                # Sent 1 s ago, as a datagram the network delayed: late however far the
                # bridge has moved on (a fresh stamp would make it a take scrubbed back).
                sent = ticks_now() - CLOCK_HZ
                f.stamp_transmit = f.stamp_data_received = sent
                f.stamp_mid_exposure = sent - 40_000
                data_sock.sendto(
                    NP.encode_message(f, self.natnet.version),
                    (self.natnet.group, self.natnet.data_port),
                )
                out_of_order += 1
            self.sleep(0.1)
        t1 = time.monotonic()
        self.sleep(1.5)
        return FaultRecord(
            'natnet_garbage',
            t0,
            t1,
            time.monotonic(),
            {'malformed': malformed, 'out_of_order': out_of_order},
        )

    def fault_serial_faults(self) -> FaultRecord:
        self.wait_nonzero()
        rej0 = len(self.board.rejections)
        t0 = time.monotonic()
        self.board.corrupt_next_frames(5)
        self.sleep(0.3)
        self.board.drop_next_bytes(30)
        self.sleep(0.3)
        t_stall = time.monotonic()
        self.board.stall(True)
        self.sleep(0.15)
        self.board.stall(False)
        t1 = time.monotonic()
        resumed = self.wait_resumed(t1, 3.0)
        self.sleep(1.0)
        return FaultRecord(
            'serial_faults',
            t0,
            t1,
            time.monotonic(),
            {
                'corrupted': 5,
                'dropped_bytes': 30,
                'stall': [t_stall, t1],
                'board_rejections': len(self.board.rejections) - rej0,
                'resumed': resumed,
            },
        )

    def fault_serial_unplug(self) -> FaultRecord:
        self.wait_nonzero()
        t0 = time.monotonic()
        self.board.disappear()
        self.sleep(1.0)
        self.board.reappear()
        t1 = time.monotonic()
        resumed = self.wait_resumed(t1, self.reconnect_max + 3.0)
        self.sleep(1.0)
        return FaultRecord('serial_unplug', t0, t1, time.monotonic(), {'resumed': resumed})

    def fault_kill_controller(self) -> FaultRecord:
        nz = self.wait_nonzero()
        self.expected_down.add('controller')
        t0 = time.monotonic()
        self.sup.kill('controller')
        self.sleep(self.command_timeout + 0.35)
        # The killed controller stays on the ROS graph for its DDS lease and the driver obeys
        # nobody else meanwhile: the supervisor, which saw it die, hands it over and arms, and
        # the probe's new publisher (the only one left) is bound by its first command; it is
        # made and matched before the first injection, so discovery does not delay them.
        self.sup.hand_over_and_arm()
        self.probe.prepare()
        injected = []
        for cmd in BAD_COMMANDS:
            t = self.probe.publish(cmd)
            injected.append((t, cmd))
            self.sleep(0.05)
            self.wait_on_wire(t, cmd)
        self.probe.release()  # the commander leaves the graph: the driver disarms
        t_restart = time.monotonic()
        self.sup.spawn('controller')
        self.sup.arm()  # the restarted controller: the one publisher left
        self.expected_down.discard('controller')
        resumed = self.wait_resumed(t_restart, 20.0)
        t1 = time.monotonic()
        self.sleep(RESTART_SETTLE_S)
        return FaultRecord(
            'kill_controller',
            t0,
            t1,
            time.monotonic(),
            {
                'nonzero_before': nz,
                'injected': injected,
                't_restart': t_restart,
                'resumed': resumed,
            },
        )

    def fault_kill_driver(self) -> FaultRecord:
        nz = self.wait_nonzero()
        self.expected_down.add(self.driver_process)
        t0 = time.monotonic()
        self.sup.kill(self.driver_process)
        self.sleep(0.6)
        t_restart = time.monotonic()
        self.sup.spawn(self.driver_process)
        self.expected_down.discard(self.driver_process)
        resumed = self.wait_resumed(t_restart, 20.0)
        t1 = time.monotonic()
        self.sleep(RESTART_SETTLE_S)
        return FaultRecord(
            'kill_driver',
            t0,
            t1,
            time.monotonic(),
            {'nonzero_before': nz, 't_restart': t_restart, 'resumed': resumed},
        )

    def _kill_restart(self, fault: str, down_s: float, before_restart=None) -> FaultRecord:
        """SIGKILL a node, leave it down `down_s`, restart it and wait for control."""
        name = KILLED[fault]
        nz = self.wait_nonzero()
        self.expected_down.add(name)
        t0 = time.monotonic()
        self.sup.kill(name)
        self.sleep(down_s)
        info: dict = {'nonzero_before': nz}
        if before_restart is not None:
            info.update(before_restart())
        t_restart = time.monotonic()
        self.sup.spawn(name)
        self.expected_down.discard(name)
        resumed = self.wait_resumed(t_restart, 20.0)
        if fault == 'kill_recorder':
            # control never stopped: the fault is over once the new recorder writes its bag
            info['recording'] = self.wait_recording(self.bags[-1], 20.0)
        t1 = time.monotonic()
        self.sleep(RESTART_SETTLE_S)
        info.update({'t_restart': t_restart, 'resumed': resumed})
        return FaultRecord(fault, t0, t1, time.monotonic(), info)

    def wait_recording(self, bag: Path, timeout: float) -> float | None:
        """When the recorder of `bag` first flushed messages (its MCAP file grew), or None."""
        end = time.monotonic() + timeout
        size0 = None
        while time.monotonic() < end:
            files = sorted(bag.glob('*.mcap'))
            size = files[0].stat().st_size if files else None
            if size is not None:
                if size0 is None:
                    size0 = size
                elif size > size0:
                    return time.monotonic()
            self.sleep(0.05)
        return None

    def fault_kill_bridge(self) -> FaultRecord:
        return self._kill_restart('kill_bridge', self.stale_timeout + 0.35)

    def fault_kill_estimator(self) -> FaultRecord:
        return self._kill_restart('kill_estimator', self.stale_timeout + 0.35)

    def fault_kill_reference(self) -> FaultRecord:
        return self._kill_restart('kill_reference', 1.0)

    def fault_kill_recorder(self) -> FaultRecord:
        def new_bag() -> dict:
            killed = self.bags[-1]
            self.bags.append(self.out / f'bag_{len(self.bags)}')
            spec = next(sp for sp in self.sup.specs if sp.name == 'recorder')
            spec.parameters['bag_path'] = str(self.bags[-1])
            return {'killed_bag': str(killed), 'new_bag': str(self.bags[-1])}

        return self._kill_restart('kill_recorder', 1.0, new_bag)

    def fault_disk_full(self) -> FaultRecord:
        mcap = sorted(self.bags[-1].glob('*.mcap'))
        size = mcap[0].stat().st_size if mcap else 0
        limit = size + 4096
        t0 = time.monotonic()
        resource.prlimit(self.sup.procs['recorder'].pid, resource.RLIMIT_FSIZE, (limit, limit))
        self.sleep(4.0)
        t1 = time.monotonic()
        return FaultRecord('disk_full', t0, t1, t1, {'limit_bytes': limit})

    # ------------------------------------------------------------------ run
    def schedule(self) -> tuple[list[str], float, float]:
        """(fault order, gap between faults, warm-up): repeated cycles in a long soak."""
        nominal = {
            'mocap_stall': 3.5,
            'untrack': 3.5,
            'natnet_garbage': 2.2,
            'serial_faults': 2.5,
            'serial_unplug': 3.5,
            'kill_controller': 8.5,
            'kill_driver': 7.0,
            'kill_bridge': 7.5,
            'kill_estimator': 7.5,
            'kill_reference': 6.0,
            'kill_recorder': 7.0,
        }
        cyc = [f for f in self.faults if f != 'disk_full']
        warmup = 4.0
        tail = 4.0 + (4.0 if 'disk_full' in self.faults else 0.0)
        body = max(0.0, self.duration - warmup - tail)
        need = sum(nominal[f] for f in cyc)
        if not cyc:
            return [], 0.0, warmup
        gap = self.gap if self.gap is not None else max(1.0, min(20.0, (body - need) / len(cyc)))
        n = max(1, int(body // (need + gap * len(cyc)))) if body > need else 1
        return cyc * n, gap, warmup
