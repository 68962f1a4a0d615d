"""The sim graph on the 3-DOF example limb under PID, started as `equimus launch sim` starts it:
describe_graph('sim', {controller: pid, reference: step, params_file:
config/limb_3dof_params.yaml}) run by the Supervisor (real processes, real rclpy/DDS, real
MuJoCo), composed and split, recording. The parameter file points every node at limb_3dof.yaml;
the graph's bag must show /sim/joint_states carrying the three joints, /valve/applied the three
muscles within 0-50 kPa, and the leg tracking the step reference on all joints: settled within
0.03 rad once a pose has been held 2 s, RMSE (moves included) below 0.15 rad, both judged from
the reference's first move on. The first pose is not a move: the leg jumps to it from its rest
pose."""

import itertools
import pathlib
import time

import numpy as np
import pytest

from equimus_bringup.graph import describe_graph
from equimus_bringup.supervisor import Supervisor

rclpy = pytest.importorskip('rclpy')

PARAMS = pathlib.Path(__file__).resolve().parents[2] / 'config' / 'limb_3dof_params.yaml'
JOINTS = ['hip', 'knee', 'ankle']
MUSCLES = ['maa', 'baa', 'faa']


# The split graph guards its state on the steady clock (0.25 s), and at 4x real time a process
# starved for a moment by another test worker vents mid-pose (ef979b7's CI run: 0.434 s without
# a state, ankle settled 0.111 rad): it judges the graph's timing, so it runs in the serial part.
@pytest.mark.parametrize('composed', ['true', pytest.param('false', marks=pytest.mark.serial)])
def test_three_dof_limb_runs_in_the_sim_graph_under_pid(ros_node, composed, tmp_path):
    from sensor_msgs.msg import JointState

    from equimus_description.interface import REFERENCE, SIM_JOINT_STATES, VALVE_APPLIED
    from equimus_record import bag
    from equimus_ros.qos import qos_for

    def stamp(m):
        return m.header.stamp.sec + m.header.stamp.nanosec * 1e-9

    # The live probe only follows the run's progress; what is judged is read from the graph's
    # own bag afterwards. Judged from a probe's subscriptions, a loaded machine decided the
    # result: a starved pytest worker's sockets dropped most of the best-effort stream
    # (142 samples of 13.5 s, gaps of 4-5 s, and no held pose left to judge).
    seen: dict[str, float] = {}  # the last stamp received on each topic
    moved: list[float] = []  # the reference's first move received
    last_pose: list[float] = []

    def on_truth(m):
        seen['truth'] = stamp(m)

    def on_ref(m):
        seen['ref'] = stamp(m)
        if last_pose and list(m.position) != last_pose and not moved:
            moved.append(stamp(m))
        last_pose[:] = m.position

    ros_node.create_subscription(
        JointState, SIM_JOINT_STATES.name, on_truth, qos_for(SIM_JOINT_STATES)
    )
    ros_node.create_subscription(JointState, REFERENCE.name, on_ref, qos_for(REFERENCE))
    bag_dir = tmp_path / 'bag'
    specs = describe_graph(
        'sim',
        {
            'controller': 'pid',
            'reference': 'step',
            'params_file': str(PARAMS),
            'composed': composed,
            'record': 'true',
            'bag': str(bag_dir),
            # At most 4x real time, as the graph runs in the tests beside other work.
            'real_time_factor': '4',
        },
    )
    sup = Supervisor(specs, echo=False)
    sup.start()
    try:
        # move 0.5 s + hold 3 s per step pose: 8 s of sim time from the first move (two poses),
        # and a second more so the bag holds them whatever the probe missed
        end = time.monotonic() + 120
        while time.monotonic() < end and not (
            moved and min(seen.values(), default=0.0) >= moved[0] + 9.0 and len(seen) == 2
        ):
            rclpy.spin_once(ros_node, timeout_sec=0.05)
            assert sup.poll() is None, (sup.failed, {k: v[-5:] for k, v in sup.output.items()})
    finally:
        sup.stop()
    logs = [ln for out in sup.output.values() for ln in out]
    assert not any('Traceback' in ln for ln in logs), logs[-30:]
    # over DDS, outside the graph, both topics came and the reference moved (counts not judged)
    assert set(seen) == {'truth', 'ref'} and moved, (seen, moved)
    assert bag.is_complete(bag_dir), 'the recorder did not close its bag'
    truth, ref, applied = [], [], []
    topics = [SIM_JOINT_STATES.name, REFERENCE.name, VALVE_APPLIED.name]
    for topic, _, m in bag.read_messages(bag_dir, topics):
        if topic == VALVE_APPLIED.name:
            applied.append((list(m.name), list(m.effort)))
        else:
            (truth if topic == SIM_JOINT_STATES.name else ref).append(
                (stamp(m), list(m.name), list(m.position))
            )
    truth.sort(key=lambda r: r[0])
    ref.sort(key=lambda r: r[0])
    assert ref and truth, 'no reference or no ground truth recorded'
    first_move = _first_move(ref)
    assert first_move is not None, 'the reference never moved'
    assert truth[-1][0] >= first_move + 8.0, 'the simulation did not advance'
    assert ref[-1][0] >= first_move + 8.0, 'the reference stopped before 8 s of moves'
    assert {tuple(n) for _, n, _ in truth} == {tuple(JOINTS)}
    assert {tuple(n) for _, n, _ in ref} == {tuple(JOINTS)}
    assert applied and {tuple(n) for n, _ in applied} == {tuple(MUSCLES)}
    p = np.array([e for _, e in applied])
    assert np.all((p >= 0.0) & (p <= 50.0)) and np.max(p) > 1.0

    tt = np.array([t for t, _, _ in truth])
    qt = np.array([q for _, _, q in truth])
    tr = np.array([t for t, _, _ in ref])
    qr = np.array([q for _, _, q in ref])
    m = (tt > first_move) & (tt < tr[-1])
    qi = np.column_stack([np.interp(tt[m], tr, qr[:, j]) for j in range(3)])
    rmse = np.sqrt(np.mean((qt[m] - qi) ** 2, axis=0))
    print(f'composed={composed}: RMSE hip {rmse[0]:.4f}, knee {rmse[1]:.4f}, ankle {rmse[2]:.4f}')
    held = np.all(
        np.abs(qi - np.column_stack([np.interp(tt[m] - 2.0, tr, qr[:, j]) for j in range(3)]))
        < 1e-9,
        axis=1,
    ) & (tt[m] > first_move + 2.0)
    # At least 0.5 s of held poses judged (a bag at 120 Hz holds 2 s of each of two poses)
    counts = {
        'held': int(held.sum()),
        'first_move': first_move,
        'truth': (len(tt), float(tt[0]), float(tt[-1]), float(np.max(np.diff(tt)))),
        'ref': (len(tr), float(tr[0]), float(tr[-1]), float(np.max(np.diff(tr)))),
    }  # samples, first and last stamp, largest gap: what the bag holds, if too few
    assert held.sum() > 60, counts
    settled = np.max(np.abs(qt[m][held] - qi[held]), axis=0)
    print(
        f'composed={composed}: settled error {np.round(settled, 4).tolist()} rad '
        f'over {held.sum()} samples'
    )
    warnings = [ln for ln in logs if 'WARN' in ln or 'ERROR' in ln]
    assert np.all(settled < 0.03), (settled, warnings[-20:])
    assert np.all(rmse < 0.15), (rmse, warnings[-20:])
    assert np.all(np.ptp(qr, axis=0) > 0.1)  # the reference moved every joint


def _first_move(ref: list) -> float | None:
    """Stamp of the first reference sample that differs from the one before it."""
    for (_, _, a), (t, _, b) in itertools.pairwise(ref):
        if a != b:
            return t
    return None
