"""Recorder throughput and the full sim graph's lockstep speed.

    python benchmarks/bench_bringup.py [--quick]
    python benchmarks/bench_bringup.py --recorder [--seconds 5] [--payload random]   # per size
    python benchmarks/bench_bringup.py --lockstep [--quick]       # the lockstep graphs only

`--recorder` runs only the recorder, for ~1 KiB and 64 KiB messages, each from a low rate up to
the first step that loses a message (RECORDER_SWEEP): msg/s and MB/s without drops, the figures
docs/benchmarks.md (issue 30) sets beside rosbag2's published ones. `--payload random` sends
128 different messages of random doubles in turn, so the 64 KiB ones reach the disk nearly
whole (a bag chunk holds 4 of them; with zeros, the default, the bag is a few hundred KiB/s).

Recorder: a publisher process sends reliable messages (Float64MultiArray, 128 doubles, ~1 KiB)
at stepped target rates to the real recorder node; after each step the bag is read back and the
messages in it are compared with the ones sent. The sustained rate is the highest step with no
message missing. Lockstep graph: the sim graph (sim, valve driver, estimator, controller,
reference, recorder) as separate processes and composed in one process (sim_graph, the default
since issue 13); simulated seconds per wall second once it runs, with a plain mj_step loop of the
same model as the baseline measured in the same run; and how long a `/sim/step` call of 1200
frames (10 sim s) takes in each graph, the call's coroutine answered by the frame loop.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PUBLISHER = r"""
import sys, time, rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import Float64MultiArray
rate, seconds, doubles = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
incompressible = sys.argv[4] == 'random'
rclpy.init()
n = rclpy.create_node('bench_publisher')
qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
pub = n.create_publisher(Float64MultiArray, '/bench/data', qos)
t0 = time.monotonic()
while pub.get_subscription_count() == 0 and time.monotonic() - t0 < 20:
    rclpy.spin_once(n, timeout_sec=0.05)
time.sleep(1.0)
msg = Float64MultiArray(data=[0.0] * doubles)
pool = []
if incompressible:  # 128 different messages: a bag chunk holds 4 of 64 KiB, ~250 of 1 KiB
    import array, random
    gen = random.Random(1)
    pool = [array.array('d', [gen.random() for _ in range(doubles)]) for _ in range(128)]
sent, start = 0, time.monotonic()
while True:
    now = time.monotonic() - start
    if now >= seconds:
        break
    due = int(now * rate) + 1
    while sent < due:
        if pool:
            msg.data = pool[sent % len(pool)]
        msg.data[0] = float(sent)
        pub.publish(msg)
        sent += 1
    time.sleep(0.0005)
elapsed = time.monotonic() - start
time.sleep(1.0)
print(sent, elapsed, flush=True)
"""


class StepFailed(RuntimeError):
    """A step of the recorder's sweep that could not be measured (its publisher failed)."""


