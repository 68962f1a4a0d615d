"""Turns the graph description into launch_ros actions (used by launch/*.launch.py only).

Imports `launch` and `launch_ros`, so it is only imported on a machine with a ROS 2 install.
"""

# mypy resolves `launch` to src/equimus_bringup/launch/ (the launch files, on mypy_path), not
# to ROS's launch package, which it cannot see.
from launch import LaunchDescription  # type: ignore[attr-defined]
from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import ExecutableInPackage, FindPackageShare

from equimus_bringup.graph import ARGUMENTS, describe_graph, node_parameter_arguments


def generate(mode: str) -> LaunchDescription:
    """Declare every graph argument, then build the nodes once the arguments are known."""
    declared = [
        DeclareLaunchArgument(name, default_value=default, description=text)
        for name, (default, text) in ARGUMENTS.items()
    ]

    def _actions(context):
        values = {name: LaunchConfiguration(name).perform(context) for name in ARGUMENTS}
        log_level = values['log_level'] or 'info'
        actions = []
        for spec in describe_graph(mode, values):
            if spec.is_ros_node:
                # A multi-node process keeps its nodes' own names: no name remap, and per-node
                # parameters as node-scoped overrides.
                actions.append(
                    Node(
                        package=spec.package,
                        executable=spec.executable,
                        name=None if spec.nodes else spec.name,
                        parameters=[*spec.parameter_files, spec.parameters],
                        arguments=[
                            '--ros-args',
                            '--log-level',
                            log_level,
                            *node_parameter_arguments(spec),
                        ],
                        prefix=' '.join(spec.prefix) or None,
                        additional_env=spec.env or None,
                        output='screen',
                        emulate_tty=True,
                    )
                )
            else:
                actions.append(
                    ExecuteProcess(
                        cmd=[ExecutableInPackage(spec.executable, spec.package), *spec.arguments],
                        prefix=' '.join(spec.prefix) or None,
                        additional_env=spec.env or None,
                        name=spec.name,
                        output='screen',
                    )
                )
        return actions

    return LaunchDescription([*declared, OpaqueFunction(function=_actions)])


RVIZ_CONFIG = ('viewers', 'equimus.rviz')  # in equimus_bringup's share folder


def viewer_actions() -> list:
    """`rviz:=true`: RViz with the leg's config (robot model from /robot_description, /tf)."""
    return [
        DeclareLaunchArgument(
            'rviz', default_value='false', description='start RViz with viewers/equimus.rviz'
        ),
        Node(
            package='rviz2',
            executable='rviz2',
            name='rviz',
            arguments=[
                '-d',
                PathJoinSubstitution([FindPackageShare('equimus_bringup'), *RVIZ_CONFIG]),
            ],
            condition=IfCondition(LaunchConfiguration('rviz')),
            output='screen',
        ),
    ]
