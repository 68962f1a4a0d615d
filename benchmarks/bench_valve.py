"""Valve driver latency: pressure command published -> its SET bytes read on the serial line.

The DAC board emulator runs as its own process on a real pty and logs the CLOCK_MONOTONIC time at
which it read each SET frame; valve_driver runs as its own process; this script publishes the
commands (reliable QoS, as the controller does) and stamps each publish with the same clock.
Each command maps to a unique pair of DAC codes, so every publish is matched to its frame.

    python benchmarks/bench_valve.py            # 10,000 commands at 500 Hz
    python benchmarks/bench_valve.py --quick    # 1,000 commands
"""

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

TARGET_P99_MS = 2.0
WIRE_MS_115200 = 14 * 10 / 115200 * 1e3  # a 14-byte SET frame at 115200 baud 8N1


# Baseline for comparison in the same run: the same publisher -> a bare rclpy subscriber in another
# process (no driver, no serial), which stamps each message on arrival.
_ECHO = r"""
import sys, time, rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.qos import QoSHistoryPolicy, QoSProfile, QoSReliabilityPolicy
from std_msgs.msg import Float64MultiArray
rclpy.init()
node = rclpy.create_node('bench_valve_echo')
out = open(sys.argv[1], 'w')
qos = QoSProfile(reliability=QoSReliabilityPolicy.RELIABLE, history=QoSHistoryPolicy.KEEP_LAST,
                 depth=10)
node.create_subscription(Float64MultiArray, '/bench_valve/baseline',
                         lambda m: out.write(f'{time.monotonic()} {int(m.data[0])}\n'), qos)
try:
    rclpy.spin(node)
except (KeyboardInterrupt, ExternalShutdownException):
    pass
out.close()
"""


def _wait_subscriber(pub, what):
    deadline = time.monotonic() + 30
    while pub.get_subscription_count() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    if pub.get_subscription_count() < 1:
        raise RuntimeError(f'{what} did not subscribe within 30 s')


def _publish_series(pub, n, rate_hz, make):
    """Publish make(i) for i < n at rate_hz; returns the publish time of each i."""
    period = 1.0 / rate_hz
    times = []
    t_next = time.monotonic()
    for i in range(n):
        msg = make(i)
        t_next += period
        sleep = t_next - time.monotonic()
        if sleep > 0:
            time.sleep(sleep)
        times.append(time.monotonic())
        pub.publish(msg)
    return times


def _stats(lat_ms):
    lat = sorted(lat_ms)
    return {
        'matched': len(lat),
        'p50_ms': _percentile(lat, 0.5),
        'p99_ms': _percentile(lat, 0.99),
        'max_ms': lat[-1],
    }


def _percentile(sorted_vals, q):
    return sorted_vals[min(len(sorted_vals) - 1, int(q * (len(sorted_vals) - 1) + 0.5))]


