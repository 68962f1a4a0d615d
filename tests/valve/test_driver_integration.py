"""valve_driver (separate process, real rclpy/DDS) against a DAC board on a real pty: the Python
board emulator, and the board's firmware itself built for this computer (every test runs on both).

Every assertion about what reaches the valves is made on the SET frames the board received
from the serial bytes. The bytes the driver sent are recorded, and the last test replays them to
both boards on one clock: their replies must be byte-identical."""

import math
import signal
import time
from itertools import pairwise

import pytest

from equimus_hw.valve import protocol as P
from equimus_hw.valve.calibration import ValveCalibration
from equimus_hw.valve.replay import (
    EmulatorReplay,
    FirmwareReplay,
    first_difference,
    load_session,
    replay,
)

from .conftest import (
    BOARD_KINDS,
    Driver,
    RunQueueWait,
    board_pid,
    from_frame,
    make_board,
    nonzero,
    vent_written_before,
    wait_for,
)

CAL = ValveCalibration()
C30, C20, C25 = CAL.kpa_to_code(30.0), CAL.kpa_to_code(20.0), CAL.kpa_to_code(25.0)
PARAMS = dict(command_timeout_s=0.25, reconnect_backoff_max_s=0.5, link_timeout_s=0.4)


@pytest.fixture(scope='module', params=BOARD_KINDS)
def rig(request, harness, tmp_module):
    session = tmp_module / f'session_{request.param}.jsonl'
    emu = make_board(request.param, request, tmp_module, watchdog_ms=200, session_path=str(session))
    t_start = time.monotonic()
    drv = Driver(emu.link, tmp_module, **PARAMS)
    if not harness.wait_connected(t_start):
        drv.stop()  # a fixture that fails is not torn down: its driver would outlive the test
        emu.close()
        pytest.fail(
            f'driver never reported a connected link ({harness.spin.report()}):\n{drv.output()}'
        )
    yield emu, drv
    harness.stop_stream()
    rc = drv.stop(signal.SIGINT)
    out = drv.output()
    emu.close()
    assert rc == 0, out
    assert 'Traceback' not in out, out
    assert emu.invariant_violations == []
    assert all(max(f.codes) <= CAL.max_code for f in emu.frames)


def wait_frame(emu, since, pred, timeout=3.0):
    """First SET frame decoded after `since` that satisfies pred."""

    def find():
        return next((f for f in emu.frames_since(since) if pred(f)), None)

    return wait_for(find, timeout)


def test_starts_disarmed_codes_zero_until_arm(rig, harness):
    emu, drv = rig
    t0 = time.monotonic()
    harness.stream([30.0, 20.0])
    time.sleep(0.6)
    frames = emu.frames_since(t0)
    assert len(frames) > 5
    assert all(f.codes == (0, 0) for f in frames)
    assert harness.latest_diag()[3]['armed'] == 'false'
    assert all(v == [0.0, 0.0] for _, v in harness.applied if _ >= t0)

    res = harness.call('arm')
    assert res.success
    t_arm = time.monotonic()
    f = wait_frame(emu, t_arm, lambda f: f.codes == (C30, C20))
    assert f is not None, emu.frames_since(t_arm)[-5:]

    # Valve model lags (tau ~0.22 s); after ~1.2 s the measured pressure has settled. Waited
    # for, not read once at 1.2 s: at load 10 the test's own stream stalled past the driver's
    # 0.25 s watchdog, which vented (the safe side) until the next command.
    def settled():
        return (
            harness.pressure
            and harness.applied
            and harness.pressure[-1][1] == pytest.approx([30.0, 20.0], abs=1.0)
            and harness.applied[-1][1] == pytest.approx([30.0, 20.0], abs=0.15)
        )

    time.sleep(1.2)
    assert wait_for(settled, 5.0), (harness.pressure[-3:], harness.applied[-3:])


def _reported(harness, since: float, holds, timeout: float = 10.0) -> None:
    """A /diagnostics report received after `since` whose values satisfy `holds`. The driver
    reports at 1 Hz; on a loaded machine the next one can take longer than a period to arrive."""
    found = wait_for(
        lambda: any(t >= since and holds(d) for t, _, _, d in list(harness.diag)), timeout
    )
    assert found, f'no such report within {timeout} s; the last: {harness.latest_diag()}'


