"""rig_emulator --truth: the emulated rig simulates a plant the stack does not know."""

import subprocess
import sys
import time

import numpy as np
import pytest
import serial

from equimus_bringup.rig_emulator import BODIES, EmulatedRig
from equimus_hw.natnet.emulator import NatNetEmulator
from equimus_hw.natnet.ports import free_udp_port_pair
from equimus_hw.valve import protocol as P
from equimus_sim import truth as T


class Host:
    """The driver's side of the board's real pty: write frames, read the replies."""

    def __init__(self, path):
        self.ser = serial.Serial(path, 115200, timeout=0.01)
        self.dec = P.FrameDecoder()

    def send(self, msg):
        self.ser.write(P.encode(msg))

    def replies(self, timeout=1.0):
        out = []
        deadline = time.monotonic() + timeout
        while not out and time.monotonic() < deadline:
            out += self.dec.feed(self.ser.read(256))
        return out

    def close(self):
        self.ser.close()


def _drive(rig, link, kpa, ticks):
    """SET frames over the real pty at `kpa` (both channels), one mocap tick per frame; the
    joint angles and the board's read-back of the valves at the end."""
    rig.board.start()
    host = Host(link)
    measured = None
    try:
        code = rig.board.cal.kpa_to_code(kpa)
        for seq in range(1, ticks + 1):
            host.send(P.Set(seq, (code, code)))
            (ack,) = host.replies()
            measured = ack.measured
            rig.tick()
            time.sleep(0.005)
        q = np.array(rig.sim.joint_state()[0])
    finally:
        host.close()
        rig.board.close()
    return q, rig.board.pressures(), measured


def test_a_drawn_truth_is_another_plant_than_the_nominal_rig(tmp_path):
    truth = T.draw(5)  # 13 ms of mocap latency: two frames
    rigs = {
        'nominal': EmulatedRig(str(tmp_path / 'a'), NatNetEmulator(bodies=BODIES)),
        'truth': EmulatedRig(str(tmp_path / 'b'), NatNetEmulator(bodies=BODIES), truth=truth),
    }
    assert rigs['truth'].truth == truth and rigs['nominal'].truth is None
    links = {'nominal': str(tmp_path / 'a'), 'truth': str(tmp_path / 'b')}
    out = {name: _drive(rig, links[name], 30.0, 60) for name, rig in rigs.items()}
    (q_n, p_n, m_n), (q_t, p_t, m_t) = out['nominal'], out['truth']
    # Same commands, another leg and other valves: the motion and the pressures differ.
    assert np.max(np.abs(q_t - q_n)) > 0.005, (q_t, q_n)
    assert np.max(np.abs(np.array(p_t) - np.array(p_n))) > 0.3, (p_t, p_n)
    assert m_t is not None and m_n is not None  # the board reads the valves back on both
    # The latency is the stream's: whole frames, reported in NatNet's own timestamps.
    delay = truth.mocap_delay_frames(120.0)
    assert delay >= 1 and rigs['truth'].mocap.config.latency == pytest.approx(delay / 120.0)
    assert rigs['truth'].natnet.exposure_latency_s == pytest.approx(
        rigs['nominal'].natnet.exposure_latency_s + delay / 120.0
    )
    assert rigs['truth'].mocap.config.position_noise == truth.position_noise_m


def test_truth_and_leg_overrides_together_are_refused(tmp_path):
    with pytest.raises(ValueError, match='give one'):
        EmulatedRig(
            str(tmp_path / 'a'),
            NatNetEmulator(bodies=BODIES),
            leg_overrides='config/leg_fit.yaml',
            truth=T.draw(1),
        )


