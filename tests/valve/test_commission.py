"""Commissioning against a DAC board on a real pty, the Python emulator and the firmware built for
this computer, with a DAC chain that is not the nominal one: the board checks, the valve fit
recovers the injected gain and offset, the calibration file it gives is loaded by the valve driver
(its own process, real DDS), which then puts each valve within 1 kPa of the command. And the
failures: a valve that does not follow its setpoint, a silent board."""

import dataclasses
import math
import os
import signal
import time

import pytest

from equimus_description.interface import ACTUATORS
from equimus_hw.valve import commission as C
from equimus_hw.valve import protocol as P
from equimus_hw.valve.calibration import (
    CalibrationFile,
    ValveCalibration,
    load_calibration,
    with_fit,
    write_calibration,
)
from equimus_hw.valve.host_firmware import FirmwareBoard

from .conftest import LONG_WATCHDOG_MS, Driver, make_emulator, wait_for

NOMINAL = ValveCalibration()
GAIN, OFFSET, NOISE = (1.08, 0.92), (2.0, -3.0), 0.3  # per channel: maa, baa
LEVELS, HOLD = (10.0, 25.0, 40.0), 1.0


def to_kpa(code):
    return NOMINAL.adc_to_kpa(code)


def _world_lag(board) -> str:
    """How late the host firmware's DAC writes reached its emulated valves (its ADC codes
    were as late): what a failure under load needs said."""
    lag = getattr(board, 'tap_lag_max_s', None)
    return (
        'the Python emulator' if lag is None else f'firmware events applied up to {lag:.3f} s late'
    )


def test_fit_and_driver(new_board, harness, tmp_path):
    # The fit is under test, not this machine's scheduling: the board's watchdog is 2 s, not
    # 200 ms (with both cores busy this process went 283 ms without a SET in each of nine tries).
    board = new_board(
        long_watchdog=True, dac_gain=GAIN, dac_offset_kpa=OFFSET, adc_noise_kpa=NOISE, seed=5
    )
    # The host firmware is a process of its own: with both cores busy it went 1.1 s without a
    # reply twice, past the check's 1 s for a gone board. Here that limit is 5 s: the fit is
    # under test, not the machine's scheduling.
    with C.BoardProbe(board.link, silent_s=5.0) as probe:
        info = probe.open(wait_s=5.0)
        result = C.check_board(probe, NOMINAL, 2)
        wd = board.watchdog_ms
        assert wd == LONG_WATCHDOG_MS and result.watchdog_flagged
        assert wd <= result.watchdog_vent_ms <= wd + 150, result
        assert probe.stats.crc_errors == 0
        fits = {}
        # The host firmware reads the emulated valves' pressures from this process (its ADC is
        # fed by a thread here): with both cores busy that thread lagged and the read-backs of a
        # 1 s hold were stale (a fitted gain of 1.34). Twice the hold for it.
        hold = 2 * HOLD if isinstance(board, FirmwareBoard) else HOLD
        for ch, name in enumerate(ACTUATORS):
            try:
                r = C.check_valve(probe, name, ch, NOMINAL, to_kpa, levels=LEVELS, hold_s=hold)
            except C.CommissionError as exc:
                pytest.fail(f'{exc}; {_world_lag(board)}')
            fits[name] = r.fit
            assert r.fit.dac_gain == pytest.approx(GAIN[ch], abs=0.015)
            assert r.fit.dac_offset_kpa == pytest.approx(OFFSET[ch], abs=0.6)
            tau = board.valves[ch].tau
            if isinstance(board, FirmwareBoard):
                # Its ADC values are the valve model's as that thread last wrote them: starved
                # (both cores busy) it made a 0.217 s valve read as 0.343 s. The timing fit is
                # judged on the emulator, whose ADC reads the model when the frame comes.
                assert 0.7 * tau < r.fit.tau_fill_s < 2.5 * tau, (r.fit, _world_lag(board))
            else:
                assert r.fit.tau_fill_s == pytest.approx(tau, rel=0.3)
            assert abs(r.verify_read_kpa - C.VERIFY_KPA) < 1.0
        # Replies later than the probe's 50 ms come with load (3 at load 10); none is lost,
        # but the last request's may still be on its way.
        assert probe.stats.timeouts - probe.stats.late <= 1, probe.stats
    assert board.codes == [0, 0] and board.invariant_violations == []
    path = write_calibration(str(tmp_path / 'cal.yaml'), CalibrationFile(fits, info.max_code))
    cal = load_calibration(path, ACTUATORS)

    # the injected chain, recovered to within 1 kPa over the regulated range
    for ch, name in enumerate(ACTUATORS):
        fitted = with_fit(NOMINAL, cal.channels[name], info.max_code)
        truth = board.valves[ch]
        for kpa in range(7, 46):
            if kpa <= truth.target(info.max_code):
                assert abs(truth.target(fitted.kpa_to_code(kpa)) - kpa) < 1.0, (name, kpa)
        assert abs(truth.target(NOMINAL.kpa_to_code(30.0)) - 30.0) > 2.0  # uncalibrated: off

    t_start = time.monotonic()
    drv = Driver(board.link, tmp_path, calibration_file=path, require_calibration=True)
    try:
        assert harness.wait_connected(t_start), drv.output()
        assert 'calibration ' + path in drv.output()
        harness.call('arm')
        harness.stream([30.0, 30.0])
        assert wait_for(lambda: all(abs(p - 30.0) < 0.5 for p in board.pressures()), 5.0), (
            board.pressures()
        )
        time.sleep(0.3)
        assert board.pressures() == pytest.approx([30.0, 30.0], abs=1.0)
    finally:
        harness.stop_stream()
        rc = drv.stop(signal.SIGINT)
    assert rc == 0, drv.output()


