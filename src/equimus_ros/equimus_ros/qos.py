"""QoS profiles of the shared topics, in one place so publishers and subscribers always match.

Sensor streams (poses, joint states) use rclpy's ``qos_profile_sensor_data``.
"""
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

#: /valve/command, /reference/joint: every command matters, none is worth replaying late.
COMMAND_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                         history=HistoryPolicy.KEEP_LAST, durability=DurabilityPolicy.VOLATILE)
#: /diagnostics, as diagnostic_aggregator and rqt_robot_monitor expect it.
DIAG_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
#: /clock: only the newest time is of use.
CLOCK_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT,
                       history=HistoryPolicy.KEEP_LAST, durability=DurabilityPolicy.VOLATILE)
