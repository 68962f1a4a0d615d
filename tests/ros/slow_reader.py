"""A reliable KEEP_ALL subscriber of /refusal_test that prints 'ready' once it is spinning; the
test stops it (SIGSTOP) so it acknowledges nothing more."""

import rclpy
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Float64MultiArray

QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_ALL)

if __name__ == '__main__':
    rclpy.init()
    node = rclpy.create_node('slow_reader')
    node.create_subscription(Float64MultiArray, '/refusal_test', lambda msg: None, QOS)
    print('ready', flush=True)
    rclpy.spin(node)