def test_the_driver_refuses_to_start_without_a_calibration(tmp_path):
    board = make_emulator(tmp_path)
    try:
        drv = Driver(board.link, tmp_path, require_calibration=True)
        drv.proc.wait(60)
        out = drv.output()
        drv.stop()
    finally:
        board.close()
    lines = [x for x in out.splitlines() if x.strip()]
    assert drv.proc.returncode == 2 and len(lines) == 1, out
    assert 'calibration_file is not set' in lines[0] and 'equimus check rig' in lines[0]


def test_a_valve_that_does_not_follow_its_setpoint(tmp_path):
    """baa's setpoint wire broken (its DAC chain gives 0 V): one line after its first level,
    and the board is left vented."""
    board = make_emulator(tmp_path, dac_gain=(1.0, 0.0))
    try:
        with C.BoardProbe(board.link) as probe:
            probe.open(wait_s=5.0)
            with pytest.raises(C.CommissionError) as e:
                C.check_valve(probe, 'baa', 1, NOMINAL, to_kpa, levels=LEVELS, hold_s=HOLD)
            assert board.codes == [0, 0]
    finally:
        board.close()
    assert 'valve baa does not follow its setpoint' in str(e.value), e.value
    assert '\n' not in str(e.value)
    assert max(f.codes[1] for f in board.frames) == NOMINAL.kpa_to_code(LEVELS[0])  # stopped


def _stand(board, seconds: float):
    """The board's loop stands `seconds` (its state lock held, as a starved board process's
    loop stands), from a thread of its own; returns once the lock is held (on a loaded machine
    the thread may start late: a request sent before it stands would be answered); join the
    returned thread."""
    import threading

    held = threading.Event()

    def stand() -> None:
        with board._lock:
            held.set()
            time.sleep(seconds)

    standing = threading.Thread(target=stand)
    standing.start()
    assert held.wait(10.0), 'the board loop never let go of its lock'
    return standing


def test_a_late_reply_is_counted_late_not_lost(tmp_path):
    """The board's loop stands 150 ms (its state lock held, as a starved board process's loop
    stands): the ping times out, and its reply, read with the next one, counts as late."""
    board = make_emulator(tmp_path)
    try:
        with C.BoardProbe(board.link) as probe:
            probe.open(wait_s=5.0)
            before = dataclasses.replace(probe.stats)

            standing = _stand(board, 0.15)
            time.sleep(0.02)
            late, _ = probe.ping()
            standing.join()
            answered, _ = probe.ping()
    finally:
        board.close()
    assert late is None and answered is not None
    assert probe.stats.timeouts == before.timeouts + 1, probe.stats
    assert probe.stats.late == before.late + 1, probe.stats


