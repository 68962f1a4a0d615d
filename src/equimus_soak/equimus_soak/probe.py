"""soak_probe: the soak harness's own ROS node, in its own process.

It records every /valve/command (arrival time on the monotonic clock, values, and the
publisher's own wall-clock stamp of the sample, so a delivery this process took late is not read
as a command sent late) and every
/diagnostics status, and publishes the bad commands the soak injects (NaN, out of range, wrong
length) on /valve/command. It runs in a separate process so its callbacks never hold the GIL of
the process that hosts the rig emulators (whose frame times are the latency measurement).

Its /valve/command publisher exists only from the first `publish` to the next `release`: the
valve driver obeys one publisher at a time (docs/reliability.md, "One commander"), so an idle
publisher of the probe would keep the driver from accepting a controller.

Driven by JSON lines on stdin, answering on stdout:
    {"op": "publish", "data": [NaN, 20.0]}   -> {"op": "published", "t": <monotonic s>}
    {"op": "prepare"}                         -> {"op": "prepared"} (publisher made, matched)
    {"op": "release"}                         -> {"op": "released"} (the publisher is destroyed)
    {"op": "dump", "path": "probe.json"}     -> {"op": "dumped"}
    {"op": "quit"}
`python -m equimus_soak.probe` prints {"op": "ready"} once its node exists.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.publisher import Publisher
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.subscription import MessageInfo
from std_msgs.msg import Float64MultiArray

from equimus_description.interface import DIAGNOSTICS, PRESSURE_LAYOUT, VALVE_COMMAND
from equimus_ros.arrays import float_array
from equimus_ros.executors import timer_callback
from equimus_ros.main import run_node
from equimus_ros.qos import publisher

#: Deeper than the shared profiles (same reliability): no message is lost while the soak floods.
LISTEN_QOS = QoSProfile(
    depth=200,
    reliability=ReliabilityPolicy.RELIABLE,
    history=HistoryPolicy.KEEP_LAST,
    durability=DurabilityPolicy.VOLATILE,
)


#: s a new publisher waits for DDS to match the graph's subscribers before its first message.
MATCH_TIMEOUT_S = 5.0


def _say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + '\n')
    sys.stdout.flush()


class SoakProbe(Node):
    def __init__(self):
        super().__init__('soak_probe')
        self.commands = []  # [t_monotonic, t_wall_ns, values, source_wall_ns]
        self.diagnostics = []  # [t_monotonic, name, level, message, {key: value}]
        self.injected = []  # [t_monotonic, values]
        self.ops: queue.Queue[dict] = queue.Queue()
        self.quit = threading.Event()
        self.pub: Publisher | None = None
        self.create_subscription(
            Float64MultiArray, VALVE_COMMAND.name, self._on_command, LISTEN_QOS
        )
        self.create_subscription(DiagnosticArray, DIAGNOSTICS.name, self._on_diag, LISTEN_QOS)
        self.create_timer(0.005, timer_callback(self._run_ops))

    def _on_command(self, msg: Float64MultiArray, info: MessageInfo) -> None:
        self.commands.append(
            [time.monotonic(), time.time_ns(), list(msg.data), info['source_timestamp']]
        )

    def _on_diag(self, msg: DiagnosticArray) -> None:
        t = time.monotonic()
        for s in msg.status:
            self.diagnostics.append(
                [
                    t,
                    s.name,
                    int.from_bytes(s.level, 'little')
                    if isinstance(s.level, bytes)
                    else int(s.level),
                    s.message,
                    {kv.key: kv.value for kv in s.values},
                ]
            )

    def _publisher(self) -> Publisher:
        """The publisher, new if released, once the graph's subscribers are matched (a message
        published before DDS matched a reader never reaches it)."""
        if self.pub is None:
            self.pub = publisher(self, Float64MultiArray, VALVE_COMMAND)
            end = time.monotonic() + MATCH_TIMEOUT_S
            while (
                self.pub.get_subscription_count() < self.count_subscribers(VALVE_COMMAND.name)
                or self.pub.get_subscription_count() < 2  # its own and the driver's, at least
            ) and time.monotonic() < end:
                time.sleep(0.01)
        return self.pub

    def _run_ops(self) -> None:
        while True:
            try:
                op = self.ops.get_nowait()
            except queue.Empty:
                return
            kind = op.get('op')
            if kind == 'publish':
                m = float_array(op['data'], PRESSURE_LAYOUT)
                pub = self._publisher()
                t = time.monotonic()
                pub.publish(m)
                self.injected.append(
                    [t, m.data.tolist() if hasattr(m.data, 'tolist') else list(m.data)]
                )
                _say({'op': 'published', 't': t})
            elif kind == 'prepare':
                self._publisher()
                _say({'op': 'prepared'})
            elif kind == 'release':
                if self.pub is not None:
                    self.destroy_publisher(self.pub)
                    self.pub = None
                _say({'op': 'released'})
            elif kind == 'dump':
                with open(op['path'], 'w') as fh:
                    json.dump(
                        {
                            'commands': self.commands,
                            'diagnostics': self.diagnostics,
                            'injected': self.injected,
                        },
                        fh,
                    )
                _say({'op': 'dumped'})
            elif kind == 'quit':
                self.quit.set()


def _read_stdin(node: SoakProbe) -> None:
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            node.ops.put(json.loads(line))
        except ValueError:
            _say({'op': 'error', 'message': f'not JSON: {line[:80]}'})
    node.ops.put({'op': 'quit'})


def _serve(node: SoakProbe) -> None:
    threading.Thread(target=_read_stdin, args=(node,), daemon=True).start()
    _say({'op': 'ready'})
    while rclpy.ok() and not node.quit.is_set():
        rclpy.spin_once(node, timeout_sec=0.05)


def main(args=None) -> int:
    return run_node(SoakProbe, args, spin=_serve)


if __name__ == '__main__':
    sys.exit(main())
