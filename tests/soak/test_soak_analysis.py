"""The soak's bookkeeping on hand-made records: vent times, frame/command alignment, RSS slope."""

import json
import math

import pytest

from equimus_soak import analysis as A


def _timeline(tmp_path, events):
    path = tmp_path / 'board.jsonl'
    path.write_text(''.join(json.dumps(e) + '\n' for e in events) + '{"event": "set", "t"')
    return A.BoardTimeline.from_log(str(path), 2)


def test_vent_time_is_where_the_outputs_become_and_stay_zero(tmp_path):
    tl = _timeline(
        tmp_path,
        [
            {'event': 'set', 't': 1.0, 'codes': [100, 50], 'accepted': True},
            {'event': 'set', 't': 1.1, 'codes': [90, 0], 'accepted': True},
            {'event': 'watchdog_vent', 't': 1.35},
            {'event': 'set', 't': 1.4, 'codes': [0, 0], 'accepted': True},
            {'event': 'set', 't': 2.0, 'codes': [10, 0], 'accepted': True},
        ],
    )
    assert tl.vented_from(1.0, 1.9) == 1.35
    assert tl.vented_from(1.0, 2.1) is None  # non-zero again at 2.0
    assert tl.vented_from(1.5, 1.9) == 1.5  # already vented when the window opens
    assert tl.nonzero_after(1.2, 3.0) == 2.0
    worst, at = tl.longest_unrefreshed_output()
    assert math.isclose(worst, 0.25) and at == 1.1


def test_refused_and_bad_frames_and_unplugging_count_as_vents(tmp_path):
    tl = _timeline(
        tmp_path,
        [
            {'event': 'set', 't': 1.0, 'codes': [100, 50], 'accepted': True},
            {'event': 'rejected', 't': 1.1, 'reason': 'bad_crc'},
            {'event': 'set', 't': 1.2, 'codes': [100, 50], 'accepted': True},
            {'event': 'set', 't': 1.3, 'codes': [999, 50], 'accepted': False},
            {'event': 'set', 't': 1.5, 'codes': [100, 50], 'accepted': True},
            {'event': 'unpowered', 't': 1.6},
        ],
    )
    assert tl.codes_at(1.15) == (0, 0)
    assert tl.codes_at(1.35) == (0, 0)
    assert tl.vented_from(1.5, 2.0) == 1.6
    assert [s[2] for s in tl.sets] == [True, True, False, True]


def test_alignment_counts_missed_frames_and_late_commands():
    period = 1 / 120
    frames = [i * period for i in range(20)]
    cmds = []
    for i, f in enumerate(frames):
        if i == 5:
            continue  # frame 5: no command (missed)
        cmds.append(f + (0.009 if i == 9 else 0.001))  # frame 9: late, after frame 10 was sent
    cmds.sort()
    m = A.align_commands(frames, cmds, (0.0, frames[-1] + period / 2))
    assert 5 not in m and len(m) == 19
    assert math.isclose(cmds[m[9]] - frames[9], 0.009)
    assert all(math.isclose(cmds[m[k]] - frames[k], 0.001) for k in m if k != 9)


def test_expected_codes_and_percentiles_and_slope():
    to_code = lambda kpa: int(round(kpa * 341 / 50))  # noqa: E731
    assert A.expected_codes([math.nan, 1e6, -5.0, 25.0], to_code) == (0, 341, 0, 170)
    p = A.percentiles_ms([0.001] * 99 + [0.010])
    assert math.isclose(p['p50'], 1.0) and math.isclose(p['max'], 10.0)
    assert math.isclose(
        A.rss_slope_mb_per_min([(t, 100 + 0.5 * t / 60) for t in range(0, 60, 5)]), 0.5
    )
    assert math.isnan(A.rss_slope_mb_per_min([(0, 1), (1, 2)]))


def test_the_boards_own_loop_gaps_are_read_and_found_around_an_event(tmp_path):
    tl = _timeline(
        tmp_path,
        [
            {'event': 'set', 't': 1.0, 'codes': [100, 50], 'accepted': True},
            {'event': 'loop_gap', 't': 1.5, 'gap': 0.3},
            {'event': 'watchdog_vent', 't': 1.5},
            {'event': 'loop_gap', 't': 3.0, 'gap': 0.05},
        ],
    )
    assert tl.loop_gaps == [(1.5, 0.3), (3.0, 0.05)]
    assert tl.stood(1.0, 1.5) == 0.3  # the gap ran from 1.2 to 1.5
    assert tl.stood(1.3, 1.4) == 0.3  # inside it
    assert tl.stood(1.6, 2.9) == 0.0  # between the two
    assert tl.stood(2.96, 4.0) == 0.05
    assert tl.codes_at(1.6) == (0, 0), 'a gap changes no output'


def test_garbage_run_on_excuses_a_stale_trip_only_where_the_machine_stood_that_long():
    """natnet_garbage's run-on check: on an idle machine any trip or vent fails it; a stale
    trip (and its vent) is not judged when the measured stall alone spans the stale guard's
    timeout; an invalid state (garbage reaching the controller) fails it whatever the stall."""
    from equimus_soak.checks import garbage_run_on

    assert garbage_run_on(0, 0, False, 0.005, 0.25) == (True, '')
    assert garbage_run_on(1, 0, True, 0.005, 0.25)[0] is False  # idle: the garbage's fault
    assert garbage_run_on(0, 0, True, 0.005, 0.25)[0] is False  # a vent without a trip
    ok, why = garbage_run_on(1, 0, True, 0.241, 0.25)  # 331b237's CI: a 241 ms stall
    assert ok and 'not judged' in why
    assert garbage_run_on(1, 0, True, 0.12, 0.25)[0] is False  # a stall too short to explain it
    assert garbage_run_on(0, 1, False, 0.5, 0.25)[0] is False  # invalid: never excused


def test_commands_are_judged_by_when_they_were_sent():
    """The probe's arrival time less the delay its publisher's stamp shows: soak_kills of
    2026-12-05 took the controller's first vent command 0.72 s after it was published, with six
    more in the next 2 ms, and read it as no vent before the estimator's restart."""
    from equimus_soak.checks import sent_times

    rows = [
        [100.000, 2_000_000_000, [5.0, 5.0], 1_999_000_000],  # 1 ms on the way
        [100.720, 2_720_000_000, [0.0, 0.0], 2_000_000_000],  # published 0.72 s before
        [100.721, 2_721_000_000, [0.0, 0.0], 2_721_500_000],  # a stamp after arrival: none
        [101.000, 3_000_000_000, [0.0, 0.0]],  # an older record without a stamp
    ]
    assert sent_times(rows) == pytest.approx([99.999, 100.0, 100.721, 101.0], abs=1e-9)


def test_udp_receive_buffer_drops_are_read_by_column_name():
    snmp = (
        'Ip: Forwarding DefaultTTL\nIp: 1 64\n'
        'Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n'
        'Udp: 8988851 366802 128811 9386277 128972 0\n'
        'UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n'
        'UdpLite: 0 0 0 0 7 0\n'
    )
    assert A.udp_receive_buffer_drops(snmp) == 128972
    assert A.udp_receive_buffer_drops('Udp: InDatagrams NoPorts\nUdp: 1 2\n') is None
    assert A.udp_receive_buffer_drops('') is None
    here = A.udp_receive_buffer_drops()  # this host's own file, where it has one
    assert here is None or here >= 0
