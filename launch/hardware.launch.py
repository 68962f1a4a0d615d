"""The real leg: NatNet pose bridge + valve driver + estimator, controller, reference (+ recorder).

ros2 launch equimus_bringup hardware.launch.py serial_port:=/dev/ttyACM0 natnet_server:=10.0.0.2
ros2 launch equimus_bringup hardware.launch.py emulator:=true serial_port:=/tmp/equimus_dac
# lowest latency:
ros2 launch equimus_bringup hardware.launch.py fused_loop:=true rt_priority:=50 ...
"""

from equimus_bringup.launch_common import generate, viewer_actions


def generate_launch_description():
    description = generate('hardware')
    for action in viewer_actions():  # rviz:=true
        description.add_action(action)
    return description
