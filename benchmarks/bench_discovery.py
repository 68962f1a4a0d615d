"""How soon does a participant that joins later hear the nodes of a running graph? The
supervisor's look for another graph's valve driver, the domain check and `equimus valve` all
depend on it (docs/reliability.md, "A running graph is heard within a second").

    python benchmarks/bench_discovery.py --participants 8 --newcomers 10

`--participants` processes, each one node, are started with a sim graph's DDS environment
(`graph_environment('sim')`) and left running for `--settle` s, past their first announcements.
Then, `--newcomers` times, a new process joins as the supervisor's lifecycle client does (the
LOCALHOST range, no profile) and times how long until it lists every one of their nodes. This
is done once with the graph's profile (`graph`) and once with the same environment without it,
Fast DDS's defaults (`default`), side by side. Refuses a domain where a graph runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

PARTICIPANT = """
import sys, time, rclpy
rclpy.init()
node = rclpy.create_node(sys.argv[1])
print('ready', flush=True)
time.sleep(3600)
"""

NEWCOMER = """
import sys, time, rclpy
want = set(sys.argv[1].split(','))
rclpy.init()
node = rclpy.create_node('newcomer')
t0 = time.monotonic()
while time.monotonic() - t0 < 30.0:
    if want <= {name for name, _ in node.get_node_names_and_namespaces()}:
        print(f'{time.monotonic() - t0:.3f}', flush=True)
        break
    time.sleep(0.01)
else:
    print('nan', flush=True)
"""


def _times(
    env: dict[str, str], newcomer_env: dict[str, str], ns: argparse.Namespace
) -> list[float]:
    names = [f'running_{i}' for i in range(ns.participants)]
    procs = [
        subprocess.Popen(
            [sys.executable, '-c', PARTICIPANT, name], env=env, stdout=subprocess.PIPE, text=True
        )
        for name in names
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != 'ready':
                raise SystemExit('bench_discovery: a participant did not start')
        time.sleep(ns.settle)
        out = []
        for _ in range(ns.newcomers):
            run = subprocess.run(
                [sys.executable, '-c', NEWCOMER, ','.join(names)],
                env=newcomer_env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            out.append(float(run.stdout.strip() or 'nan'))
        return out
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('--participants', type=int, default=8, help='running processes, one node each')
    p.add_argument('--newcomers', type=int, default=10, help='joins timed per profile')
    p.add_argument('--settle', type=float, default=5.0, help='s the running ones run first')
    p.add_argument('--domain', type=int, default=int(os.environ.get('ROS_DOMAIN_ID', '0')))
    ns = p.parse_args(argv)
    from equimus_bringup.graph import (
        DISCOVERY_RANGE_ENV,
        FASTDDS_PROFILE_ENVS,
        graph_environment,
        participant_environment,
    )
    from equimus_bringup.prestart import StartError, check_domain

    base = {k: v for k, v in os.environ.items() if k not in FASTDDS_PROFILE_ENVS}
    base.pop(DISCOVERY_RANGE_ENV, None)
    base['ROS_DOMAIN_ID'] = str(ns.domain)
    graph = {**base, **graph_environment('sim', base)}
    try:
        check_domain([], graph)
    except StartError as exc:
        print(f'bench_discovery: {exc}', file=sys.stderr)
        return 2
    newcomer = {**base, **participant_environment(graph)}
    default = {k: v for k, v in graph.items() if k not in FASTDDS_PROFILE_ENVS}
    print(
        f'{ns.participants} running participants, {ns.newcomers} newcomers each; '
        's until a newcomer lists every running node:'
    )
    for label, env in (('graph', graph), ('default', default)):
        got = _times(env, newcomer, ns)
        print(
            f'  {label:8s} p50 {statistics.median(got):.2f}  max {max(got):.2f}  '
            f'({" ".join(f"{t:.2f}" for t in got)})',
            flush=True,
        )
    print(f'load {os.getloadavg()[0]:.1f}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
