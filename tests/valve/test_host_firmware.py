"""The board's firmware (firmware/dac_board) built for this computer, against the Python board
emulator on one replayed millisecond clock: any host traffic gets byte-identical replies; the
cases where the two once disagreed are pinned to docs/dac_board_protocol.md; and the host
firmware as a tool (its own program, the emulator's --firmware, the replay command)."""

import json
import os
import signal
import struct
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from equimus_hw.valve import protocol as P
from equimus_hw.valve.host_firmware import FirmwareBoard
from equimus_hw.valve.replay import (
    EmulatorReplay,
    FirmwareReplay,
    Session,
    first_difference,
    replay,
)

from .conftest import wait_for
from .test_emulator import Host


def _frame(mtype, seq, body):
    raw = bytes([mtype, seq]) + body
    return P.cobs_encode(raw + struct.pack('<H', P.crc16_ccitt(raw))) + b'\x00'


def _flipped(data, i, bit):
    out = bytearray(data)
    i %= len(out) - 1  # never the delimiter
    out[i] ^= 1 << bit
    return bytes(out)


seqs = st.integers(0, 255)
codes = st.integers(0, 400)
any_count = st.lists(codes, min_size=1, max_size=8)
wire = st.one_of(
    st.builds(lambda s, a, b: P.encode(P.Set(s, (a, b))), seqs, codes, codes),
    st.builds(
        lambda s, c: P.encode(P.Set(s, tuple(c))), seqs, st.lists(codes, min_size=1, max_size=8)
    ),
    st.builds(lambda s: P.encode(P.Ping(s)), seqs),
    st.builds(lambda s: P.encode(P.Hello(s)), seqs),
    st.builds(
        lambda s, a, i, bit: _flipped(P.encode(P.Set(s, (a, a))), i, bit),
        seqs,
        codes,
        st.integers(0, 20),
        st.integers(0, 7),
    ),
    # CRC-valid frames of every type (board -> host ones too) with bodies of any length
    st.builds(
        _frame,
        st.sampled_from([0x00, 0x01, 0x02, 0x03, 0x04, 0x7F, 0x81, 0x82, 0x83, 0xFF]),
        seqs,
        st.binary(max_size=70),
    ),
    st.binary(min_size=1, max_size=90),  # garbage, delimiters included, oversize frames too
    # well-formed COBS around the 64-byte limit of a decoded frame
    st.integers(60, 70)
    .flatmap(lambda n: st.binary(min_size=n, max_size=n))
    .map(lambda b: P.cobs_encode(b) + b'\x00'),
    st.just(b'\x00'),
)
gaps = st.sampled_from([0, 0, 1, 2, 5, 40, 150, 199, 200, 201, 202, 260])
sessions = st.lists(st.tuples(gaps, wire), min_size=1, max_size=25)


def _session(items):
    t, chunks = 1, []
    for gap, data in items:
        t += gap
        chunks.append((t, data))
    return Session.from_chunks(chunks)


def _both(binary, session, **emulator):
    boards = [EmulatorReplay(**emulator), FirmwareReplay(binary)]
    try:
        return [replay(b, session) for b in boards]
    finally:
        for b in boards:
            b.close()


@settings(max_examples=40, deadline=None)
@given(items=sessions)
def test_any_host_traffic_gets_byte_identical_replies(host_firmware, items):
    emu, fw = _both(host_firmware, _session(items))
    assert first_difference(emu, fw) is None, first_difference(emu, fw)


def _with_crc(raw):
    return raw + struct.pack('<H', P.crc16_ccitt(raw))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.binary(min_size=1, max_size=66)), min_size=1, max_size=40)
)
def test_any_frame_content_gets_the_same_answer(host_firmware, frames):
    """Well-formed COBS around any content, with a matching CRC or not, one frame a millisecond:
    the parser's every branch (length limits, CRC, type, body length, channel count, codes)."""
    session = Session.from_chunks(
        (t, P.cobs_encode(_with_crc(raw) if crc else raw) + b'\x00')
        for t, (crc, raw) in enumerate(frames, 1)
    )
    emu, fw = _both(host_firmware, session)
    assert first_difference(emu, fw) is None, first_difference(emu, fw)


def test_the_comparison_sees_a_board_that_behaves_differently(host_firmware):
    """The same comparison against an emulator built otherwise: a 150 ms watchdog, or a board
    that keeps its outputs on bad frames, must show."""
    on = P.encode(P.Set(1, (200, 100)))
    late_ping = Session.from_chunks([(1, on), (180, P.encode(P.Ping(2)))])
    assert first_difference(*_both(host_firmware, late_ping, watchdog_ms=150)) is not None
    assert first_difference(*_both(host_firmware, late_ping)) is None
    bad = Session.from_chunks([(1, on), (5, _flipped(on, 3, 2)), (6, P.encode(P.Ping(3)))])
    assert first_difference(*_both(host_firmware, bad, vent_on_bad_frame=False)) is not None
    assert first_difference(*_both(host_firmware, bad)) is None


