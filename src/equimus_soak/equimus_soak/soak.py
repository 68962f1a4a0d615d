"""Reliability soak: the full hardware-mode graph against the emulated rig, with faults thrown at
it.

    python -m equimus_soak.soak --duration 60 --faults all --out out/soak

The ROS nodes of `describe_graph('hardware')` (NatNet bridge, valve driver, estimator,
controller, reference, recorder) run as processes started here, so the soak can SIGKILL and
restart them. The rig (MuJoCo leg behind the DAC board emulator on a pty and the NatNet server
emulator on loopback) runs inside this process, so faults go in through the emulators' Python API
and every frame the board decodes is logged with its time. A small probe node in its own process
(`soak_probe`) records /valve/command and /diagnostics and publishes the injected bad commands.

Faults (each with its expected safe outcome, checked afterwards from the records):
  mocap_stall      stream stops 1 s: controller stale guard vents; control resumes after
  untrack          thigh loses tracking 1 s: estimator -> NaN, controller vents; resumes
  natnet_garbage   malformed and out-of-order packets: bridge counts and drops them, loop runs on
  serial_faults    corrupted frames, dropped bytes, 0.15 s of unacknowledged frames: board vents on
                   each bad frame, driver counts NAKs/timeouts and carries on
  serial_unplug    the board disappears 1 s: driver reconnects and vents until a fresh command
  kill_controller  SIGKILL: the valve driver's watchdog vents; then NaN / out-of-range /
                   wrong-length commands from the probe are vented or clamped on the wire;
                   the controller is restarted
  kill_driver      SIGKILL: the board's watchdog vents; the driver is restarted
  disk_full        the recorder's file size limit is set to the bag's size (RLIMIT_FSIZE): it
                   stops with an error on /diagnostics while the control loop runs on
Node kills (`--faults all`; with kill_controller and kill_driver: every node of the graph in turn):
  kill_bridge      SIGKILL of the NatNet bridge: no poses, the controller's stale guard vents;
                   restarted, control resumes
  kill_estimator   SIGKILL of the estimator: no joint states, the stale guard vents; resumes
  kill_reference   SIGKILL of the reference: the controller holds the last reference, no vent
  kill_recorder    SIGKILL of the recorder: control runs on; its bag (no footer) reads back
                   read-only with every message it acknowledged; restarted into a new bag
`--second-recorder` adds a second recorder process recording every topic into bag_load/: every
publisher then serves twice the subscribers (2x the nominal message load); its bag is checked too.
Invariants over the whole run: no code above the 50 kPa code on the serial line; a non-zero
output never stands longer than the board watchdog without a valid SET; the bag holds at least
every message the recorder reported as on disk; no node's RSS grows without bound.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from equimus_control import CONTROLLERS
from equimus_soak.checks import Check, format_report
from equimus_soak.faults import ALL_FAULTS, FAULTS, KILLS, FaultRecord
from equimus_soak.runner import Soak

__all__ = ['ALL_FAULTS', 'FAULTS', 'KILLS', 'Check', 'FaultRecord', 'Soak', 'format_report', 'main']


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog='python -m equimus_soak.soak',
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        '--duration',
        type=float,
        default=60.0,
        help='seconds of soak from the control loop being up (default 60)',
    )
    p.add_argument(
        '--faults', default='all', help=f'all | none | comma list of {",".join(ALL_FAULTS)}'
    )
    p.add_argument(
        '--second-recorder',
        action='store_true',
        help='a second recorder process records every topic too (2x the message load)',
    )
    p.add_argument('--out', default='', help='folder for the records (default: a new temp folder)')
    p.add_argument('--controller', default='pid', choices=CONTROLLERS)
    p.add_argument('--reference', default='sine', help='reference trajectory (default sine)')
    p.add_argument('--gap', type=float, default=None, help='fault-free seconds between faults')
    p.add_argument(
        '--domain-id',
        type=int,
        default=None,
        help='ROS_DOMAIN_ID for the whole soak (default: 102 + pid %% 100, never 0)',
    )
    p.add_argument('--echo', action='store_true', help="print the nodes' output as it comes")
    p.add_argument(
        '--rt-priority',
        type=int,
        default=0,
        help='SCHED_FIFO priority of the control path (graph argument rt_priority); the '
        'emulated rig runs one above it. 0 = normal scheduling (default)',
    )
    p.add_argument(
        '--fused-loop',
        action='store_true',
        help='run the control path as one process (graph argument fused_loop); '
        'kill_controller does not apply then',
    )
    ns = p.parse_args(argv)
    faults = (
        ALL_FAULTS
        if ns.faults == 'all'
        else ()
        if ns.faults == 'none'
        else tuple(f.strip() for f in ns.faults.split(',') if f.strip())
    )
    out = ns.out or None
    if out:
        out = os.path.join(out, time.strftime('%Y%m%d-%H%M%S'))
    try:
        soak = Soak(
            ns.duration,
            faults,
            out,
            ns.controller,
            ns.reference,
            ns.gap,
            ns.echo,
            domain_id=ns.domain_id,
            rt_priority=ns.rt_priority,
            fused_loop=ns.fused_loop,
            second_recorder=ns.second_recorder,
        )
        fig, checks = soak.run()
    except (ValueError, RuntimeError) as exc:
        print(f'soak: {exc}', file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print('soak: interrupted', file=sys.stderr)
        return 130
    print(format_report(fig, checks))
    print(f'\nrecords: {soak.out} (soak.json, board.jsonl, probe.json, graph.log, bag/)')
    return 0 if all(c.ok for c in checks) else 1


if __name__ == '__main__':
    sys.exit(main())
