"""The pre-start check and the nodes are one definition: for each node of the graphs, the names
`equimus_bringup.prestart.NODE_CONFIGS` knows are the parameters the real node declares (built
here in-process), and a value the check refuses is one the node refuses too."""

import pytest

from equimus_bringup import prestart
from equimus_ros.params import declared, problem

rclpy = pytest.importorskip('rclpy')


def _node(name, tmp_path):
    """The real node `name` (not brought up: no port is opened)."""
    if name == 'valve_driver':
        from rclpy.parameter import Parameter

        from equimus_hw.valve.driver_node import ValveDriver

        # the serial board without a calibration file is refused at construction
        return ValveDriver(parameter_overrides=[Parameter('require_calibration', value=False)])
    if name == 'natnet_bridge':
        from equimus_hw.natnet.bridge_node import NatNetBridge

        return NatNetBridge()
    if name == 'estimator':
        from equimus_control.estimator_node import EstimatorNode

        return EstimatorNode()
    if name == 'controller':
        from equimus_control.controller_node import ControllerNode

        return ControllerNode()
    if name == 'reference':
        from equimus_control.reference_node import ReferenceNode

        return ReferenceNode()
    if name == 'recorder':
        from equimus_record.recorder_node import Recorder

        return Recorder()
    if name == 'state_publisher':
        from equimus_tf.state_publisher import StatePublisher

        return StatePublisher()
    if name == 'sim':
        from equimus_sim.sim_node import SimNode

        return SimNode()
    if name == 'control_loop':
        from equimus_bringup.control_loop import LoopLatency

        return LoopLatency()
    raise AssertionError(name)


# sim_graph is left out: its node exists only with the whole composed graph (its config class is
# SimGraphConfig alone; test_sim_graph.py runs it).
NODES = [n for n in prestart.NODE_CONFIGS if n != 'sim_graph']


@pytest.mark.parametrize('name', NODES)
def test_the_check_knows_exactly_what_the_node_declares(name, tmp_path):
    rclpy.init(args=['--ros-args', '-p', f'bag_path:={tmp_path / "bag"}'])
    try:
        node = _node(name, tmp_path)
        try:
            names = set(node._parameters)
        finally:
            node.destroy_node()
    finally:
        rclpy.try_shutdown()
    known = set(declared(prestart.NODE_CONFIGS[name]()))
    if name == 'controller':
        # the node declares its chosen controller's settings (pid by default); the check knows
        # every controller's, since control.yaml holds them all
        from equimus_control.controllers import kinds

        pid = kinds()['pid']
        assert names <= known, names - known
        assert set(declared([(pid.config(), pid.prefix)])) <= names
    else:
        assert names == known, (names - known, known - names)


def test_what_the_check_refuses_the_node_refuses(tmp_path):
    """max_kpa 80 and an integer for a double: refused by the check, and by the node built with
    the same file (its own exit 2 path: run_node)."""
    import subprocess
    import sys

    for text, why in (
        ('    max_kpa: 80.0\n', 'out of range'),
        ('    max_kpa: 40\n', 'must be a double'),
        ('    command_timeout_s: -1.0\n', 'out of range'),
    ):
        f = tmp_path / 'valve.yaml'
        f.write_text('valve_driver:\n  ros__parameters:\n' + text)
        name, value = text.strip().split(': ')
        from equimus_ros import paramfiles

        values = {k: v.value for s in paramfiles.sections(str(f)) for k, v in s.parameters.items()}
        found = problem(prestart.NODE_CONFIGS['valve_driver'](), values)
        assert found is not None and found[0] == name and why in found[1], found
        proc = subprocess.run(
            [sys.executable, '-m', 'equimus_hw.valve.driver_node', '--ros-args', '--params-file',
             str(f)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 2 and name in proc.stderr, (proc.returncode, proc.stderr)