def test_nan_vents_channel_and_out_of_range_clamps_on_the_wire(rig, harness):
    emu, _ = rig
    harness.call('arm')
    t0 = time.monotonic()
    harness.stream([math.nan, 25.0])
    f = wait_frame(emu, t0, lambda f: f.codes == (0, C25))
    assert f is not None, emu.frames_since(t0)[-5:]
    time.sleep(0.3)
    assert all(fr.codes[0] == 0 for fr in from_frame(emu, f))
    t1 = time.monotonic()
    harness.stream([80.0, -5.0])
    assert wait_frame(emu, t1, lambda f: f.codes == (CAL.max_code, 0)) is not None
    harness.stream([math.inf, 1e12])
    t2 = time.monotonic()
    assert wait_frame(emu, t2, lambda f: f.codes == (0, CAL.max_code)) is not None
    _reported(harness, t2, lambda d: int(d['nonfinite_commands']) > 0 and int(d['saturations']) > 0)


def test_command_stop_trips_watchdog_within_timeout(rig, harness):
    emu, drv = rig
    harness.call('arm')
    t0 = time.monotonic()
    harness.stream([30.0, 30.0])
    assert wait_frame(emu, t0, lambda f: f.codes == (C30, C30)) is not None
    board_trips = emu.watchdog_trips
    waited = RunQueueWait(drv.proc.pid, board_pid(emu))
    harness.stop_stream()
    t_stop = time.monotonic()
    f = wait_frame(emu, t_stop, lambda f: f.codes == (0, 0), timeout=2.0)
    assert f is not None
    # The margin plus the time the driver and the board could not run: with both cores busy the
    # vent was once read 0.75 s after the stop. An idle machine keeps the 0.1 s margin.
    queued = waited.seconds()
    late = f.t - t_stop - PARAMS['command_timeout_s']
    assert late <= 0.1 + queued, f'vent {late:.3f} s after the timeout, {queued:.3f} s queued'
    _reported(harness, t_stop, lambda d: int(d['watchdog_trips']) >= 1)
    assert emu.watchdog_trips == board_trips  # the host vented, not the board watchdog


def test_keepalive_holds_pressure_at_slow_command_rate(rig, harness):
    emu, drv = rig
    # Commands 400 ms apart, twice the board's 200 ms watchdog, so only the driver's keepalives
    # can hold the pressure. The host watchdog is raised to 1 s for this test: at 5 Hz against
    # 0.25 s a publisher thread late by 50 ms on a loaded machine made the host vent, correctly.
    harness.set_param('command_timeout_s', 1.0)
    try:
        harness.call('arm')
        t0 = time.monotonic()
        harness.stream([30.0, 30.0], rate_hz=2.5)
        assert wait_frame(emu, t0, lambda f: f.codes == (C30, C30)) is not None
        t1 = time.monotonic()
        trips = emu.watchdog_trips
        waited = RunQueueWait(drv.proc.pid, board_pid(emu))
        time.sleep(1.5)
        harness.stop_stream()
    finally:
        harness.set_param('command_timeout_s', PARAMS['command_timeout_s'])
    frames = emu.frames_since(t1)
    held = [f for f in frames if f.t < t1 + 1.4]
    assert all(f.codes == (C30, C30) for f in held)
    gaps = [b.t - a.t for a, b in pairwise(held)]
    # Keepalives are due every 50 ms; the bound that matters is the board's watchdog (a longer
    # gap would vent it), plus the time the driver and the board waited for a CPU (with both
    # cores busy the firmware once read a keepalive 0.244 s after the last). A tighter figure only
    # measured how promptly a loaded machine schedules. The board never vented: that holds always.
    assert emu.watchdog_trips == trips
    queued = waited.seconds()
    assert max(gaps) < emu.watchdog_s + queued, f'{max(gaps):.3f} s gap, {queued:.3f} s queued'