def test_a_vent_reported_in_a_late_reply_stops_the_level(tmp_path):
    """The board's watchdog vents while this computer stalls 0.3 s, and the reply that reports
    it comes late (the board's loop stands 0.15 s, past the probe's 50 ms): the level stops as
    self-vented all the same, instead of reading the vented valve as its answer (the board
    reports a vent once). Seen in a loaded CI run as 'does not follow its setpoint'."""
    board = make_emulator(tmp_path)
    calls = []

    def stall_once() -> str:
        calls.append(time.monotonic())
        if len(calls) == 1:
            time.sleep(0.3)  # the watchdog (200 ms) vents
            _stand(board, 0.15)  # released by its own thread; the next replies are late
        return ''

    try:
        with C.BoardProbe(board.link) as probe:
            probe.open(wait_s=5.0)
            code = NOMINAL.kpa_to_code(LEVELS[0])
            with pytest.raises(C.SelfVented) as e:
                C.hold(probe, [code, 0], 1.0, to_kpa, stall_once)
            assert probe.take_late_vents() == 0  # taken by the level
    finally:
        board.close()
    assert board.watchdog_trips >= 1
    assert probe.stats.late >= 1, probe.stats
    assert e.value.gap_s >= 0.3


def test_a_board_that_answers_late_delays_the_level_and_is_still_fitted(tmp_path):
    """The board's loop stands 1.3 s as the first level begins (a starved board process, as in
    a loaded test run): longer than the 1 s hold, shorter than the probe's 5 s for a gone board.
    The level waits for the board's first answer and is held 1 s from there: the valve is
    fitted as without the stand, not reported as a board without read-back."""
    board = make_emulator(
        tmp_path, watchdog_ms=LONG_WATCHDOG_MS, dac_gain=GAIN, dac_offset_kpa=OFFSET, seed=5
    )
    try:
        with C.BoardProbe(board.link, silent_s=5.0) as probe:
            probe.open(wait_s=5.0)
            standing = _stand(board, 1.3)
            time.sleep(0.01)
            result = C.check_valve(probe, 'maa', 0, NOMINAL, to_kpa, levels=LEVELS, hold_s=HOLD)
            standing.join()
            assert board.codes == [0, 0]
    finally:
        board.close()
    assert probe.stats.timeouts >= 10, probe.stats  # the stand happened during the first level
    first = result.levels[0]
    assert first.t[-1] - first.t[0] > 0.8 * HOLD, first.t[:3]
    assert result.fit is not None
    assert result.fit.dac_gain == pytest.approx(GAIN[0], abs=0.015)
    assert result.fit.dac_offset_kpa == pytest.approx(OFFSET[0], abs=0.6)
    assert result.fit.tau_fill_s == pytest.approx(board.valves[0].tau, rel=0.3)


def test_a_stall_of_this_computer_during_a_level_lengthens_it(tmp_path):
    """This process does not run for 0.9 s while it waits for the first level's first reply
    (its read held, as a loaded computer holds it): the level is held 1 s of the time this
    side ran, so its read-backs still span most of the hold (a loaded run of four test
    workers got 0.18 s of a 1 s level)."""
    board = make_emulator(
        tmp_path, watchdog_ms=LONG_WATCHDOG_MS, dac_gain=GAIN, dac_offset_kpa=OFFSET, seed=5
    )
    try:
        with C.BoardProbe(board.link, silent_s=5.0) as probe:
            probe.open(wait_s=5.0)
            assert probe._ser is not None
            read, reads = probe._ser.read, []

            def read_with_a_stall(n: int = 1) -> bytes:
                reads.append(n)
                if len(reads) == 2:  # the first SET's wait (the first read: its ACK, or not yet)
                    time.sleep(0.9)
                return read(n)

            probe._ser.read = read_with_a_stall  # type: ignore[method-assign]
            result = C.check_valve(probe, 'maa', 0, NOMINAL, to_kpa, levels=LEVELS, hold_s=HOLD)
    finally:
        board.close()
    assert probe.stats.away_s >= 0.85, probe.stats
    first = result.levels[0]
    assert first.t[-1] - first.t[0] > 0.8 * HOLD, first.t[:3]


