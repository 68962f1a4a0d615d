"""NatNet benchmark: decode throughput per version vs the 120 Hz arrival rate, and end-to-end
latency from a frame leaving the emulator to its pose arriving at a ROS subscriber.

Run: ``source scripts/env.sh && python benchmarks/bench_natnet.py [--quick]``.
The emulator runs in this process (real UDP sockets), the bridge in a subprocess (real DDS), the
subscriber in this process. Both ends read CLOCK_MONOTONIC (perf_counter_ns), so the latency is
the difference of two readings on one clock; the frame number travels in the pose's x field.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, 'src', 'equimus_hw'))

from equimus_hw.natnet import protocol as P  # noqa: E402
from equimus_hw.natnet.emulator import NatNetEmulator  # noqa: E402
from equimus_hw.natnet.ports import free_udp_ports  # noqa: E402

ARRIVAL_HZ = 120.0


def three_body_frame(version):
    e = NatNetEmulator(version='.'.join(map(str, version)))
    return e._stamp_and_encode(e.build_frame(1.0))


def _decoders(version) -> dict:
    """The full decoder and the receive path's FrameReader (a frame read through the layout of
    the frame before it), each as one call on a datagram."""
    reader = P.FrameReader(version)
    return {
        'decode_frame': lambda pkt: P.decode_message(pkt, version),
        'FrameReader': lambda pkt: P.decode_message(pkt, version, reader),
    }


def decode_throughput(quick: bool) -> dict:
    out = {}
    n = 2000 if quick else 20000
    for v in P.SUPPORTED_VERSIONS:
        pkt = three_body_frame(v)
        row = {'bytes': len(pkt)}
        for name, decode in _decoders(v).items():
            decode(pkt)
            t0 = time.perf_counter()
            for _ in range(n):
                decode(pkt)
            dt = time.perf_counter() - t0
            row[name] = {'frames_per_s': n / dt, 'x_arrival_rate': n / dt / ARRIVAL_HZ}
        out[f'{v[0]}.{v[1]}'] = row
    return out


#: s between two decodes in `decode_after_gaps`: back to back, 1 ms, one 120 Hz period
GAPS_S = (0.0, 0.001, 1.0 / ARRIVAL_HZ)


def _idle(gap_s: float, asleep: bool) -> None:
    if asleep:
        time.sleep(gap_s)
        return
    end = time.perf_counter() + gap_s
    while time.perf_counter() < end:  # the core kept busy by a loop that touches no data
        pass


def decode_after_gaps(quick: bool, version=(4, 1)) -> list[dict]:
    """The same frame's decode time when the decodes come back to back and when they come a gap
    apart, the thread asleep (as in recvfrom between frames) or spinning in a loop that touches
    no data: how much of the decode's cost at 120 Hz is its working set gone cold in between.
    Both decoders, alternating frame by frame, so the host's swings fall on both."""
    pkt = three_body_frame(version)
    n = 150 if quick else 600
    decoders = _decoders(version)
    for decode in decoders.values():
        decode(pkt)
    out = []
    for gap in GAPS_S:
        for asleep in (True, False) if gap else (True,):
            ts: dict[str, list[float]] = {name: [] for name in decoders}
            for _ in range(n):
                for name, decode in decoders.items():
                    _idle(gap, asleep)
                    t0 = time.perf_counter_ns()
                    decode(pkt)
                    ts[name].append((time.perf_counter_ns() - t0) * 1e-3)
            for name, t in ts.items():
                t.sort()
                out.append(
                    {
                        'decoder': name,
                        'gap_ms': gap * 1e3,
                        'between': 'nothing' if not gap else 'asleep' if asleep else 'spinning',
                        'p50_us': t[n // 2],
                        'p90_us': t[int(n * 0.9)],
                    }
                )
    return out


FN_SCALE = 1e-4  # m per frame number: 10,200 frames -> 1.02 m, exact to float32 rounding


def end_to_end_latency(quick: bool, version='4.1', multicast=True) -> dict:
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import qos_profile_sensor_data

    n_target = 1200 if quick else 10200
    warmup = 120
    sent = {}
    emu_rate = ARRIVAL_HZ

    def on_sent(fn, _ticks):
        sent[fn] = time.perf_counter_ns()

    cmd, data = free_udp_ports(2)
    group = f'239.255.77.{1 + os.getpid() % 250}'
    emu = NatNetEmulator(
        version=version,
        command_port=cmd,
        data_port=data,
        multicast=multicast,
        multicast_group=group,
        rate_hz=emu_rate,
        on_sent=on_sent,
        bodies=('base', 'thigh', 'calf'),
    )
    # The frame number rides in x, scaled into the bridge's plausible workspace (+-10 m).
    emu.source = lambda t: {
        n: ((emu._frame_number * FN_SCALE, 1.0, 0.0), (0.0, 0.0, 0.0, 1.0)) for n in emu.bodies
    }
    emu.start()
    bridge = subprocess.Popen(
        [
            sys.executable,
            '-m',
            'equimus_hw.natnet.bridge_node',
            '--ros-args',
            '-p',
            f'command_port:={cmd}',
            '-p',
            f'data_port:={data}',
            '-p',
            f'multicast:={"true" if multicast else "false"}',
            '-p',
            f'multicast_group:={group}',
            '-p',
            'rigid_bodies:=[calf]',
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node('bench_natnet_sub', context=ctx)
    lat = []
    seen = []

    def cb(msg):
        now = time.perf_counter_ns()
        fn = int(round(msg.pose.position.x / FN_SCALE))
        t = sent.get(fn)
        if t is not None:
            lat.append((now - t) / 1e6)
            seen.append(fn)

    node.create_subscription(PoseStamped, '/mocap/calf/pose', cb, qos_profile_sensor_data)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    deadline = time.monotonic() + n_target / emu_rate * 1.5 + 30
    try:
        _bring_up(bridge)
        while len(lat) < n_target and time.monotonic() < deadline:
            ex.spin_once(timeout_sec=0.1)
    finally:
        bridge.send_signal(2)
        try:
            bridge.wait(10)
        except subprocess.TimeoutExpired:
            bridge.kill()
        emu.stop()
        ex.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
    lat = sorted(lat[warmup:])
    if not lat:
        return {'error': 'no poses arrived'}
    span = seen[-1] - seen[warmup] + 1 if len(seen) > warmup else 0

    def q(p):
        return lat[min(len(lat) - 1, int(p * len(lat)))]

    return {
        'version': version,
        'transport': 'multicast' if multicast else 'unicast',
        'messages': len(lat),
        'lost': span - len(lat),
        'p50_ms': q(0.50),
        'p99_ms': q(0.99),
        'max_ms': lat[-1],
        'target_p99_ms': 2.0,
    }


def _bring_up(bridge: subprocess.Popen, name: str = 'natnet_bridge', timeout_s: float = 30.0):
    """Configure and activate the managed node `name` as the supervisor does (a bridge started
    alone stays unconfigured and never opens its sockets)."""
    from equimus_bringup.supervisor import LifecycleClient
    from equimus_ros.lifecycle import BRING_UP

    client = LifecycleClient(dict(os.environ))
    try:
        client.wait_for(name, lambda: bridge.poll() is None, timeout_s)
        for transition, label in BRING_UP:
            client.change(name, transition, label, timeout_s)
    finally:
        client.close()


def measure(quick: bool) -> dict:
    return {
        'decode': decode_throughput(quick),
        'gaps': decode_after_gaps(quick),
        'latency': [
            end_to_end_latency(quick, '4.1', True),
            end_to_end_latency(quick, '3.0', False),
        ],
    }


def run(quick: bool) -> dict:
    """Flat dict of named figures (for benchmarks/run_all.py)."""
    r = measure(quick)
    out = {}
    for v, row in r['decode'].items():
        for name in ('decode_frame', 'FrameReader'):
            d = row[name]
            out[f'{name} NatNet {v} 3-body frame (frames/s)'] = round(d['frames_per_s'])
            out[f'{name} NatNet {v} vs 120 Hz arrival (x)'] = round(d['x_arrival_rate'])
    for d in r['gaps']:
        key = f'{d["decoder"]} NatNet 4.1 after {d["gap_ms"]:.1f} ms {d["between"]} p50 (us)'
        out[key] = round(d['p50_us'], 1)
    for d in r['latency']:
        key = f'end-to-end NatNet {d.get("version")} {d.get("transport")}'
        if 'error' in d:
            out[key] = d['error']
            continue
        out[f'{key} messages'] = d['messages']
        out[f'{key} lost'] = d['lost']
        for k in ('p50_ms', 'p99_ms', 'max_ms'):
            out[f'{key} {k[:-3]} (ms)'] = round(d[k], 3)
    return out


def main():
    quick = '--quick' in sys.argv
    r = measure(quick)
    print(
        f'NatNet decode throughput (3-body frame, pure Python), arrival rate {ARRIVAL_HZ:g} Hz: '
        'decode_frame (every frame in full) and FrameReader (the receive path) side by side'
    )
    print(
        f'{"version":>8} {"bytes":>6} {"full frames/s":>14} {"reader frames/s":>16} '
        f'{"reader / full":>14}'
    )
    for v, row in r['decode'].items():
        full, fast = row['decode_frame']['frames_per_s'], row['FrameReader']['frames_per_s']
        print(f'{v:>8} {row["bytes"]:>6} {full:>14.0f} {fast:>16.0f} {fast / full:>13.2f}x')
    base = {d['decoder']: d['p50_us'] for d in r['gaps'] if d['between'] == 'nothing'}
    print('\nThe same 4.1 frame decoded a gap after the previous decode (µs, and x back to back)')
    print(f'{"decoder":>13} {"gap ms":>8} {"between":>9} {"p50 us":>8} {"p90 us":>8} {"x":>6}')
    for d in r['gaps']:
        print(
            f'{d["decoder"]:>13} {d["gap_ms"]:>8.1f} {d["between"]:>9} {d["p50_us"]:>8.1f} '
            f'{d["p90_us"]:>8.1f} {d["p50_us"] / base[d["decoder"]]:>6.1f}'
        )
    print('\nEnd-to-end latency, frame sent by emulator -> PoseStamped at subscriber')
    print(
        f'{"version":>8} {"transport":>10} {"msgs":>6} {"lost":>5} {"p50 ms":>7} {"p99 ms":>7} '
        f'{"max ms":>7} {"p99<2ms":>8}'
    )
    for d in r['latency']:
        if 'error' in d:
            print('  ', d['error'])
            continue
        print(
            f'{d["version"]:>8} {d["transport"]:>10} {d["messages"]:>6} {d["lost"]:>5} '
            f'{d["p50_ms"]:>7.3f} {d["p99_ms"]:>7.3f} {d["max_ms"]:>7.3f} '
            f'{"yes" if d["p99_ms"] < 2.0 else "NO":>8}'
        )


if __name__ == '__main__':
    main()
