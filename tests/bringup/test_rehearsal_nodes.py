"""What the fused loop's rehearsal does to the nodes it runs through (control_loop's
`LoopLatency.rehearsal`): the estimator, the controller and the valve driver each rehearse on a
spare copy, so the real chain's next estimate, command and SET frame are what they would have
been without it, and the copies compute what the real ones do."""

import copy
import time

import numpy as np
from rclpy.parameter import Parameter

from equimus_control.controller_node import ControllerNode
from equimus_control.estimator_node import EstimatorNode
from equimus_description.interface import BODIES
from equimus_hw.valve import protocol as VP
from equimus_hw.valve.board_emulator import BoardEmulator
from equimus_hw.valve.driver_node import ValveDriver
from equimus_ros.lifecycle import bring_up
from equimus_sim.simulator import make_simulator


def _leg_frames(n: int) -> list[tuple[int, list]]:
    """n frames of the simulated leg's bodies under a changing command, as the estimator
    takes them (ns, [(body, (position, x y z w))])."""
    sim = make_simulator()
    out = []
    for k in range(n):
        sim.set_command([15.0 + 10.0 * np.sin(0.7 * k / 120), 12.0])
        sim.advance(1 / 120)
        poses = sim.body_poses(BODIES)
        frame = [
            (name, (tuple(map(float, p)), (float(q[1]), float(q[2]), float(q[3]), float(q[0]))))
            for name, (p, q) in poses.items()
        ]
        out.append(((k + 1) * 8_333_333, frame))
    return out


def test_the_estimator_and_controller_rehearse_on_copies(ros_node):
    states = []
    estimator = EstimatorNode(subscribe=False, downstream=lambda *s: states.append(s))
    commands = []
    controller = ControllerNode(
        subscribe_state=False, downstream=commands.append, subscribe_armed=False
    )
    try:
        frames = _leg_frames(40)
        for ns, frame in frames[:30]:
            estimator.on_frame(ns, frame)
        assert len(states) == 30
        # The first rehearsal copies the estimator after the last frame: that frame's stamp
        # again is a repeat to the copy (no estimate); after the next real frame it estimates
        # that frame as the real one did, bit for bit.
        assert estimator.rehearse(frames[29][1]) is None
        assert estimator.frames == 30
        estimator.on_frame(*frames[30])
        stamp, position, velocity = estimator.rehearse(frames[30][1])
        assert stamp == frames[30][0] * 1e-9
        assert (position, velocity) == (states[-1][1], states[-1][2])
        assert estimator.frames == 31 and estimator.est.last_stamp == frames[30][0] * 1e-9
        # Rehearsals between real frames leave the real estimates as they were: a twin fed the
        # same frames without them gives the same ones.
        twin = copy.deepcopy(estimator.est)
        for ns, frame in frames[31:]:
            estimator.rehearse(frame)
            estimator.on_frame(ns, frame)
            e = twin.update(ns * 1e-9, [dict(frame)[b] for b in estimator.bodies])
            assert states[-1][1:] == (e.position.tolist(), e.velocity.tolist())

        # The controller: a twin of its step, taken before the rehearsals, commands what the
        # real step commands after them.
        ns, q, qd = states[-1]
        controller.on_joints(ns, q, qd)
        twin_step = copy.deepcopy(controller.step)
        for k in range(5):
            rehearsed = controller.rehearse(ns * 1e-9, [x + 0.01 * k for x in q], qd)
            assert len(rehearsed) == 2 and all(np.isfinite(rehearsed))
        assert controller.step.last_stamp == ns * 1e-9
        ns2 = ns + 8_333_333
        controller.on_joints(ns2, q, qd)
        expected = twin_step.step(q, qd, ns2 * 1e-9, time.monotonic())
        assert np.array_equal(commands[-1], expected.pressures), (commands[-1], expected)
        # The copy follows the real step's reference and preview.
        controller.step.set_reference([0.3, -0.6], [0.0, 0.0], ns2 * 1e-9)
        controller.rehearse(ns2 * 1e-9, q, qd)
        spare = controller._spare[1]
        assert spare.q_ref is controller.step.q_ref and spare.ref_stamp == ns2 * 1e-9
    finally:
        controller.destroy_node()
        estimator.destroy_node()


