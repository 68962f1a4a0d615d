#!/bin/bash
# Source the distro and the workspace, then run the given command.
set -e
source "/opt/ros/${ROS_DISTRO}/setup.bash"
source /equimus/ros2_ws/install/setup.bash
exec "$@"
