"""The graph's shared interface, defined once: topic names, message types, array layouts, QoS
classes and frame ids. Every node, tool and test takes these names from here (no ROS imports:
message types are named as strings, QoS as classes that equimus_ros maps to rclpy profiles)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .valve import ACTUATORS

__all__ = [
    'ACTUATORS',
    'BODIES',
    'CLOCK',
    'DIAGNOSTICS',
    'FRAME_MOCAP',
    'FRAME_WORLD',
    'JOINTS',
    'JOINT_STATES',
    'MOCAP_MARKERS',
    'MOCAP_TOPICS',
    'PRESSURE_LAYOUT',
    'QosClass',
    'REFERENCE',
    'PREVIEW_COLUMNS',
    'REFERENCE_PREVIEW',
    'SIM_JOINT_STATES',
    'TOPICS',
    'Topic',
    'VALVE_APPLIED',
    'VALVE_ARMED',
    'VALVE_COMMAND',
    'VALVE_PRESSURE',
    'mocap_pose',
    'mocap_topic',
    'preview_columns',
    'mocap_frame',
    'topic_named',
    'ROBOT_DESCRIPTION',
    'TF',
    'TF_STATIC',
]


class QosClass(enum.StrEnum):
    """How a topic is delivered: a key of equimus_ros.qos.PROFILES (which holds the profiles)."""

    SENSOR = 'sensor'  # best effort, newest wins (poses, joint states, measured pressures)
    COMMAND = 'command'  # reliable, volatile (valve commands, references)
    DIAGNOSTICS = 'diagnostics'
    CLOCK = 'clock'
    TF = 'tf'  # reliable, volatile, deep history (/tf, as tf2's listeners expect it)
    LATCHED = 'latched'  # reliable, transient local: late joiners get it (/tf_static, URDF)


@dataclass(frozen=True)
class Topic:
    name: str
    type: str  # ROS interface name, e.g. 'sensor_msgs/msg/JointState'
    qos: QosClass
    description: str
    #: The array fields the graph fills on this topic, each with its elements' names in order
    #: (the rig's leg; another limb's come from its description). Fields not listed stay empty:
    #: what a viewer may plot, by index or (JointState) by name.
    arrays: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def elements(self, field: str) -> tuple[str, ...] | None:
        """Element names of an array field this topic fills; None if it stays empty."""
        return dict(self.arrays).get(field)


#: Joint and actuator names in array order (JointState.name; Float64MultiArray layout label).
JOINTS: tuple[str, ...] = ('hip', 'knee')
BODIES: tuple[str, ...] = ('base', 'thigh', 'calf')
#: Layout label of every pressure array, in channel order (kPa).
PRESSURE_LAYOUT = ','.join(ACTUATORS)

#: The motion-capture frame (REP-103: Z up, metres), as the bridge and the virtual mocap publish
#: it, converted from Motive's streamed up axis (equimus_description.motive).
FRAME_MOCAP = 'mocap'
FRAME_WORLD = 'world'


def mocap_topic(body: str) -> str:
    return f'/mocap/{body}/pose'


def mocap_pose(body: str) -> Topic:
    """The pose topic of one rigid body (any name Motive streams; BODIES are the leg's)."""
    return Topic(
        mocap_topic(body),
        'geometry_msgs/msg/PoseStamped',
        QosClass.SENSOR,
        f'pose of the {body} rigid body',
    )


MOCAP_TOPICS = tuple(mocap_topic(b) for b in BODIES)

#: Opt-in (natnet_bridge `publish_markers`): Motive's labeled markers as one point cloud per frame.
MOCAP_MARKERS = Topic(
    '/mocap/markers',
    'sensor_msgs/msg/PointCloud2',
    QosClass.SENSOR,
    "Motive's labeled markers: x, y, z (float32, m) and id (uint32, model << 16 | marker)",
)

JOINT_STATES = Topic(
    '/joint_states',
    'sensor_msgs/msg/JointState',
    QosClass.SENSOR,
    'estimated joint angles and velocities (rad, rad/s), stamped at the mocap frame',
    arrays=(('name', JOINTS), ('position', JOINTS), ('velocity', JOINTS)),
)
SIM_JOINT_STATES = Topic(
    '/sim/joint_states',
    'sensor_msgs/msg/JointState',
    QosClass.SENSOR,
    'ground-truth joint state of the simulated leg',
    arrays=(('name', JOINTS), ('position', JOINTS), ('velocity', JOINTS)),
)
REFERENCE = Topic(
    '/reference/joint',
    'sensor_msgs/msg/JointState',
    QosClass.COMMAND,
    'joint reference (rad) with its velocity',
    arrays=(('name', JOINTS), ('position', JOINTS), ('velocity', JOINTS)),
)
VALVE_COMMAND = Topic(
    '/valve/command',
    'std_msgs/msg/Float64MultiArray',
    QosClass.COMMAND,
    'commanded valve pressures (kPa, [maa, baa]) before the safety layer',
    arrays=(('data', ACTUATORS),),
)
#: Measured and applied pressures are stamped (aligned in time with the poses in a bag, plotted
#: against time): a sensor_msgs/JointState of the actuators, `name` = ACTUATORS and `effort` =
#: the pressures (kPa), no positions or velocities (equimus_ros.cdr.PressureStateWriter).
VALVE_APPLIED = Topic(
    '/valve/applied',
    'sensor_msgs/msg/JointState',
    QosClass.COMMAND,
    'pressures the valve driver applies after its safety filter (effort, kPa, stamped when '
    "applied); the simulated leg's valves follow it (reliable: each message is a lockstep step)",
    arrays=(('name', ACTUATORS), ('effort', ACTUATORS)),
)
VALVE_PRESSURE = Topic(
    '/valve/pressure',
    'sensor_msgs/msg/JointState',
    QosClass.SENSOR,
    'pressures measured at the valves (effort, kPa, stamped when measured)',
    arrays=(('name', ACTUATORS), ('effort', ACTUATORS)),
)
#: Latched, so a controller that starts later learns the state at once.
VALVE_ARMED = Topic(
    '/valve/armed',
    'std_msgs/msg/Bool',
    QosClass.LATCHED,
    'true while the valve driver is active and armed (the valves follow /valve/command), sent '
    'on every change and at every arm (an arm restarts the output from 0 kPa): the controller '
    'starts afresh (integrators, warm starts) at each true',
)


def preview_columns(joints: tuple[str, ...]) -> tuple[str, ...]:
    """The columns of each /reference/preview row: the time (s, the reference node's clock, as
    the stamps), then the joint angles (rad) and velocities (rad/s)."""
    return ('t', *joints, *(f'{j}_velocity' for j in joints))


PREVIEW_COLUMNS = preview_columns(JOINTS)
REFERENCE_PREVIEW = Topic(
    '/reference/preview',
    'std_msgs/msg/Float64MultiArray',
    QosClass.COMMAND,
    "the reference's own next `preview` s, one row a point (PREVIEW_COLUMNS), so a controller "
    'can act before the reference moves (the valves lag)',
    arrays=(('data', PREVIEW_COLUMNS),),
)
DIAGNOSTICS = Topic(
    '/diagnostics',
    'diagnostic_msgs/msg/DiagnosticArray',
    QosClass.DIAGNOSTICS,
    'health of every node',
)
CLOCK = Topic('/clock', 'rosgraph_msgs/msg/Clock', QosClass.CLOCK, 'simulation time')

TOPICS: tuple[Topic, ...] = (
    *(mocap_pose(b) for b in BODIES),
    JOINT_STATES,
    SIM_JOINT_STATES,
    REFERENCE,
    REFERENCE_PREVIEW,
    VALVE_COMMAND,
    VALVE_APPLIED,
    VALVE_PRESSURE,
    VALVE_ARMED,
    DIAGNOSTICS,
    CLOCK,
)


# --- robot model and transforms (equimus_tf) ---
ROBOT_DESCRIPTION = Topic(
    '/robot_description',
    'std_msgs/msg/String',
    QosClass.LATCHED,
    "the leg's URDF (equimus_description.urdf, from the same description as the MJCF)",
)
TF = Topic(
    '/tf',
    'tf2_msgs/msg/TFMessage',
    QosClass.TF,
    'base → thigh → calf from /joint_states, and mocap → mocap_<body> per rigid body',
)
TF_STATIC = Topic(
    '/tf_static',
    'tf2_msgs/msg/TFMessage',
    QosClass.LATCHED,
    "world → base (the URDF's fixed joint) and world → mocap (the motion-capture frame)",
)


def mocap_frame(body: str) -> str:
    """TF frame of a motion-capture rigid body (a child of its pose's frame_id)."""
    return f'{FRAME_MOCAP}_{body}'


def topic_named(name: str) -> Topic:
    """The interface's Topic of a topic name (any `/mocap/<body>/pose` included): how a tool or a
    test finds a topic's type, QoS class and array layout from its name alone."""
    known = {t.name: t for t in (*TOPICS, MOCAP_MARKERS, ROBOT_DESCRIPTION, TF, TF_STATIC)}
    if name in known:
        return known[name]
    parts = name.split('/')
    if len(parts) == 4 and parts[:2] == ['', 'mocap'] and parts[2] and parts[3] == 'pose':
        return mocap_pose(parts[2])
    raise KeyError(f'{name!r} is not a topic of the interface (equimus_description.interface)')
