"""Both graphs end to end: start, run the triangle under control, record, stop, read the bag back.

The sim graph runs the lockstep simulation; the hardware graph runs the real-rig nodes (NatNet
bridge, valve driver) against rig_emulator: real UDP NatNet packets and real serial bytes on a
pseudo-terminal around the simulated leg.
"""
import json


from equimus_bringup import main_job
from equimus_record import bag

CONTROL_TOPICS = ['/mocap/base/pose', '/mocap/thigh/pose', '/mocap/calf/pose', '/joint_states',
                  '/valve/command', '/valve/applied', '/valve/pressure', '/reference/joint']


def _run(tmp_path, *args):
    assert main_job.main(['--out', str(tmp_path), *args]) == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return run_dir


def test_sim_graph_tracks_the_triangle_and_records_everything(tmp_path):
    run_dir = _run(tmp_path, '--mode', 'sim', '--controller', 'pid', '--duration', '8')
    counts = bag.topic_counts(run_dir / 'bag')
    for topic in CONTROL_TOPICS + ['/sim/joint_states', '/clock', '/diagnostics']:
        assert topic in counts, f'{topic} missing from the bag: {sorted(counts)}'
    # Bag time is sim time: the mocap-clocked topics arrive at 120 Hz of sim time.
    for topic in ('/mocap/calf/pose', '/joint_states', '/valve/command', '/sim/joint_states'):
        assert 105 < counts[topic][2] < 135, (topic, counts[topic])
    summary = json.loads((run_dir / 'summary.json').read_text())
    assert summary['rmse']['hip'] < 0.1 and summary['rmse']['knee'] < 0.15, summary
    assert summary['estimator_rmse']['hip'] < 0.005, summary
    assert 0.0 <= summary['pressure_min'] and summary['pressure_max'] <= 50.0
    assert (run_dir / 'tracking.png').stat().st_size > 10_000


def test_hardware_graph_against_the_emulated_rig(tmp_path):
    run_dir = _run(tmp_path, '--mode', 'hardware', '--controller', 'pid', '--duration', '8')
    counts = bag.topic_counts(run_dir / 'bag')
    for topic in CONTROL_TOPICS + ['/diagnostics']:
        assert topic in counts, f'{topic} missing from the bag: {sorted(counts)}'
    assert '/clock' not in counts and '/sim/joint_states' not in counts
    for topic in ('/mocap/calf/pose', '/joint_states'):
        assert 90 < counts[topic][2] < 135, (topic, counts[topic])
    # Every command reached the wire through the driver's clamp, and the loop tracked.
    applied = [m.data for _, _, m in bag.read_messages(run_dir / 'bag', ['/valve/applied'])]
    assert applied and all(0.0 <= p <= 50.0 for row in applied for p in row)
    summary = json.loads((run_dir / 'summary.json').read_text())
    assert summary['rmse']['hip'] < 0.15 and summary['rmse']['knee'] < 0.2, summary


def test_a_node_dying_stops_the_graph_with_failure(tmp_path):
    """`equimus launch` exits non-zero when a node dies, after stopping the others in order."""
    import os
    import signal
    import time

    from equimus_bringup.graph import describe_graph
    from equimus_bringup.supervisor import Supervisor

    sup = Supervisor(describe_graph('sim', {'record': 'true', 'bag': str(tmp_path / 'bag')}), echo=False)
    sup.start()
    try:
        time.sleep(3.0)
        assert sup.poll() is None, sup.failed
        os.kill(sup.procs['controller'].pid, signal.SIGKILL)
        rc = sup.run_until(timeout=20.0)
    finally:
        sup.stop()
    assert rc == 1
    assert sup.failed.startswith('controller exited with code -9'), sup.failed
    assert all(p.poll() is not None for p in sup.procs.values())
    assert sup.procs['recorder'].returncode == 0      # stopped cleanly, bag closed
    assert bag.is_complete(tmp_path / 'bag')


def test_fused_control_loop_against_the_emulated_rig(tmp_path):
    """fused_loop:=true: one process, the same topics recorded, the same clamp, the same vent."""
    run_dir = _run(tmp_path, '--mode', 'hardware', '--controller', 'pid', '--duration', '8',
                   '--set', 'fused_loop:=true')
    counts = bag.topic_counts(run_dir / 'bag')
    for topic in CONTROL_TOPICS + ['/diagnostics']:
        assert topic in counts, f'{topic} missing from the bag: {sorted(counts)}'
    for topic in ('/mocap/calf/pose', '/joint_states', '/valve/command'):
        assert 90 < counts[topic][2] < 135, (topic, counts[topic])
    applied = [m.data for _, _, m in bag.read_messages(run_dir / 'bag', ['/valve/applied'])]
    assert applied and all(0.0 <= p <= 50.0 for row in applied for p in row)
    summary = json.loads((run_dir / 'summary.json').read_text())
    assert summary['rmse']['hip'] < 0.15 and summary['rmse']['knee'] < 0.2, summary
    log = (run_dir / 'graph.log').read_text()
    assert '[control_loop] valve_driver: vented on shutdown (acknowledged)' in log, log[-3000:]
    processes = {line.split(']')[0] + ']' for line in log.splitlines() if line.startswith('[')}
    assert processes == {'[rig_emulator]', '[control_loop]', '[reference]', '[recorder]'}, processes
    assert 'Traceback' not in log