def test_the_driver_rehearses_without_writing(ros_node, tmp_path):
    board = BoardEmulator(channels=2, link=str(tmp_path / 'dac'), log_path=None)
    board.start()
    driver = ValveDriver(
        parameter_overrides=[
            Parameter('require_calibration', value=False),
            Parameter('port', value=board.link),
        ]
    )
    try:
        assert driver.rehearse([10.0, 20.0]) == b''  # unconfigured: no board, nothing
        bring_up(driver)
        end = time.monotonic() + 10.0
        while not driver.board.connected and time.monotonic() < end:
            time.sleep(0.01)
        assert driver.board.connected
        sent = driver.board.stats.frames_sent
        output = list(driver.safety._output)
        frame = driver.rehearse([10.0, 20.0])
        # a SET frame, sequence 0, of each channel's code through its calibration
        msg = VP.decode_payload(VP.cobs_decode(frame[:-1]))
        assert isinstance(msg, VP.Set) and msg.seq == 0 and len(msg.codes) == 2
        spare = driver._spare_safety[1]
        assert list(msg.codes) == [
            cal.kpa_to_code(p) for cal, p in zip(driver.cals, spare._output, strict=True)
        ]
        assert driver.board.stats.frames_sent == sent
        assert driver.safety._output == output and spare is not driver.safety
    finally:
        driver.vent_and_close()
        driver.destroy_node()
        board.close()


def test_the_fused_loop_rehearses_when_asked_and_controls_as_ever(ros_node, tmp_path):
    """control_loop rehearse_lead_ms 1.0 on the emulated rig: the client rehearses before the
    frames (its /diagnostics), none raises, and the loop commands the valves within 0-50 kPa."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from sensor_msgs.msg import JointState

    from equimus_bringup.graph import describe_graph
    from equimus_bringup.supervisor import Supervisor
    from equimus_description.interface import DIAGNOSTICS, VALVE_APPLIED
    from equimus_hw.natnet.ports import free_udp_port_pair
    from equimus_ros.qos import subscription

    params = tmp_path / 'loop.yaml'
    params.write_text('control_loop:\n  ros__parameters:\n    rehearse_lead_ms: 1.0\n')
    port = free_udp_port_pair()
    specs = describe_graph(
        'hardware',
        {
            'emulator': 'true',
            'auto_arm': 'true',
            'fused_loop': 'true',
            'record': 'false',
            'serial_port': str(tmp_path / 'dac'),
            'natnet_command_port': str(port),
            'natnet_data_port': str(port + 1),
            'params_file': str(params),
        },
    )
    loop: dict[str, str] = {}
    applied: list[list[float]] = []

    def on_diag(msg: DiagnosticArray) -> None:
        for st in msg.status:
            if st.name.startswith('control_loop:'):
                loop.update({kv.key: kv.value for kv in st.values})

    subscription(ros_node, DiagnosticArray, DIAGNOSTICS, on_diag)
    subscription(ros_node, JointState, VALVE_APPLIED, lambda m: applied.append(list(m.effort)))
    sup = Supervisor(specs, echo=False)
    sup.start()
    try:
        end = time.monotonic() + 90.0
        while not (int(loop.get('rehearsals', '0')) > 120 and any(max(p) > 1.0 for p in applied)):
            assert sup.poll() is None, sup.failed
            assert time.monotonic() < end, (loop, applied[-3:])
            rclpy.spin_once(ros_node, timeout_sec=0.05)
    finally:
        sup.stop()
    assert loop['rehearse_lead_ms'] == '1' and 'rehearse_error' not in loop, loop
    assert float(loop['rehearsal_cpu_p50_us']) > 0.0, loop
    assert int(loop['frames']) > 0, loop
    assert all(0.0 <= p <= 50.0 for row in applied for p in row)
