"""Do the rig's running processes keep serving phase after phase? `equimus adapt`'s rig session
in a loop: one hardware graph on the emulated rig stays up while short phases come and go (their
own controller, reference and recorder, armed, run, handed back), alternating the PID and the
shipped policy, until `--phases` have run or one fails (docs/reliability.md, the rig's estimator
that fell silent between two phases).

    python benchmarks/rig_phases.py --phases 400
    python benchmarks/rig_phases.py --phases 100 --loaders 1 --out out/rig_phases

A failed phase's error is printed whole: the silent process's last lines and its Python and
native stacks (`rig_session`). `--loaders` busy loops load the cores beside it. Refuses a domain
where a graph runs. Prints a line per phase and, at the end, the count and the phases' wall time
(p50, max).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('--phases', type=int, default=100)
    p.add_argument('--seconds', type=float, default=1.5, help='s each phase runs once armed')
    p.add_argument('--loaders', type=int, default=0, help='busy loops on the cores beside it')
    p.add_argument('--out', default='', help="the phases' bags (default: a temporary folder)")
    p.add_argument('--domain', type=int, default=int(os.environ.get('ROS_DOMAIN_ID', '0')))
    ns = p.parse_args(argv)
    os.environ['ROS_DOMAIN_ID'] = str(ns.domain)
    from equimus_bringup.adapt import SHIPPED_POLICY
    from equimus_bringup.prestart import StartError
    from equimus_bringup.rig_session import RigSession
    from equimus_bringup.supervisor import GraphError
    from equimus_hw.natnet.ports import free_udp_port_pair

    out = Path(ns.out or tempfile.mkdtemp(prefix='rig_phases_'))
    out.mkdir(parents=True, exist_ok=True)
    port = free_udp_port_pair()
    session = RigSession(
        {
            'emulator': 'true',
            'serial_port': str(out.resolve() / 'dac'),
            'natnet_command_port': str(port),
            'natnet_data_port': str(port + 1),
        },
        log=lambda line: print(time.strftime('%H:%M:%S'), line, flush=True),
    )
    loaders = [
        subprocess.Popen([sys.executable, '-c', 'while True: pass']) for _ in range(ns.loaders)
    ]
    times: list[float] = []
    failed = ''
    try:
        session.start()
        for k in range(ns.phases):
            policy = k % 2 == 1
            t0 = time.monotonic()
            session.task(
                f'phase {k} ({"policy" if policy else "pid"})',
                out / f'bag_{k}',
                ns.seconds,
                'policy' if policy else 'pid',
                policy_file=str(SHIPPED_POLICY) if policy else '',
            )
            times.append(time.monotonic() - t0)
    except (GraphError, StartError) as exc:
        failed = str(exc)
    finally:
        session.stop()
        for proc in loaders:
            proc.kill()
            proc.wait()
    if failed:
        print(f'phase {len(times)} failed: {failed}', flush=True)
    times.sort()
    timing = f'p50 {times[len(times) // 2]:.1f} s, max {times[-1]:.1f} s' if times else ''
    print(
        f'{len(times)} of {ns.phases} phases ran ({timing}); {ns.loaders} busy loops, load '
        f'{os.getloadavg()[0]:.1f}; bags in {out}'
    )
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