def recorder_step(
    rate: float, seconds: float, workdir: Path, doubles: int = 128, payload: str = 'zeros'
) -> dict:
    from rclpy.serialization import serialize_message
    from std_msgs.msg import Float64MultiArray

    from equimus_bringup.supervisor import find_executable
    from equimus_record import bag

    msg_bytes = len(serialize_message(Float64MultiArray(data=[0.0] * doubles)))
    path = workdir / f'bag_{int(rate)}_{doubles}'
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    rec = subprocess.Popen(
        [
            find_executable('equimus_record', 'recorder'),
            '--ros-args',
            '-p',
            f'bag_path:={path}',
            '-p',
            "exclude_topics:=['/rosout']",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        out = subprocess.run(
            [sys.executable, '-c', PUBLISHER, str(rate), str(seconds), str(doubles), payload],
            capture_output=True,
            text=True,
            env=env,
            timeout=seconds + 60,
        )
        fields = out.stdout.split()
        if out.returncode != 0 or len(fields) != 2:
            why = (out.stderr.strip().splitlines() or ['no output'])[-1]
            raise StepFailed(f'the publisher at {rate:g} msg/s exited {out.returncode}: {why}')
        sent, elapsed = int(fields[0]), float(fields[1])
    finally:
        os.killpg(rec.pid, signal.SIGINT)
        rec.wait(20)
    got = [m.data[0] for _, _, m in bag.read_messages(path, ['/bench/data'])]
    size = sum(f.stat().st_size for f in path.glob('*.mcap'))
    return {
        'target': rate,
        'sent': sent,
        'recorded': len(got),
        'rate': sent / elapsed,
        'mb_s': size / 2**20 / elapsed,
        'message_bytes': msg_bytes,
        'payload_mb_s': sent * msg_bytes / 1e6 / elapsed,
        'missing': sent - len(set(got)),
    }


# Message sizes and target rates of the recorder's sustained-rate sweep (--recorder): the
# project's own sizes (~1 KiB) and camera-like 64 KiB messages, whose MB/s is what rosbag2's
# published figures give (docs/benchmarks.md, issue 30).
RECORDER_SWEEP = {
    128: (500, 1000, 2000, 4000, 8000, 16000),
    8192: (125, 250, 500, 1000, 2000, 4000, 8000),
}
#: --payload: zeros compress to almost nothing in the bag (ZSTD), random not at all
PAYLOADS = ('zeros', 'random')


def recorder_sweep(seconds: float, payload: str = 'zeros') -> dict:
    """The highest step with no message missing, per message size: msg/s and MB/s."""
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for doubles, rates in RECORDER_SWEEP.items():
            best = None
            for rate in rates:
                try:
                    r = recorder_step(rate, seconds, Path(d), doubles, payload)
                except StepFailed as e:
                    print(f'  {rate:6d} msg/s target: not measured, {e}; this size ends here')
                    break
                print(
                    f'  {r["message_bytes"]:6d} B at {rate:6d} msg/s target: sent {r["rate"]:8.0f} '
                    f'msg/s ({r["payload_mb_s"]:6.2f} MB/s), recorded {r["recorded"]} of '
                    f'{r["sent"]}, missing {r["missing"]}',
                    flush=True,
                )
                if r['missing'] == 0:
                    best = r
                else:
                    break
            out[doubles] = best
    return out


def lockstep_speed(seconds: float, composed: bool) -> dict:
    from equimus_bringup.graph import describe_graph
    from equimus_bringup.main_job import ClockWatch
    from equimus_bringup.supervisor import Supervisor

    with tempfile.TemporaryDirectory() as d:
        sup = Supervisor(
            describe_graph(
                'sim',
                {
                    'record': 'true',
                    'bag': str(Path(d) / 'bag'),
                    'sim_mode': 'lockstep',
                    'composed': 'true' if composed else 'false',
                },
            ),
            echo=False,
        )
        watch = ClockWatch()
        sup.start()
        try:
            while watch.now < 1.0:
                watch.spin(0.05)
                if sup.poll():
                    raise RuntimeError(sup.failed)
            t0, s0 = time.monotonic(), watch.now
            while watch.now - s0 < seconds:
                watch.spin(0.05)
            wall, sim = time.monotonic() - t0, watch.now - s0
        finally:
            sup.stop()
            watch.close()
    return {'sim_s': sim, 'wall_s': wall, 'speed': sim / wall}


def step_speed(composed: bool, frames: int = 1200, calls: int = 3) -> list[float]:
    """Wall s of each of `calls` /sim/step calls of `frames` frames, the graph paused at 0.5 s
    (not recording)."""
    import rclpy
    from rcl_interfaces.srv import SetParameters
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter
    from std_srvs.srv import Trigger

    from equimus_bringup.graph import describe_graph
    from equimus_bringup.supervisor import Supervisor

    args = {'pause_at': '0.5', 'record': 'false', 'composed': 'true' if composed else 'false'}
    sup = Supervisor(describe_graph('sim', args), echo=False)
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node('bench_step', context=ctx)
    executor = SingleThreadedExecutor(context=ctx)
    executor.add_node(node)
    sup.start()
    try:

        def call(srv_type, name, request):
            client = node.create_client(srv_type, name)
            assert client.wait_for_service(30.0), name
            fut = client.call_async(request)
            executor.spin_until_future_complete(fut, timeout_sec=120.0)
            assert fut.done(), f'{name}: no answer in 120 s'
            return fut.result()

        param = Parameter('step_frames', value=frames).to_parameter_msg()
        r = call(SetParameters, '/sim/set_parameters', SetParameters.Request(parameters=[param]))
        assert r.results[0].successful, r.results[0].reason
        walls = []
        for _ in range(calls):
            t0 = time.monotonic()
            r = call(Trigger, '/sim/step', Trigger.Request())
            walls.append(time.monotonic() - t0)
            assert r.success, r.message
        return walls
    finally:
        sup.stop()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)


def mj_step_baseline(seconds: float = 2.0) -> float:
    import mujoco

    from equimus_description.leg import load_leg
    from equimus_sim.leg_model import LegModel

    lm = LegModel(load_leg().with_timestep(1.0 / 600))
    d = mujoco.MjData(lm.model)
    lm.reset(d)
    n = int(seconds / lm.model.opt.timestep)
    t0 = time.perf_counter()
    for _ in range(n):
        mujoco.mj_step(lm.model, d)
    return seconds / (time.perf_counter() - t0)


def run(quick: bool = False) -> dict:
    rates = [1000, 4000] if quick else [1000, 2000, 4000, 8000, 16000]
    seconds = 3.0 if quick else 10.0
    figures = {}
    best = None
    with tempfile.TemporaryDirectory() as d:
        for rate in rates:
            try:
                r = recorder_step(rate, seconds, Path(d))
            except StepFailed as e:
                figures[f'recorder at {rate} msg/s target'] = f'not measured: {e}'
                break
            figures[f'recorder at {rate} msg/s target: sent rate / recorded / missing'] = (
                f'{r["rate"]:.0f} msg/s / {r["recorded"]} of {r["sent"]} / {r["missing"]}'
            )
            if r['missing'] == 0:
                best = r
    if best:
        figures['recorder sustained without drops (msg/s)'] = round(best['rate'])
        figures['recorder sustained without drops (MB/s in the bag, ZSTD)'] = round(best['mb_s'], 3)
    figures.update(lockstep_figures(quick))
    return figures


def lockstep_figures(quick: bool = False) -> dict:
    """The split and the composed lockstep sim graph (recording) against the plain loop."""
    figures = {}
    ls = lockstep_speed(5.0 if quick else 20.0, composed=False)
    base = mj_step_baseline()
    comp = lockstep_speed(10.0 if quick else 40.0, composed=True)
    figures['sim graph, lockstep: simulated s per wall s'] = round(ls['speed'], 2)
    figures['plain mj_step loop, same model, dt 1/600 s: simulated s per wall s'] = round(base, 1)
    figures['graph / plain loop'] = f'{ls["speed"] / base:.4f}'
    figures['composed sim graph, lockstep: simulated s per wall s'] = round(comp['speed'], 2)
    figures['composed graph / plain loop'] = f'{comp["speed"] / base:.4f}'
    figures['composed graph / split graph'] = f'{comp["speed"] / ls["speed"]:.2f}'
    for composed, name in ((False, 'split'), (True, 'composed')):
        walls = step_speed(composed, calls=2 if quick else 3)
        figures[f'{name} graph, /sim/step of 1200 frames (10 sim s): wall s per call'] = ', '.join(
            f'{w:.2f}' for w in walls
        )
    return figures


if __name__ == '__main__':
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument('--quick', action='store_true')
    p.add_argument(
        '--recorder',
        action='store_true',
        help='only the recorder: sustained rate without drops per message size',
    )
    p.add_argument('--seconds', type=float, default=10.0, help='--recorder: s per step')
    p.add_argument(
        '--payload',
        choices=PAYLOADS,
        default='zeros',
        help='--recorder: message contents (random: 64 KiB messages reach the disk nearly whole)',
    )
    p.add_argument(
        '--lockstep', action='store_true', help='only the split and composed lockstep graphs'
    )
    ns = p.parse_args()
    if ns.lockstep:
        print(f'lockstep sim graphs (load {os.getloadavg()[0]:.2f}):')
        for k, v in lockstep_figures(ns.quick).items():
            print(f'  {k:73s} {v}')
        sys.exit(0)
    if ns.recorder:
        print(
            f'recorder sustained rate, {ns.seconds:g} s steps, {ns.payload} payload '
            f'(load {os.getloadavg()[0]:.2f}):'
        )
        for doubles, best in recorder_sweep(ns.seconds, ns.payload).items():
            if best is None:
                print(f'  {doubles}-double messages: no step without a missing message')
                continue
            print(
                f'  sustained without drops, {best["message_bytes"]} B messages: '
                f'{best["rate"]:.0f} msg/s, {best["payload_mb_s"]:.2f} MB/s of messages, '
                f'{best["mb_s"]:.3f} MiB/s in the bag (ZSTD)'
            )
        sys.exit(0)
    for k, v in run(ns.quick).items():
        print(f'{k:75s} {v}')