def test_estop_latches_until_rearm(rig, harness):
    emu, _ = rig
    harness.call('arm')
    t0 = time.monotonic()
    harness.stream([30.0, 30.0])
    assert wait_frame(emu, t0, lambda f: f.codes == (C30, C30)) is not None
    res = harness.call('estop')
    assert res.success and 'arm' in res.message
    t_e = time.monotonic()
    vent = vent_written_before(emu, t_e)
    time.sleep(0.6)  # still streaming 30 kPa
    after = from_frame(emu, vent)
    assert len(after) > 5 and all(f.codes == (0, 0) for f in after), after[-5:]
    d = wait_for(
        lambda: harness.latest_diag() if harness.latest_diag()[3]['estopped'] == 'true' else None,
        2.0,
    )
    assert d and d[1] == 2  # DiagnosticStatus.ERROR
    assert harness.call('arm').success
    t_a = time.monotonic()
    assert wait_frame(emu, t_a, lambda f: f.codes == (C30, C30)) is not None
    assert harness.call('disarm').success
    t_d = time.monotonic()
    vent = vent_written_before(emu, t_d)
    time.sleep(0.3)
    assert all(f.codes == (0, 0) for f in from_frame(emu, vent))
    harness.stop_stream()


def test_corrupted_and_dropped_bytes_are_nakked_and_recovered(rig, harness):
    emu, drv = rig
    harness.call('arm')
    t0 = time.monotonic()
    harness.stream([20.0, 20.0])
    assert wait_frame(emu, t0, lambda f: f.codes == (C20, C20)) is not None
    rejected_before = len(emu.rejections)
    emu.corrupt_next_frames(3)
    emu.drop_next_bytes(4)
    assert wait_for(lambda: len(emu.rejections) >= rejected_before + 3, 2.0)
    t1 = time.monotonic()
    assert wait_frame(emu, t1, lambda f: f.codes == (C20, C20)) is not None
    _reported(harness, t1, lambda d: int(d['naks']) >= 3)
    assert drv.proc.poll() is None
    harness.stop_stream()


def _link_state_seen(harness, since, state):
    return any(t >= since and d['link'] == state for t, _, _, d in list(harness.diag))


def test_stall_is_detected_and_recovered(rig, harness):
    emu, drv = rig
    harness.call('arm')
    harness.stream([20.0, 20.0])
    t0 = time.monotonic()
    emu.stall(True)
    assert wait_for(lambda: _link_state_seen(harness, t0, 'disconnected'), 4.0)
    emu.stall(False)
    t1 = time.monotonic()
    assert wait_for(lambda: _link_state_seen(harness, t1, 'connected'), 6.0)
    assert wait_frame(emu, t1, lambda f: f.codes == (C20, C20)) is not None
    assert drv.proc.poll() is None
    harness.stop_stream()