def _replies(passes):
    return [(p.t_ms, m) for p in passes for m in P.FrameDecoder().feed(p.reply)]


@pytest.mark.parametrize('kind', ['emulator', 'firmware'])
def test_the_cases_where_they_once_disagreed_follow_the_protocol_doc(host_firmware, kind):
    on = P.encode(P.Set(1, (200, 100)))
    # A well-formed COBS frame that decodes to 65 bytes: "frame > 64 bytes" is bad_length, seq 0
    # (the firmware once said bad_cobs).
    long_frame = bytes([66]) + bytes(range(1, 66)) + b'\x00'
    assert len(P.cobs_decode(long_frame[:-1])) == 65
    # A CRC-valid ACK (board -> host) with a body that does not fit an ACK: unknown_type and no
    # output change (the emulator once parsed the body, NAKed bad_length and vented).
    wrong_way = _frame(P.T_ACK, 7, b'\x00\x09')
    session = Session.from_chunks(
        [(1, on), (2, long_frame), (3, on), (4, wrong_way), (5, P.encode(P.Ping(8)))]
    )
    board = EmulatorReplay() if kind == 'emulator' else FirmwareReplay(host_firmware)
    try:
        passes = replay(board, session)
    finally:
        board.close()
    replies = dict(_replies(passes))
    assert replies[2] == P.Nak(0, P.R_BAD_LENGTH, 0)
    assert replies[4] == P.Nak(7, P.R_UNKNOWN_TYPE, 0)
    ping = replies[5]
    assert ping.applied == (200, 100) and not ping.flags & P.ACK_BAD_FRAME_VENTED
    # The board watchdog counts whole milliseconds: the last SET at 3 ms, vented at 204 ms
    # (201 ms > 200 ms), not before.
    vent = next(p for p in passes if p.t_ms > 5 and p.codes == (0, 0))
    assert vent.t_ms == 204 and vent.reply == b''


def test_the_host_program_is_a_board_on_a_pty(host_firmware, tmp_path):
    link = tmp_path / 'dac'
    proc = subprocess.Popen(
        [str(host_firmware), '--link', str(link)], stdout=subprocess.PIPE, text=True
    )
    try:
        banner = proc.stdout.readline()
        assert banner.startswith('DAC board host firmware on /dev/pts/') and str(link) in banner
        host = Host(str(link))
        host.send_raw(b'\x00')
        host.send(P.Hello(1))
        (info,) = host.replies()
        assert isinstance(info, P.Info) and info.max_code == 341 and info.adc_bits == 12
        host.send(P.Set(2, (341, 0)))
        (ack,) = host.replies()
        assert ack.applied == (341, 0) and ack.measured == (0, 0)  # no valve on its ADC pins
        host.close()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(5)
    assert proc.returncode == 0 and not os.path.lexists(link)
    bad = subprocess.run([str(host_firmware), '--bogus'], capture_output=True, text=True)
    assert bad.returncode == 2 and 'unknown argument --bogus' in bad.stderr