def test_a_board_silent_for_good_during_a_level_ends_the_check(tmp_path):
    """A level waits for the board's first answer, so a board that stops answering for good
    as the first level begins must still end the check: the probe's silent limit (1 s here)
    raises its one-line error within about that limit, not the hold loop waiting on."""
    board = make_emulator(tmp_path, watchdog_ms=LONG_WATCHDOG_MS)
    standing = None
    try:
        with C.BoardProbe(board.link, silent_s=1.0) as probe:
            probe.open(wait_s=5.0)
            standing = _stand(board, 6.0)
            time.sleep(0.01)
            t0 = time.monotonic()
            with pytest.raises(C.CommissionError, match='stopped answering') as e:
                C.check_valve(probe, 'maa', 0, NOMINAL, to_kpa, levels=LEVELS, hold_s=HOLD)
            waited = time.monotonic() - t0
    finally:
        if standing is not None:
            standing.join()
        board.close()
    assert waited < 4.0, waited
    assert '\n' not in str(e.value)


def test_a_pause_between_requests_is_not_the_board_going_silent(tmp_path):
    """The check asks nothing for longer than the silent limit (a stall in its watch callback,
    as a loaded computer has), then one request times out: the board is not gone, since it was
    asked for only that request's 50 ms; the next request is answered."""
    board = make_emulator(tmp_path)
    try:
        with C.BoardProbe(board.link, silent_s=0.5) as probe:
            probe.open(wait_s=5.0)
            assert probe.ping()[0] is not None
            time.sleep(0.8)  # nothing asked
            # 1 s: longer than a stall of this loaded process before or during the ping (0.73 s
            # seen), after which a board standing only 0.15 s had answered
            standing = _stand(board, 1.0)
            first, _ = probe.ping()  # times out: counted, 0.05 s of waiting
            standing.join()
            second, _ = probe.ping()
    finally:
        board.close()
    assert first is None and probe.stats.timeouts >= 1, probe.stats
    assert second is not None, probe.stats


#: s the stalled ping waits for its reply: well past the board's release, well short of the stall
REPLY_LONGER_S = 0.5


def test_a_stall_of_this_computer_is_not_the_board_going_silent(tmp_path):
    """This process does not run for 1.3 s while it waits for a reply (its read held), and the
    board, starved with it, answers just after: longer than SILENT_S without a reply, but none
    of it time this side was listening. The ping is answered; the time away is counted. The
    ping waits REPLY_LONGER_S for its reply, not the probe's 50 ms: beside a loaded run the
    board's thread, released 30 ms after the stall, answered later than 50 ms after it. The
    stall is still past any timeout, so only the time given back lets the reply count."""
    board = make_emulator(tmp_path)
    try:
        with C.BoardProbe(board.link) as probe:
            probe.open(wait_s=5.0)
            assert probe._ser is not None
            read = probe._ser.read
            held = []

            def read_after_a_stall(n: int = 1) -> bytes:
                if not held:
                    held.append(True)
                    time.sleep(1.3)
                return read(n)

            standing = _stand(board, 1.33)
            time.sleep(0.01)
            probe._ser.read = read_after_a_stall  # type: ignore[method-assign]
            reply, _ = probe._request(P.Ping(probe._next_seq()), timeout=REPLY_LONGER_S)
            standing.join()
    finally:
        board.close()
    assert isinstance(reply, P.Ack), probe.stats
    assert 1.25 < probe.stats.away_s < 5.0, probe.stats