def run(quick: bool = False, n: int = None, rate_hz: float = 500.0) -> dict:
    import rclpy
    from rclpy.qos import QoSHistoryPolicy, QoSProfile, QoSReliabilityPolicy
    from std_msgs.msg import Float64MultiArray

    from equimus_hw.valve.calibration import ValveCalibration

    n = n or (1000 if quick else 10000)
    cal = ValveCalibration()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix='bench_valve_'))
    link, log = tmp / 'dac', tmp / 'frames.jsonl'
    # A private DDS domain so other sessions on this machine do not interfere.
    os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))
    env = dict(os.environ)
    emu = subprocess.Popen(
        [
            sys.executable,
            '-m',
            'equimus_hw.valve.board_emulator',
            '--link',
            str(link),
            '--log',
            str(log),
            '--watchdog-ms',
            '1000',
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    emu.stdout.readline()
    drv = subprocess.Popen(
        [
            sys.executable,
            '-m',
            'equimus_hw.valve.driver_node',
            '--ros-args',
            '-p',
            'autostart:=true',
            '-p',
            f'port:={link}',
            '-p',
            'auto_arm:=true',
            '-p',
            'require_calibration:=false',  # the emulated board is nominal
            '-p',
            'slew_rate_kpa_s:=1000000000.0',
            '-p',
            'command_timeout_s:=1.0',
            '-p',
            'keepalive_period_s:=0.5',
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node('bench_valve', context=ctx)
    qos = QoSProfile(
        reliability=QoSReliabilityPolicy.RELIABLE, history=QoSHistoryPolicy.KEEP_LAST, depth=10
    )
    pub = node.create_publisher(Float64MultiArray, '/valve/command', qos)
    base_pub = node.create_publisher(Float64MultiArray, '/bench_valve/baseline', qos)
    echo_log = tmp / 'echo.txt'
    echo = subprocess.Popen([sys.executable, '-c', _ECHO, str(echo_log)], env=env)
    codes_range = list(range(50, 340))
    kpa = [cal.code_to_kpa(c) for c in range(cal.max_code + 1)]

    def pair(i):
        return (
            codes_range[i % len(codes_range)],
            codes_range[(i // len(codes_range)) % len(codes_range)],
        )

    try:
        _wait_subscriber(base_pub, 'the baseline subscriber')
        _wait_subscriber(pub, 'valve_driver')
        time.sleep(1.0)  # link handshake
        _publish_series(base_pub, 50, rate_hz, lambda i: Float64MultiArray(data=[-1.0, 0.0]))
        base_sent = _publish_series(
            base_pub, n, rate_hz, lambda i: Float64MultiArray(data=[float(i), 0.0])
        )
        _publish_series(pub, 50, rate_hz, lambda i: Float64MultiArray(data=[kpa[45], kpa[45]]))
        sent_list = _publish_series(
            pub, n, rate_hz, lambda i: Float64MultiArray(data=[kpa[pair(i)[0]], kpa[pair(i)[1]]])
        )
        sent = {pair(i): t for i, t in enumerate(sent_list)}
        time.sleep(0.5)
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
        for proc in (drv, echo, emu):
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()

    base = []
    for line in echo_log.read_text().splitlines():
        t, i = line.split()
        if int(i) >= 0:
            base.append((float(t) - base_sent[int(i)]) * 1e3)
    seen = {}
    for line in log.read_text().splitlines():
        e = json.loads(line)
        if e.get('event') == 'set':
            key = tuple(e['codes'])
            if key in sent and key not in seen and e['t'] >= sent[key]:
                seen[key] = e['t']
    lat = [(seen[k] - sent[k]) * 1e3 for k in seen]
    if not lat or not base:
        raise RuntimeError('no command reached the serial line / the baseline subscriber')
    res = dict(
        _stats(lat),
        messages=n,
        rate_hz=rate_hz,
        target_p99_ms=TARGET_P99_MS,
        wire_ms_at_115200=WIRE_MS_115200,
        baseline={**_stats(base), 'what': 'DDS publish -> bare rclpy subscriber'},
    )
    res['p99_vs_target'] = res['p99_ms'] / TARGET_P99_MS
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--quick', action='store_true')
    ap.add_argument('-n', type=int, default=None)
    ap.add_argument('--rate', type=float, default=500.0)
    ns = ap.parse_args()
    r = run(ns.quick, ns.n, ns.rate)
    print(
        f'valve command -> serial bytes latency ({r["matched"]}/{r["messages"]} commands '
        f'matched, published at {r["rate_hz"]:g} Hz; pty, so no baud-rate delay)'
    )
    print(f'  {"p50":>8} {"p99":>8} {"max":>8}   target p99   p99/target')
    print(
        f'  {r["p50_ms"]:7.3f}ms {r["p99_ms"]:7.3f}ms {r["max_ms"]:7.3f}ms   '
        f'{r["target_p99_ms"]:.1f} ms       {r["p99_vs_target"]:.2f}'
    )
    b = r['baseline']
    print(f'  baseline, same run: {b["what"]} ({b["matched"]}/{r["messages"]})')
    print(
        f'  {b["p50_ms"]:7.3f}ms {b["p99_ms"]:7.3f}ms {b["max_ms"]:7.3f}ms   '
        f'driver/baseline p50 {r["p50_ms"] / b["p50_ms"]:.2f}, p99 {r["p99_ms"] / b["p99_ms"]:.2f}'
    )
    print(
        f'  (a real 115200-baud link adds {r["wire_ms_at_115200"]:.2f} ms of wire time per frame)'
    )


if __name__ == '__main__':
    main()
