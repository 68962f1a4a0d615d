"""Does a subscriber killed with SIGKILL and started again always hear its publisher? The soak's
kill faults in a loop, without the rest of the graph (docs/reliability.md, the restarted
controller that never heard /joint_states).

    python benchmarks/dds_restart.py --cycles 100
    python benchmarks/dds_restart.py --cycles 100 --loaders 2 --listeners 2

One process publishes /joint_states at 120 Hz (sensor QoS, as the estimator) and listens to
/valve/command; `--listeners` processes subscribe to /joint_states for the whole run (as the
recorder and monitors do); then, `--cycles` times, a `controller` process subscribes to
/joint_states and answers every state on /valve/command, is killed with SIGKILL 0.05-0.5 s after
its first state, and is started again at once. It refuses a domain where a graph runs (the
`equimus launch` domain check). Every process gets the graph's DDS environment
(`equimus_bringup.graph.graph_environment('hardware')`: UDP only). `--loaders` busy loops load
the cores beside it. Prints, per cycle that heard nothing within `--timeout`, a line, and at the
end the count and the time from a start to its first state (p50, max).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time

PUBLISHER = """
import rclpy
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from equimus_description.interface import JOINT_STATES, JOINTS, VALVE_COMMAND
from equimus_ros.qos import publisher, subscription
rclpy.init()
node = Node('estimator')
pub = publisher(node, JointState, JOINT_STATES)
subscription(node, Float64MultiArray, VALVE_COMMAND, lambda msg: None)
def tick():
    msg = JointState(name=list(JOINTS), position=[1.3, 0.9], velocity=[0.0, 0.0])
    msg.header.stamp = node.get_clock().now().to_msg()
    pub.publish(msg)
node.create_timer(1 / 120, tick)
print('ready', flush=True)
rclpy.spin(node)
"""

SUBSCRIBER = """
import sys, time
import rclpy
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from equimus_description.interface import JOINT_STATES, VALVE_COMMAND
from equimus_ros.qos import publisher, subscription
rclpy.init()
node = Node(sys.argv[1])
t0 = time.monotonic()
heard = []
answer = publisher(node, Float64MultiArray, VALVE_COMMAND) if sys.argv[1] == 'controller' else None
def on_state(msg):
    if not heard:
        heard.append(1)
        print(f'heard {time.monotonic() - t0:.3f}', flush=True)
    if answer is not None:
        answer.publish(Float64MultiArray(data=[0.0, 0.0]))
subscription(node, JointState, JOINT_STATES, on_state)
rclpy.spin(node)
"""


def _first_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if line:
            return line
        time.sleep(0.02)
    return ''


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('--cycles', type=int, default=50)
    p.add_argument('--listeners', type=int, default=2, help='long-lived subscribers beside it')
    p.add_argument('--loaders', type=int, default=0, help='busy loops on the cores beside it')
    p.add_argument('--timeout', type=float, default=10.0, help='s a start may take to hear')
    p.add_argument('--domain', type=int, default=int(os.environ.get('ROS_DOMAIN_ID', '0')))
    ns = p.parse_args(argv)
    from equimus_bringup.graph import graph_environment
    from equimus_bringup.prestart import StartError, check_domain

    env = dict(os.environ, **graph_environment('hardware'), ROS_DOMAIN_ID=str(ns.domain))
    try:  # it publishes /joint_states and /valve/command: never beside a running graph
        check_domain([], env)
    except StartError as exc:
        print(f'dds_restart: {exc}', file=sys.stderr)
        return 2
    py = sys.executable
    procs: list[subprocess.Popen[str]] = []
    try:
        pub = subprocess.Popen([py, '-c', PUBLISHER], env=env, stdout=subprocess.PIPE, text=True)
        procs.append(pub)
        if not _first_line(pub, 30.0).startswith('ready'):
            print('dds_restart: the publisher did not start', file=sys.stderr)
            return 1
        for j in range(ns.listeners):
            procs.append(
                subprocess.Popen(
                    [py, '-c', SUBSCRIBER, f'listener{j}'],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    text=True,
                )  # fmt: skip
            )
        for _ in range(ns.loaders):
            procs.append(subprocess.Popen([py, '-c', 'while True: pass'], text=True))
        deaf, firsts = 0, []
        for cycle in range(ns.cycles):
            sub = subprocess.Popen(
                [py, '-c', SUBSCRIBER, 'controller'], env=env, stdout=subprocess.PIPE, text=True
            )
            line = _first_line(sub, ns.timeout)
            if line.startswith('heard'):
                firsts.append(float(line.split()[1]))
                time.sleep(random.uniform(0.05, 0.5))
            else:
                deaf += 1
                print(f'cycle {cycle}: nothing heard in {ns.timeout:g} s', flush=True)
            sub.send_signal(signal.SIGKILL)
            sub.wait()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    firsts.sort()
    timing = (
        f'first state after p50 {firsts[len(firsts) // 2]:.3f} s, max {firsts[-1]:.3f} s'
        if firsts
        else 'no start heard anything'
    )
    print(
        f'{ns.cycles} starts after SIGKILL, {deaf} heard nothing in {ns.timeout:g} s; {timing} '
        f'({ns.listeners} listeners, {ns.loaders} busy loops, load '
        f'{os.getloadavg()[0]:.1f})'
    )
    return 1 if deaf else 0


if __name__ == '__main__':
    sys.exit(main())