def test_a_computer_that_stalls_is_named_with_its_gap(tmp_path):
    """This computer sends no SET for 0.3 s in every hold (a stall, as a loaded PC has): the
    board's watchdog vents each test of the valve, which is started over STALLED_ATTEMPTS times
    (the board is not at fault); the error then says how long this computer went without a
    SET; the board is left vented."""
    board = make_emulator(tmp_path)

    def stall() -> str:
        time.sleep(0.3)
        return ''

    try:
        with C.BoardProbe(board.link) as probe:
            probe.open(wait_s=5.0)
            with pytest.raises(C.CommissionError) as e:
                C.check_valve(probe, 'maa', 0, NOMINAL, to_kpa, stall, levels=LEVELS, hold_s=HOLD)
            assert board.codes == [0, 0]
    finally:
        board.close()
    message = str(e.value)
    assert f'in each of {C.STALLED_ATTEMPTS} tests of maa' in message, message
    gap_ms = int(message.split('this computer went ')[1].split(' ms')[0])
    assert 300 <= gap_ms < 2000 and 'watchdog: 200 ms' in message, message
    assert '\n' not in message


def test_a_board_that_vents_although_sets_come_in_time_blames_the_link(tmp_path):
    """SETs are corrupted on the way (1 in 20): the board vents on each bad frame although this
    computer sent every SET in time; that is not a stall here, so the valve's test is tried
    ATTEMPTS times only and the error points at the link."""
    board = make_emulator(tmp_path, corrupt_rate=0.05, seed=3)
    try:
        with C.BoardProbe(board.link) as probe:
            probe.open(wait_s=5.0)
            with pytest.raises(C.CommissionError) as e:
                C.check_valve(probe, 'maa', 0, NOMINAL, to_kpa, levels=LEVELS, hold_s=HOLD)
    finally:
        board.close()
    message = str(e.value)
    tries = int(message.split('in each of ')[1].split(' tests of maa')[0])
    # a stall here (both cores busy) may add a try that does not count
    assert C.ATTEMPTS <= tries < C.ATTEMPTS + C.STALLED_ATTEMPTS, message
    assert 'check the link' in message and 'this computer went' not in message, message


def test_a_silent_board(tmp_path):
    """A port that opens and answers nothing: one line, within the HELLO timeout."""
    master, slave = os.openpty()
    try:
        t0 = time.monotonic()
        with pytest.raises(C.CommissionError, match='did not answer HELLO') as e:
            C.BoardProbe(os.ttyname(slave)).open()
        assert time.monotonic() - t0 < C.HELLO_TRIES * C.HELLO_TIMEOUT_S + 1.0
    finally:
        os.close(master)
        os.close(slave)
    assert '\n' not in str(e.value)
    with pytest.raises(C.CommissionError, match='cannot open'):
        C.BoardProbe(str(tmp_path / 'nothing')).open()


def test_a_board_held_by_a_driver_cannot_be_checked(tmp_path):
    board = make_emulator(tmp_path)
    try:
        with C.BoardProbe(board.link) as first:
            first.open(wait_s=5.0)
            with pytest.raises(C.CommissionError, match='no valve driver'):
                C.BoardProbe(board.link).open()
    finally:
        board.close()


def test_a_board_whose_watchdog_does_not_vent(tmp_path):
    """Its INFO promises 200 ms, its outputs stay: one line after WATCHDOG_TRIES tries, the
    outputs set back to 0 by the check."""
    board = make_emulator(tmp_path)
    try:
        with C.BoardProbe(board.link) as probe:
            probe.open(wait_s=5.0)
            board.watchdog_ms = 10**9  # the firmware's watchdog broken after its INFO
            t0 = time.monotonic()
            with pytest.raises(C.CommissionError) as e:
                C.check_board(probe, NOMINAL, 2)
            took = time.monotonic() - t0
            assert board.codes == [0, 0]
    finally:
        board.close()
    assert f'in each of {C.WATCHDOG_TRIES} tries (its watchdog: 200 ms)' in str(e.value), e.value
    assert '\n' not in str(e.value)
    assert C.WATCHDOG_TRIES * (0.2 + C.WATCHDOG_SLACK_S) < took < 10.0