def _cli(tmp_path, *args, timeout=60):
    port = free_udp_port_pair()
    return subprocess.run(
        [
            sys.executable,
            '-m',
            'equimus_bringup.rig_emulator',
            '--link',
            str(tmp_path / 'dac'),
            '--unicast',
            '--command-port',
            str(port),
            '--data-port',
            str(port + 1),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_cli_writes_the_truth_it_runs(tmp_path):
    out = tmp_path / 'truth.yaml'
    t0 = time.monotonic()
    proc = _cli(
        tmp_path, '--truth', 'random', '--seed', '4', '--truth-out', str(out), '--duration', '0.3'
    )
    assert proc.returncode == 0, proc.stderr
    assert 'plant: truth random (seed 4)' in proc.stdout
    assert T.load(out) == T.draw(4)
    assert time.monotonic() - t0 < 60
    # the file it wrote is a truth the rig takes back
    proc = _cli(tmp_path, '--truth', str(out), '--duration', '0.2')
    assert proc.returncode == 0 and 'plant: truth' in proc.stdout, proc.stderr


@pytest.mark.parametrize(
    ('args', 'words'),
    [
        (('--truth', 'random'), 'needs --seed'),
        (('--seed', '3'), 'give --truth random'),
        (('--truth', 'nope.yaml'), 'does not exist'),
    ],
)
def test_cli_bad_truth_is_one_line_and_exit_2(tmp_path, args, words):
    proc = _cli(tmp_path, *args, '--duration', '0.2')
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and 'Traceback' not in proc.stderr


def test_the_hardware_graph_passes_rig_truth_to_the_emulator_only():
    from equimus_bringup import prestart
    from equimus_bringup.graph import describe_graph, resolve_args

    specs = describe_graph('hardware', {'emulator': 'true', 'rig_truth': 'random:3'})
    (rig,) = [s for s in specs if s.name == 'rig_emulator']
    assert rig.arguments[rig.arguments.index('--truth') + 1] == 'random:3'
    # no other process is told the truth: the stack never reads it
    assert not any('random:3' in str(s) for s in specs if s.name != 'rig_emulator')
    nominal = describe_graph('hardware', {'emulator': 'true'})
    assert all('--truth' not in s.arguments for s in nominal)
    for bad in (
        {'rig_truth': 'random:3'},
        {'emulator': 'true', 'rig_truth': 'random:3', 'leg_overrides': 'config/leg_fit.yaml'},
    ):
        with pytest.raises(ValueError, match='rig_truth'):
            resolve_args('hardware', bad)
    with pytest.raises(prestart.StartError, match='does not exist'):
        prestart.check('hardware', {'emulator': 'true', 'rig_truth': 'no/truth.yaml'})


def test_main_job_truth_arguments():
    from equimus_bringup.main_job import resolve_truth
    from equimus_bringup.prestart import StartError

    assert resolve_truth('hardware', 'random', 3) == T.draw(3)
    for mode, spec, seed, words in (
        ('sim', 'random', 3, '--mode hardware'),
        ('hardware', 'random', None, 'needs --seed'),
        ('hardware', 'x.yaml', 3, 'give --truth random'),
        ('hardware', 'no/such.yaml', None, 'does not exist'),
    ):
        with pytest.raises(StartError, match=words):
            resolve_truth(mode, spec, seed)


def test_a_pressure_acts_from_the_frame_that_read_it_and_poses_show_their_exposure_time(tmp_path):
    """The rig reads the valves at each frame; that reading acts on the leg from the frame's
    time until the next reading, and a pose leaves the rig `exposure_latency_s` (what NatNet
    reports) after the state it shows. Before, each reading acted a whole frame early and poses
    were stamped 4 ms before their state: identification saw the leg answer 12 ms before its
    pressures, a systematic error no parameter of the model has."""
    from equimus_sim.simulator import LegSimulator

    def run(step_before):
        rig = EmulatedRig(str(tmp_path / f'link{step_before}'), NatNetEmulator(bodies=BODIES))
        q = []
        for k in range(6):
            if k == step_before:  # the valves reach 30 kPa between two frames
                for v in rig.board.valves:
                    v.valve.p = np.array([30.0])
            rig.tick()
            q.append(rig.sim.joint_state()[0])
        return rig, np.array(q)

    rig, stepped = run(3)
    _, still = run(99)
    lead, period = rig.exposure_lead_s, rig.period
    assert lead == pytest.approx(round(0.004 / rig.sim.dt) * rig.sim.dt)  # NatNet's 4 ms, in steps
    assert rig.natnet.exposure_latency_s == pytest.approx(lead)
    # frame 3 read the new pressure: its own pose is not moved by it, frame 4's is
    np.testing.assert_array_equal(stepped[:4], still[:4])
    assert np.max(np.abs(stepped[4] - still[4])) > 1e-6
    # exactly: the pressure acts from frame 3's exposure time + the lead
    ref = LegSimulator(rig.sim.leg, valve=None, p_max=rig.sim.leg.pressure_max_kpa)
    ref.set_command([0.0, 0.0])
    ref.advance(4 * period + lead)
    ref.set_command([30.0, 30.0])
    ref.advance(period - lead)
    np.testing.assert_allclose(ref.joint_state()[0], stepped[4], rtol=0, atol=1e-12)
