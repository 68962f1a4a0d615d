"""Two processes for tests/bringup/test_dds_resend.py, run with the graph's DDS environment.

`pub N`: once a subscriber matched, N small reliable messages at 120 Hz, each carrying its
send time (CLOCK_MONOTONIC, one clock for every process of this host), beside a 30 kB message
on a second topic that fills a stopped reader's socket so some small ones are dropped there.
`sub N SECONDS`: takes both topics and prints one JSON line: [[send, arrival], ...] of the
small messages once all N came, or when SECONDS ran out, and ends at a line on stdin (its
sockets' drop counts are read meanwhile).
"""

import json
import struct
import sys
import time

import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import UInt8MultiArray

QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
SMALL, FLOOD = '/resend_test/small', '/resend_test/flood'


def pub(n: int) -> None:
    node = rclpy.create_node('resend_pub')
    small = node.create_publisher(UInt8MultiArray, SMALL, QOS)
    flood = node.create_publisher(UInt8MultiArray, FLOOD, QOS)
    while small.get_subscription_count() < 1 or flood.get_subscription_count() < 1:
        time.sleep(0.05)
    print('matched', flush=True)
    msg, big = UInt8MultiArray(), UInt8MultiArray()
    big.data = bytes(30000)
    due = time.monotonic()
    for i in range(n):
        msg.data = struct.pack('<id', i, time.monotonic()) + bytes(60)
        small.publish(msg)
        flood.publish(big)
        due += 1 / 120
        time.sleep(max(0.0, due - time.monotonic()))
    print('sent', flush=True)
    sys.stdin.read()  # keep the writers (and their histories) until the test is done


def sub(n: int, seconds: float) -> None:
    node = rclpy.create_node('resend_sub')
    got: dict[int, tuple[float, float]] = {}

    def on_small(m: UInt8MultiArray) -> None:
        i, sent = struct.unpack('<id', bytes(m.data[:12]))
        got[i] = (sent, time.monotonic())

    node.create_subscription(UInt8MultiArray, SMALL, on_small, QOS)
    node.create_subscription(UInt8MultiArray, FLOOD, lambda _m: None, QOS)
    print('ready', flush=True)
    end = time.monotonic() + seconds
    while len(got) < n and time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
    print(json.dumps([got[i] for i in sorted(got)]), flush=True)
    sys.stdin.readline()


if __name__ == '__main__':
    rclpy.init()
    if sys.argv[1] == 'pub':
        pub(int(sys.argv[2]))
    else:
        sub(int(sys.argv[2]), float(sys.argv[3]))
