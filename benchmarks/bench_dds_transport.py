"""Round trip of a small message between two processes over the graph's DDS settings.

    python benchmarks/bench_dds_transport.py --count 2000

Both ends on the plain LOCALHOST range (Fast DDS shared memory), then both on the graph's
localhost profile (`graph_environment`: UDP on the loopback interface, no shared memory): one
Float64MultiArray of 4 values ping-ponged `--count` times, one at a time; the round trip's
percentiles in ms. What the graph's UDP-only DDS costs a hop of the split graph
(docs/reliability.md, "A SIGKILLed recorder stalled")."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ECHO = """
import rclpy
from rclpy.executors import ExternalShutdownException
from std_msgs.msg import Float64MultiArray
rclpy.init()
n = rclpy.create_node('bench_dds_echo')
pub = n.create_publisher(Float64MultiArray, '/bench_dds/pong', 10)
n.create_subscription(Float64MultiArray, '/bench_dds/ping', pub.publish, 10)
try:
    rclpy.spin(n)
except (KeyboardInterrupt, ExternalShutdownException):
    pass
"""


def _percentiles(ms: list[float]) -> dict[str, float]:
    s = sorted(ms)

    def q(p: float) -> float:
        return round(s[min(len(s) - 1, int(p * len(s)))], 3)

    return {'p50_ms': q(0.5), 'p99_ms': q(0.99), 'max_ms': round(s[-1], 3), 'n': len(s)}


def run(label: str, env: dict[str, str], count: int) -> dict:
    """Ping-pong with an echo process and a ping participant of a child process, both on `env`."""
    code = f"""
import json, time, rclpy
from std_msgs.msg import Float64MultiArray
rclpy.init()
n = rclpy.create_node('bench_dds_ping')
got = []
pub = n.create_publisher(Float64MultiArray, '/bench_dds/ping', 10)
n.create_subscription(Float64MultiArray, '/bench_dds/pong', got.append, 10)
end = time.monotonic() + 20
while not got and time.monotonic() < end:
    pub.publish(Float64MultiArray(data=[0.0] * 4))
    rclpy.spin_once(n, timeout_sec=0.1)
rtt = []
for i in range({count}):
    got.clear()
    t0 = time.perf_counter()
    pub.publish(Float64MultiArray(data=[float(i)] * 4))
    while not any(m.data[0] == float(i) for m in got):
        rclpy.spin_once(n, timeout_sec=1.0)
        if time.perf_counter() - t0 > 2.0:
            break
    rtt.append((time.perf_counter() - t0) * 1000)
shm = sorted({{ln.split()[-1] for ln in open('/proc/self/maps') if '/dev/shm/fastdds' in ln}})
print(json.dumps({{'rtt': rtt, 'shm_segments': len(shm)}}))
"""
    echo = subprocess.Popen([sys.executable, '-c', ECHO], env=env)
    try:
        out = subprocess.run(
            [sys.executable, '-c', code], env=env, capture_output=True, text=True, check=True
        ).stdout
    finally:
        echo.terminate()
        try:
            echo.wait(5.0)
        except subprocess.TimeoutExpired:  # rclpy's shutdown at exit can hang after SIGTERM
            echo.kill()
            echo.wait()
    res = json.loads(out.strip().splitlines()[-1])
    return {'transport': label, **_percentiles(res['rtt']), 'shm_segments': res['shm_segments']}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument('--count', type=int, default=2000, help='round trips per transport')
    p.add_argument('--domain-id', type=int, default=150 + os.getpid() % 50)
    ns = p.parse_args(argv)
    from equimus_bringup.graph import DISCOVERY_RANGE_ENV, TRANSPORT_CHOICE_ENVS, graph_environment

    base = {k: v for k, v in os.environ.items() if k not in TRANSPORT_CHOICE_ENVS}
    base.update({'ROS_DOMAIN_ID': str(ns.domain_id), DISCOVERY_RANGE_ENV: 'LOCALHOST'})
    rows = [
        run('LOCALHOST range (shared memory)', base, ns.count),
        run('graph profile (UDP loopback)', {**base, **graph_environment('sim', base)}, ns.count),
    ]
    print(f'load {os.getloadavg()[0]:.1f}, {time.strftime("%H:%M:%S", time.gmtime())} UTC')
    for r in rows:
        print(json.dumps(r))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
