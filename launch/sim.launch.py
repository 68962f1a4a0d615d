"""The simulated leg: MuJoCo simulation node + estimator, controller, reference (+ recorder).

ros2 launch equimus_bringup sim.launch.py controller:=mpc record:=true
# composed:=true (default): one process (sim_graph), in-process hand-off, deterministic per seed
ros2 launch equimus_bringup sim.launch.py composed:=false   # one process per node
"""

from equimus_bringup.launch_common import generate, viewer_actions


def generate_launch_description():
    description = generate('sim')
    for action in viewer_actions():  # rviz:=true
        description.add_action(action)
    return description