def _level(nominal, p0, pf, shape, dt=0.01, hold=1.5, channel=0):
    """A level read back every dt s: p0 -> pf by `shape` (fraction of the step at t s)."""
    lv = C.Level(code=0, nominal_kpa=nominal)
    for k in range(int(hold / dt)):
        t = k * dt
        p = p0 + (pf - p0) * shape(t)
        lv.t.append(t)
        lv.kpa.append((p, 0.0) if channel == 0 else (0.0, p))
    return lv


def _lag(dead, tau):
    return lambda t: 0.0 if t < dead else 1.0 - math.exp(-(t - dead) / tau)


def _second_order(dead, wn, zeta):
    wd = wn * math.sqrt(1 - zeta**2)
    phi = math.acos(zeta)

    def y(t):
        if t < dead:
            return 0.0
        s = t - dead
        return 1.0 - math.exp(-zeta * wn * s) * math.sin(wd * s + phi) / math.sqrt(1 - zeta**2)

    return y


def test_step_shapes_time_a_lag_and_measure_an_overshoot():
    """Each step of a check, from where the one before ended: a dead time and a lag give t50 =
    dead + τ·ln 2 and no overshoot; an underdamped valve's overshoot is its textbook 16 % at
    ζ = 0.5 (within the running mean's rounding of the peak)."""
    dead, tau = 0.08, 0.2
    zeta = 0.5
    levels = [
        _level(10.0, 0.0, 10.0, _lag(dead, tau)),
        _level(20.0, 10.0, 20.0, _second_order(dead, 15.0, zeta)),
        _level(0.0, 20.0, 0.0, _lag(dead, 0.1)),
    ]
    levels[0].end, levels[1].end = 10.0, 20.0
    shapes = C.step_shapes(C.ValveResult('maa', 0, levels))
    assert [s.nominal_kpa for s in shapes] == [10.0, 20.0, 0.0]
    assert [s.from_kpa for s in shapes] == [0.0, 10.0, 20.0]
    lag, under, vent = shapes
    assert lag.t50_s == pytest.approx(dead + tau * math.log(2), abs=0.012)
    assert lag.dead_time_s == pytest.approx(dead, abs=0.015)
    assert lag.tau_s == pytest.approx(tau, rel=0.1)
    assert lag.overshoot_kpa < 0.05
    textbook = 10.0 * math.exp(-math.pi * zeta / math.sqrt(1 - zeta**2))
    assert under.overshoot_kpa == pytest.approx(textbook, rel=0.1)
    assert vent.to_kpa == pytest.approx(0.0, abs=0.01) and vent.overshoot_kpa < 0.05
    assert vent.tau_s == pytest.approx(0.1, rel=0.1)


def test_a_watchdog_vent_reported_in_a_late_reply_is_still_flagged(tmp_path, monkeypatch):
    """The board's loop stands 0.2 s right after its watchdog vents (a starved board process),
    so the one reply that says so comes late, past the probe's timeout, and the next one shows
    the outputs at 0 without the flag (a board says a vent once). The check still reports the
    vent as the watchdog's. Seen in a loaded CI run: watchdog_flagged False, vent at 2068 ms.
    The check's slack is not under test: the stand took 0.2 of its 0.3 s, and a loaded CI run
    once used up the rest before the next reply (the check then says "not vented", None)."""
    monkeypatch.setattr(C, 'WATCHDOG_SLACK_S', 5.0)
    board = make_emulator(tmp_path)
    stood: list[float] = []
    log = board._log

    def log_and_stand(entry: dict) -> None:
        log(entry)
        if entry.get('event') == 'watchdog_vent' and not stood:
            stood.append(time.monotonic())
            time.sleep(0.2)  # in the board's own loop, its lock held: nothing is answered

    board._log = log_and_stand
    try:
        with C.BoardProbe(board.link, silent_s=5.0) as probe:
            info = probe.open(wait_s=5.0)
            vented = C.watchdog_vent(probe, info.channels)
    finally:
        board.close()
    assert stood, 'the watchdog never vented'
    assert probe.stats.late >= 1, probe.stats  # the flagged reply was late
    assert vented is not None and vented[1], vented