def test_emulator_cli_runs_the_firmware_and_its_session_replays(host_firmware, tmp_path):
    link, log, session = tmp_path / 'dac', tmp_path / 'board.jsonl', tmp_path / 'session.jsonl'
    cli = [sys.executable, '-m', 'equimus_hw.valve.board_emulator']
    proc = subprocess.Popen(
        [*cli, '--firmware', str(host_firmware), '--link', str(link)]
        + ['--log', str(log), '--session', str(session)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert 'DAC board host firmware on /dev/pts/' in proc.stdout.readline()
        host = Host(str(link))
        host.send(P.Hello(1))
        assert isinstance(host.replies()[0], P.Info)
        for seq in range(2, 12):
            host.send(P.Set(seq, (300, 150)))
            assert host.replies()
        host.send(P.Set(12, (400, 0)))  # above the 50 kPa code: refused
        assert host.replies()[0] == P.Nak(12, P.R_CODE_OUT_OF_RANGE, 0)
        host.send(P.Set(13, (120, 120)))
        host.replies()
        # silence: the board watchdog vents
        assert wait_for(lambda: 'watchdog_vent' in log.read_text(), 2.0)
        host.close()
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0 and 'Traceback' not in out, out
    assert '12 SET frames, 1 rejected, 1 watchdog trips, 1 invariant violations' in out, out
    sets = [e for e in map(json.loads, log.read_text().splitlines()) if e['event'] == 'set']
    assert [e['accepted'] for e in sets] == [True] * 10 + [False, True]
    rerun = subprocess.run(
        [sys.executable, '-m', 'equimus_hw.valve.replay', str(session)]
        + ['--firmware', str(host_firmware)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rerun.returncode == 0 and rerun.stdout.startswith('identical:'), rerun


@pytest.mark.parametrize(
    ('args', 'message'),
    [
        (['--firmware', '/nonexistent/dac_board_host'], 'cannot run /nonexistent'),
        (['--watchdog-ms', '100'], 'watchdog_ms=100: the firmware is built with 200'),
        (['--no-adc'], '--no-adc not available with --firmware'),
        (['--link', '/nonexistent/dir/dac'], 'cannot create the link /nonexistent/dir/dac'),
    ],
)
def test_emulator_cli_refuses_what_the_firmware_cannot_do(host_firmware, tmp_path, args, message):
    if '--firmware' not in args:
        args = ['--firmware', str(host_firmware), *args]
    if '--link' not in args:
        args = ['--link', str(tmp_path / 'd'), *args]
    proc = subprocess.run(
        [sys.executable, '-m', 'equimus_hw.valve.board_emulator', *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and 'Traceback' not in proc.stderr


def test_rig_emulator_runs_on_the_firmware(host_firmware, tmp_path):
    """rig_emulator --firmware: the firmware's DAC codes drive the valves the leg is pushed by."""
    from equimus_bringup.rig_emulator import BODIES, EmulatedRig
    from equimus_hw.natnet.emulator import NatNetEmulator

    rig = EmulatedRig(str(tmp_path / 'dac'), NatNetEmulator(bodies=BODIES), firmware=host_firmware)
    rig.board.start()
    host = Host(str(tmp_path / 'dac'))
    try:
        for seq in range(1, 31):  # 30 kPa on MAA for 0.6 s (0.2171 s valve lag)
            host.send(P.Set(seq, (205, 0)))
            assert host.replies()
            rig.tick()
            time.sleep(0.02)
        p = rig.board.pressures()
        assert 25.0 < p[0] < 31.0 and p[1] == 0.0, p
        assert rig.frames == 30 and wait_for(lambda: rig.board.frames_total == 30, 1.0)
    finally:
        host.close()
        rig.board.close()


def test_a_firmware_that_dies_is_seen_as_gone(host_firmware, tmp_path):
    """A crashed firmware process is an unplugged board (not an observer spinning on EOF), and
    plugging back in boots a new one."""
    log = tmp_path / 'board.jsonl'
    board = FirmwareBoard(host_firmware, link=str(tmp_path / 'dac'), log_path=str(log)).start()
    try:
        os.kill(board.pid, signal.SIGKILL)
        assert wait_for(lambda: not board.present, 2.0) and not board.alive
        assert 'firmware_exit' in log.read_text()
        cpu = time.process_time()
        time.sleep(0.3)
        assert time.process_time() - cpu < 0.1
        board.reappear()
        host = Host(str(tmp_path / 'dac'))
        host.send(P.Ping(1))
        (ack,) = host.replies()
        assert ack.flags & P.ACK_FRESH_BOOT and board.boots == 2
        host.close()
    finally:
        board.close()


def test_the_firmware_logs_when_its_own_loop_stood(host_firmware, tmp_path):
    """Its process stopped for 0.15 s (as a starved one): a loop_gap at least that long in the
    board log, as the Python emulator logs its own."""
    log = tmp_path / 'board.jsonl'
    board = FirmwareBoard(host_firmware, link=str(tmp_path / 'dac'), log_path=str(log)).start()
    try:
        time.sleep(0.3)
        os.kill(board.pid, signal.SIGSTOP)
        time.sleep(0.15)
        os.kill(board.pid, signal.SIGCONT)

        def gaps():
            events = map(json.loads, log.read_text().splitlines())
            return [e['gap'] for e in events if e['event'] == 'loop_gap']

        assert wait_for(lambda: any(g >= 0.14 for g in gaps()), 2.0), gaps()
    finally:
        board.close()


def test_a_host_side_that_does_not_read_never_stops_the_board(host_firmware, tmp_path):
    """The world side (this process) reads the firmware's event stream; while it does not (a
    starved test process), the firmware keeps answering on the serial line: 1500 PINGs, more
    events than the pipe and the tap's one read hold (a firmware that waited for the pipe
    stopped answering after 786), each answered at once, and every event arrives afterwards."""
    board = FirmwareBoard(host_firmware, link=str(tmp_path / 'dac')).start()
    host = Host(board.link)
    try:
        n = 1500
        with board._lock:  # the tap cannot hand on what it reads, so it stops reading
            for i in range(n):
                host.send(P.Ping(i & 0xFF))
                replies = host.reply(timeout=2.0)
                assert [(type(r), r.seq) for r in replies] == [(P.Ack, i & 0xFF)], (i, replies)
        host.send(P.Set(1, (100, 200)))
        (ack,) = host.replies()
        assert isinstance(ack, P.Ack)
        # The tap works through the backlog first (seconds when both cores are busy), by which
        # time the board's 200 ms watchdog may have vented again: look for the SET's record.
        assert wait_for(lambda: any(f.codes == (100, 200) for f in board.frames), 30.0), (
            board.frames[-3:]
        )
    finally:
        host.close()
        board.close()