def test_unplug_and_replug(rig, harness):
    emu, drv = rig
    harness.call('arm')
    harness.stream([20.0, 20.0])
    t0 = time.monotonic()
    assert wait_frame(emu, t0, lambda f: f.codes == (C20, C20)) is not None
    reconnects = int(harness.latest_diag()[3]['reconnects'])
    # its SETs (C20 above) encoded by the compiled encoder built with the package
    assert harness.latest_diag()[3]['set_encoder'] == 'compiled'
    emu.disappear()
    t_gone = time.monotonic()
    assert wait_for(lambda: _link_state_seen(harness, t_gone, 'disconnected'), 3.0)
    time.sleep(1.0)
    assert drv.proc.poll() is None
    d = harness.latest_diag()
    assert d[1] == 2 and d[3]['link'] == 'disconnected', d
    n_before = len(emu.frames)
    emu.reappear()
    t_back = time.monotonic()
    assert wait_for(lambda: _link_state_seen(harness, t_back, 'connected'), 6.0)
    f = wait_frame(emu, t_back, lambda f: f.codes == (C20, C20))
    assert f is not None
    first = emu.frames[n_before]
    assert first.codes == (0, 0)  # vented on reconnect before anything else
    assert wait_for(lambda: int(harness.latest_diag()[3]['reconnects']) > reconnects, 2.0)
    harness.stop_stream()


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM])
def test_signal_vents_before_port_closes(sig, harness, tmp_module, new_board):
    emu = new_board(tmp_module, watchdog_ms=200)
    # The vent's ACK waited for up to 2 s, not the default 0.2 s: a starved board process (the
    # host firmware at load 10) answers late, and the test is about the vent, not the board's
    # scheduling.
    # Likewise the link: a 0.4 s stall of this process (where the emulated board runs) must not
    # read as a lost board; and the commands: this process's stream stalled past 0.25 s in a
    # loaded CI run, the driver vented for a stale command before the signal and the test took
    # the stale-command vent for the shutdown's.
    drv = Driver(
        emu.link,
        tmp_module,
        auto_arm=True,
        **{
            **PARAMS,
            'shutdown_ack_timeout_s': 2.0,
            'link_timeout_s': 2.0,
            'command_timeout_s': 2.0,
        },
    )
    try:
        t0 = time.monotonic()
        harness.stream([30.0, 30.0])
        assert wait_frame(emu, t0, lambda f: f.codes == (C30, C30), timeout=20.0) is not None, (
            drv.output()
        )
        time.sleep(0.3)
        t_sig = time.monotonic()
        rc = drv.stop(sig)
        time.sleep(0.1)
        harness.stop_stream()
        out = drv.output()
        assert rc == 0, out
        assert 'Traceback' not in out, out
        assert 'vented on shutdown (acknowledged)' in out, out
        frames = list(emu.frames)
        assert frames[-1].codes == (0, 0)
        # The vent is the SET frames the host sent after the signal while commands still
        # streamed (so no host watchdog), and the board's own watchdog never fired (its vent is
        # no frame). The host sends the vent again until one is acknowledged (a loaded board
        # answers late: two vents 23-46 ms apart at load 10), so the vent is the closing run of
        # all-zero frames. No interval bound: that measured process scheduling.
        j = len(frames) - 1
        while j > 0 and frames[j - 1].codes == (0, 0):
            j -= 1
        assert j > 0 and nonzero(frames[j - 1]) and frames[j].t >= t_sig, (frames[-4:], t_sig)
        assert emu.watchdog_trips == 0
        assert emu.invariant_violations == []
    finally:
        harness.stop_stream()
        drv.stop(signal.SIGKILL)
        emu.close()


def test_the_driver_session_replays_byte_identical_on_emulator_and_firmware(
    rig, request, tmp_module, host_firmware
):
    """The bytes the driver sent in the tests above (up to the unplug, one boot), replayed on
    one millisecond clock to the emulator and to the firmware, get the same reply bytes."""
    kind = request.node.callspec.params['rig']
    session = load_session(tmp_module / f'session_{kind}.jsonl')
    assert sum(map(len, session.chunks.values())) > 2000, 'the session recorded too little'
    boards = [EmulatorReplay(), FirmwareReplay(host_firmware)]
    try:
        emu, fw = (replay(board, session) for board in boards)
    finally:
        for board in boards:
            board.close()
    assert first_difference(emu, fw) is None, first_difference(emu, fw)
    # The replay held the interesting traffic: both pressures commanded, valves read back moving.
    replies = P.FrameDecoder().feed(b''.join(p.reply for p in emu))
    acks = [m for m in replies if isinstance(m, P.Ack)]
    assert any(isinstance(m, P.Info) for m in replies)
    assert len(acks) > 100 and {(C30, C20), (C30, C30)} <= {a.applied for a in acks}
    assert max(a.measured[0] for a in acks) > CAL.kpa_to_adc(25.0)


@pytest.mark.parametrize('param', ['max_kpa:=60.0', 'low_band_policy:=maybe', 'max_kpa:=abc'])
def test_invalid_parameters_exit_with_a_clear_message(param):
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            '-m',
            'equimus_hw.valve.driver_node',
            '--ros-args',
            '-p',
            'port:=/nonexistent/dac',
            '-p',
            param,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert 'invalid parameters' in proc.stderr and 'Traceback' not in proc.stderr, proc.stderr
