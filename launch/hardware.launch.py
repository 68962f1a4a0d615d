"""The real leg: NatNet pose bridge + valve driver + estimator, controller, reference (+ recorder).

ros2 launch equimus_bringup hardware.launch.py serial_port:=/dev/ttyACM0 natnet_server:=10.0.0.2
ros2 launch equimus_bringup hardware.launch.py emulator:=true serial_port:=/tmp/equimus_dac
# lowest latency:
ros2 launch equimus_bringup hardware.launch.py fused_loop:=true rt_priority:=50 ...

natnet_bridge and valve_driver are managed nodes, taken to active here (`ros2 lifecycle set
/valve_driver deactivate` vents); if either exits, the launch shuts down, the driver vented first.
"""

from equimus_bringup.launch_common import generate, viewer_actions


def generate_launch_description():
    description = generate('hardware')
    for action in viewer_actions():  # rviz:=true
        description.add_action(action)
    return description
