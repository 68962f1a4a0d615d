"""The soak's checks: a run's records (board log, probe, faults, bags, /proc samples) judged
after the graph has stopped, into figures and pass/fail checks.

`SoakChecks` is a mixin of `runner.Soak` (`analyse` reads what the run recorded on it).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from equimus_description.interface import VALVE_COMMAND, mocap_topic
from equimus_soak import analysis as A
from equimus_soak.faults import KILLED, RATE_HZ, FaultRecord

if TYPE_CHECKING:
    from equimus_hw.valve.board_emulator import BoardEmulator
    from equimus_hw.valve.host_firmware import FirmwareBoard
    from equimus_soak.supervised import SoakSupervisor

VENT_MARGIN_S = 0.1  # target: vented within 100 ms of the watchdog deadline
#: The processes a vent goes through, mocap to board (their run-queue waits widen the margin).
VENT_PATH = (
    'natnet_bridge',
    'estimator',
    'controller',
    'valve_driver',
    'control_loop',
    'soak (rig emulators)',
)
RSS_SLOPE_LIMIT_MB_MIN = 1.0  # a node growing faster than this after warm-up is unbounded
#: The pose stream whose recording is checked against what the emulated Motive sent.
THIGH_POSE = mocap_topic('thigh')


def garbage_run_on(
    stale_trips: int, invalid_trips: int, vented: bool, delay_s: float, stale_timeout_s: float
) -> tuple[bool, str]:
    """Whether the loop ran on through malformed NatNet packets, and a note when not judged.

    Garbage must never reach the controller as an invalid state, nor cut the state stream long
    enough for the stale guard. A machine stall that by itself spans the guard's timeout (with a
    frame period and the vent margin) trips it with no garbage at all: a stale trip and its vent
    then say nothing about the garbage, and the guard did its job. An invalid trip always fails.
    """
    if invalid_trips:
        return False, ''
    if not stale_trips and not vented:
        return True, ''
    if delay_s + 1.0 / RATE_HZ + VENT_MARGIN_S >= stale_timeout_s:
        return True, (
            f' (not judged: the machine stood as long as the stale guard waits, '
            f'{stale_timeout_s:g} s)'
        )
    return False, ''


def sent_times(commands: Sequence[Sequence[Any]]) -> list[float]:
    """When each /valve/command the probe recorded was published, on the probe's monotonic
    clock: its arrival less the delay from the publisher's wall-clock stamp to the arrival's
    (same host, same clock). A loaded machine has delivered the controller's vent commands to the
    probe 0.7 s late, in one burst, while it published them on time. Arrival where a record has
    no stamp."""
    out = []
    for c in commands:
        arrived = float(c[0])
        if len(c) > 3 and c[3]:
            arrived -= max(0.0, (int(c[1]) - int(c[3])) * 1e-9)
        out.append(arrived)
    return out


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


class SoakChecks:
    """Analysis of a finished run (mixed into `runner.Soak`, which sets these attributes)."""

    out: Path
    board: BoardEmulator | FirmwareBoard
    sup: SoakSupervisor
    records: list[FaultRecord]
    frames: list[tuple[int, float]]
    unexpected: list[str]
    bags: list[Path]
    load_bag: Path | None
    t_start: float
    t_loop: float
    t_stop: float
    wall: float
    real_offset: float
    exit_codes: dict
    duration: float
    fused_loop: bool
    stale_timeout: float
    max_hold: float
    command_timeout: float
    reconnect_max: float
    flush_period: float
    sched_delays: list[tuple[float, float]]
    run_delays: dict[str, list[tuple[float, int, dict[int, tuple[int, int]]]]]

    def analyse(self, probe: dict, samples) -> tuple[dict[str, object], list[Check]]:
        checks: list[Check] = []
        fig: dict[str, object] = {}
        tl = A.BoardTimeline.from_log(str(self.out / 'board.jsonl'), self.board.channels)
        cal = self.board.cal
        frames = [t for _, t in self.frames]
        cmds = [c for c in probe['commands']]
        inj_t = [t for t, _ in probe['injected']]
        cmd_sent = sent_times(cmds)
        diags = probe['diagnostics']

        def diag(name: str, a: float, b: float) -> list[list]:
            return [d for d in diags if d[1] == name and a <= d[0] <= b]

        def last_value(name: str, key: str, before: float, default='0') -> str:
            ds = [d for d in diags if d[1] == name and d[0] <= before and key in d[4]]
            return ds[-1][4][key] if ds else default

        def per_wake(name: str, a: float, b: float) -> float:
            """How late `name`'s most delayed thread was each time it was woken, between the
            samples around [a, b] (A.wait_per_wake; one process, the newest if restarted)."""
            rows = self.run_delays.get(name, [])
            i = max(bisect.bisect_right([r[0] for r in rows], a) - 1, 0)
            seg = [r for r in rows[i:] if r[0] <= b + 1.5]
            seg = [r for r in seg if r[1] == seg[-1][1]] if seg else []
            return A.wait_per_wake(seg[0][2], seg[-1][2]) if len(seg) > 1 else 0.0

        def late(a: float, b: float) -> float:
            """The scheduling delay measured around [a, b]: the most this process's sampler
            thread woke late (probes.SchedulingDelay), or the sum over the processes on the
            vent's path (mocap to board) of their run-queue wait per wake-up (/proc schedstat),
            or the longest the emulated board's own loop stood (BoardTimeline.stood), whichever
            is more. About 0 on an idle machine: the margins stay as they are."""
            woke = max((d for t, d in self.sched_delays if a <= t <= b), default=0.0)
            return max(woke, sum(per_wake(n, a, b) for n in VENT_PATH), tl.stood(a, b))

        def first_frame_after(t: float) -> float:
            i = bisect.bisect_right(frames, t)
            return frames[i] if i < len(frames) else math.inf

        def last_frame_before(t: float) -> float:
            i = bisect.bisect_left(frames, t) - 1
            return frames[i] if i >= 0 else -math.inf

        # -- invariant: no code above the 50 kPa code ever reached the serial line
        over = [s for s in tl.sets if any(c > cal.max_code for c in s[1])]
        checks.append(
            Check(
                'invariant: no code above the 50 kPa code on the wire',
                not over and not self.board.invariant_violations,
                f'{len(tl.sets)} SET frames, max code '
                f'{max((max(s[1]) for s in tl.sets), default=0)} <= {cal.max_code}; '
                f'violations {len(over)}',
            )
        )
        fig['set_frames'] = len(tl.sets)
        fig['max_code_seen'] = max((max(s[1]) for s in tl.sets), default=0)
        # -- invariant: a non-zero output never stands longer than the board watchdog
        stalls = [tuple(r.info['stall']) for r in self.records if r.name == 'serial_faults']
        worst, at = tl.longest_unrefreshed_output(stalls)
        allowed = late(at, at + worst + VENT_MARGIN_S)
        checks.append(
            Check(
                'invariant: non-zero output never outlives the board watchdog',
                worst <= self.board.watchdog_s + VENT_MARGIN_S + allowed,
                f'longest non-zero output without a newer frame {worst * 1e3:.1f} ms '
                f'(at t={at - self.t_start:.1f} s); board watchdog '
                f'{self.board.watchdog_s * 1e3:.0f} ms + {VENT_MARGIN_S * 1e3:.0f} ms + '
                f'{allowed * 1e3:.0f} ms measured scheduling delay',
            )
        )
        fig['scheduling_delay_max_ms'] = round(
            max((d for _, d in self.sched_delays), default=0.0) * 1e3, 1
        )

        vent_margins: dict[str, list[float]] = {}
        vent_beyond_delay: list[float] = []  # each vent's margin less the delay it was allowed

        def vent_check(
            rec: FaultRecord, deadline: float, until: float, what: str, guard: str = ''
        ) -> None:
            """The board vented within VENT_MARGIN_S (+ the measured scheduling delay) of the
            deadline; `guard`, when given, says how the controller's stale guard vented (it must
            have: 'NO vent command' fails)."""
            tau = tl.vented_from(deadline - 1.0, until)
            allowed = late(deadline - 0.5, tau) if tau is not None else 0.0
            ok = tau is not None and tau - deadline <= VENT_MARGIN_S + allowed
            ok = ok and not guard.startswith('NO ')
            margin = (tau - deadline) if tau is not None else math.inf
            vent_margins.setdefault(rec.name, []).append(margin)
            vent_beyond_delay.append(margin - allowed)
            checks.append(
                Check(
                    f'{rec.name}: {what}',
                    ok,
                    (
                        f'vented {margin * 1e3:+.1f} ms from the deadline (allowed '
                        f'{VENT_MARGIN_S * 1e3:.0f} ms + {allowed * 1e3:.0f} ms measured '
                        'scheduling delay)'
                        if tau is not None
                        else 'NOT vented before the fault ended'
                    )
                    + (f'; {guard}' if guard else ''),
                )
            )

        def resumed_check(rec: FaultRecord, what: str = 'control resumes afterwards') -> None:
            r = rec.info.get('resumed')
            checks.append(
                Check(
                    f'{rec.name}: {what}',
                    r is not None,
                    f'non-zero SET {r - rec.t1:.2f} s after the fault ended'
                    if r is not None
                    else 'no non-zero SET after the fault',
                )
            )

        def stale_deadline(rec: FaultRecord, until: float) -> tuple[float, str]:
            """When the controller's stale guard must vent, and what its vent was: the stale
            timeout after the last valid state reached the controller. That is the last frame
            sent before the fault, or later when the loop received it late (a loaded machine
            stalls the loop's process with the last frames in its socket; the guard counts from
            their arrival): the probe's last non-vent command before the controller's first vent
            command, which the guard publishes (none: the vent was not the guard's). Judged by
            when the commands were published, not when the probe took them (sent_times)."""
            last_valid, guard_vent = -math.inf, None
            for t, (_, _, values, *_) in zip(cmd_sent, cmds, strict=True):
                if t < rec.t0 - 0.5:
                    continue
                if t > until:
                    break
                if any(values):
                    last_valid = t
                elif last_valid > -math.inf:
                    guard_vent = t
                    break
            s_last = max(last_frame_before(rec.t0), last_valid)
            if last_valid == -math.inf:  # no command before the fault to tell its vent by
                return s_last + self.stale_timeout, ''
            seen = (
                f'its vent command {guard_vent - s_last:.3f} s after the last valid one'
                if guard_vent is not None
                else 'NO vent command from the controller'
            )
            return s_last + self.stale_timeout, seen

        def outage_end(rec: FaultRecord) -> float:
            """The earliest an outage can have ended: the emulator ends it on its own timer,
            `seconds` after it began, which is before the soak's thread woke to note t1 (at
            load, control had resumed before that note)."""
            return min(rec.t1, rec.t0 + rec.info.get('seconds', math.inf))

        for rec in self.records:
            if rec.name == 'mocap_stall':
                until = first_frame_after(outage_end(rec))
                deadline, seen = stale_deadline(rec, until)
                vent_check(
                    rec,
                    deadline,
                    until,
                    f'vented by the stale guard ({self.stale_timeout:g} s)',
                    seen,
                )
                resumed_check(rec)
            elif rec.name == 'untrack':
                s_u = first_frame_after(rec.t0)
                vent_check(
                    rec,
                    s_u + self.max_hold,
                    outage_end(rec),
                    f'vented after the estimator hold ({self.max_hold:g} s)',
                )
                resumed_check(rec)
            elif rec.name == 'natnet_garbage':
                before = diag('natnet_bridge: stream', 0, rec.t0)
                after = diag('natnet_bridge: stream', rec.t1 + 1.05, rec.t_clear + 5)
                if before and after:
                    d_rej = int(after[0][4]['rejected_packets']) - int(
                        before[-1][4]['rejected_packets']
                    )
                    d_ooo = int(after[0][4]['out_of_order_frames']) - int(
                        before[-1][4]['out_of_order_frames']
                    )
                else:
                    d_rej = d_ooo = -1
                ok = d_rej >= 0.9 * rec.info['malformed'] and d_ooo >= rec.info['out_of_order']
                checks.append(
                    Check(
                        'natnet_garbage: bridge counts malformed and out-of-order packets',
                        ok,
                        f'rejected +{d_rej} of {rec.info["malformed"]} malformed, '
                        f'out-of-order +{d_ooo} of {rec.info["out_of_order"]}',
                    )
                )
                trips = {
                    k: int(last_value('controller', k, rec.t_clear + 1.1))
                    - int(last_value('controller', k, rec.t0))
                    for k in ('trips_stale', 'trips_invalid')
                }
                zero = tl.vented_from(rec.t0, rec.t_clear)
                delay = late(rec.t0, rec.t_clear + 1.1)
                ok, why = garbage_run_on(
                    trips['trips_stale'], trips['trips_invalid'], zero is not None, delay,
                    self.stale_timeout,
                )  # fmt: skip
                checks.append(
                    Check(
                        'natnet_garbage: control loop runs on (no vent, no guard trip)',
                        ok,
                        f'controller trips +{trips["trips_stale"]} stale, '
                        f'+{trips["trips_invalid"]} invalid'
                        + (f', vented at t={zero - self.t_start:.2f} s' if zero else '')
                        + f'; {delay * 1e3:.0f} ms measured scheduling delay{why}',
                    )
                )
            elif rec.name == 'serial_faults':
                d = {
                    k: int(last_value('valve_driver: DAC board', k, rec.t_clear + 1.1))
                    - int(last_value('valve_driver: DAC board', k, rec.t0))
                    for k in ('naks', 'ack_timeouts', 'rx_rejected')
                }
                vents = [t for t in tl.rejections if rec.t0 <= t <= rec.t1]
                checks.append(
                    Check(
                        'serial_faults: board rejects and vents on every bad frame',
                        len(vents) >= rec.info['corrupted'],
                        f'{len(vents)} rejected frames (vented) for '
                        f'{rec.info["corrupted"]} corrupted + 30 dropped bytes',
                    )
                )
                checks.append(
                    Check(
                        'serial_faults: driver counts NAKs and unacknowledged frames',
                        d['naks'] >= 1 and d['ack_timeouts'] >= 1,
                        f'driver NAKs +{d["naks"]}, ACK timeouts +{d["ack_timeouts"]}',
                    )
                )
                resumed_check(rec)
            elif rec.name == 'serial_unplug':
                sets_after = tl.sets_between(rec.t1, rec.t_clear)
                first = sets_after[0] if sets_after else None
                checks.append(
                    Check(
                        'serial_unplug: driver reconnects and vents until a fresh command',
                        first is not None
                        and not any(first[1])
                        and first[0] - rec.t1 <= self.reconnect_max + 1.0,
                        f'first SET {first[0] - rec.t1:.2f} s after re-plug, codes {list(first[1])}'
                        if first
                        else 'no SET after re-plug',
                    )
                )
                resumed_check(rec)
            elif rec.name == 'kill_controller':
                before = [
                    c
                    for c in cmds
                    if c[0] < rec.t0 and not any(abs(c[0] - t) < 1e-3 for t in inj_t)
                ]
                c_last = before[-1][0] if before else rec.t0
                vent_check(
                    rec,
                    c_last + self.command_timeout,
                    rec.info['injected'][0][0],
                    f"valve driver's watchdog vents ({self.command_timeout:g} s)",
                )
                self._check_bad_commands(rec, tl, cal, checks, late)
                resumed_check(rec, 'restarted controller resumes control')
            elif rec.name == 'kill_driver':
                last = [s for s in tl.sets if s[0] < rec.t0 and s[2]]
                t_last = last[-1][0] if last else rec.t0
                vent_check(
                    rec,
                    t_last + self.board.watchdog_s,
                    rec.info['t_restart'],
                    f"board's watchdog vents ({self.board.watchdog_s * 1e3:.0f} ms)",
                )
                resumed_check(rec, 'restarted driver resumes control')
            elif rec.name in ('kill_bridge', 'kill_estimator'):
                deadline, seen = stale_deadline(rec, rec.info['t_restart'])
                vent_check(
                    rec,
                    deadline,
                    rec.info['t_restart'],
                    f"controller's stale guard vents ({self.stale_timeout:g} s)",
                    seen,
                )
                resumed_check(rec, f'restarted {KILLED[rec.name]} resumes control')
            elif rec.name in ('kill_reference', 'kill_recorder'):
                vented = tl.vented_from(rec.t0, rec.info['t_restart'])
                down_s = rec.info['t_restart'] - rec.t0
                if not rec.info['nonzero_before']:
                    why = 'the outputs were already zero before the kill'
                elif vented is not None:
                    # what vented it, if the controller said so on /diagnostics meanwhile
                    said = [d[3] for d in diag('controller', rec.t0, vented + 0.5) if d[2] >= 1]
                    why = f'vented {vented - rec.t0:+.3f} s after the kill' + (
                        f' (controller: {said[0]})' if said else ''
                    )
                else:
                    why = ''
                checks.append(
                    Check(
                        f'{rec.name}: control runs on while {KILLED[rec.name]} is down',
                        not why,
                        why
                        or f'outputs non-zero until the node was restarted {down_s:.1f} s after '
                        'the kill',
                    )
                )
                if rec.name == 'kill_recorder':
                    r = rec.info.get('recording')
                    checks.append(
                        Check(
                            'kill_recorder: the restarted recorder records into a new bag',
                            r is not None,
                            f'{rec.info["new_bag"]} growing {r - rec.info["t_restart"]:.2f} s '
                            'after the restart'
                            if r is not None
                            else f'{rec.info["new_bag"]} never grew',
                        )
                    )
            elif rec.name == 'disk_full':
                err = [d for d in diag('recorder', rec.t0, math.inf) if d[2] == 2]
                checks.append(
                    Check(
                        'disk_full: recorder stops with an error on /diagnostics',
                        bool(err) and 'recording stopped' in err[0][3],
                        (f'after {err[0][0] - rec.t0:.2f} s: "{err[0][3][:150]}"')
                        if err
                        else 'no ERROR from the recorder',
                    )
                )
                n_f = len([t for t in frames if rec.t0 <= t <= rec.t1])
                n_c = len([t for t in cmd_sent if rec.t0 <= t <= rec.t1])
                alive = not any(u.startswith('recorder ') for u in self.unexpected)
                # "Keeps running": the loop answered frames (the same 0.5 floor as the fault-free
                # loop check; not a 95 % ratio: at load 11 it read 396 of 481, a speed figure),
                # and no board watchdog vent came from a gap in SET frames longer than the
                # scheduling delay measured around it + VENT_MARGIN_S: a gap the machine's load
                # explains (CI at load 3: one vent, 443 commands for 442 frames) is not the disk.
                wd = 'valve_driver: DAC board', 'watchdog_trips'
                wd_trips = int(last_value(*wd, rec.t1 + 1.1)) - int(last_value(*wd, rec.t0))
                gaps = []
                for v in tl.watchdog_vents:
                    if rec.t0 <= v <= rec.t1 + 1.1:
                        set_times = [s[0] for s in tl.sets_between(rec.t0 - 1.0, v)]
                        a = set_times[-1] if set_times else rec.t0
                        gaps.append((v - a, late(a, v)))
                starved = [g for g, d in gaps if g > VENT_MARGIN_S + d]
                checks.append(
                    Check(
                        'disk_full: control loop keeps running, recorder process stays up',
                        n_f > 0 and n_c >= 0.5 * n_f and not starved and alive,
                        f'{n_c} commands for {n_f} mocap frames while the disk was full, '
                        f'{wd_trips} driver watchdog trips'
                        + ''.join(
                            f'; a {g * 1e3:.0f} ms gap in SET frames ({d * 1e3:.0f} ms '
                            'measured scheduling delay)'
                            for g, d in gaps
                        ),
                    )
                )

        all_margins = [m for v in vent_margins.values() for m in v]
        fig['vent_margin_max_ms'] = max(all_margins) * 1e3 if all_margins else math.nan
        # What each vent check compared with VENT_MARGIN_S: its margin less the scheduling delay
        # measured around it (`late`, which also counts run-queue waits and board stands, so it
        # can exceed scheduling_delay_max_ms, the sampler's alone).
        fig['vent_margin_beyond_delay_max_ms'] = (
            max(vent_beyond_delay) * 1e3 if vent_beyond_delay else math.nan
        )
        for fault, margins in vent_margins.items():
            fig[f'vent_margin_{fault}_ms'] = max(margins) * 1e3

        # -- steady windows: cycles missed, latency, jitter
        t0 = self.t_loop + 2.0
        windows = []
        for rec in self.records:
            # A SIGKILLed recorder loses what it had not flushed yet (not acknowledged either).
            pre = 0.05 + (self.flush_period + 0.1 if rec.name == 'kill_recorder' else 0.0)
            if rec.t0 - pre > t0:
                windows.append((t0, rec.t0 - pre))
            t0 = max(t0, rec.t_clear + 0.5)
        if self.t_stop - 0.2 > t0:
            windows.append((t0, self.t_stop - 0.2))
        steady = sum(b - a for a, b in windows)
        cmd_real = [c for c in cmds if not any(abs(c[0] - t) < 0.05 for t in inj_t)]
        ct = sent_times(cmd_real)  # the probe's own delivery stalls are not the loop's
        n_frames = n_served = 0
        lat_cmd, lat_e2e, inter = [], [], []
        unmatched = 0
        set_times = [s[0] for s in tl.sets]
        for w in windows:
            fi0, fi1 = bisect.bisect_left(frames, w[0]), bisect.bisect_left(frames, w[1])
            n_frames += fi1 - fi0
            m = A.align_commands(frames, ct, w)
            n_served += len(m)
            prev = None
            for k in sorted(m):
                j = m[k]
                lat_cmd.append(ct[j] - frames[k])
                want = A.expected_codes(cmd_real[j][2], cal.kpa_to_code)
                lo = bisect.bisect_left(set_times, frames[k])
                hit = None
                for s in tl.sets[lo:]:
                    if s[0] > ct[j] + 0.02:
                        break
                    if s[2] and s[1] == want:
                        hit = s[0]
                        break
                if hit is None:
                    unmatched += 1
                    prev = None
                    continue
                lat_e2e.append(hit - frames[k])
                if prev is not None and prev[0] == k - 1:
                    inter.append(hit - prev[1])
                prev = (k, hit)
        send_int = [
            b - a for a, b in pairwise(frames) if any(w[0] <= a and b <= w[1] for w in windows)
        ]
        fig['steady_s'] = round(steady, 1)
        fig['mocap_frames_steady'] = n_frames
        fig['cycles_missed'] = n_frames - n_served
        for key, vals in (
            ('e2e_mocap_to_serial', lat_e2e),
            ('mocap_to_command', lat_cmd),
            ('command_interarrival_at_board', inter),
            ('baseline_mocap_send_interval', send_int),
        ):
            p = A.percentiles_ms(vals)
            for q in ('p50', 'p99', 'max'):
                fig[f'{key}_{q}_ms'] = round(p[q], 3)
        jit = [abs(x - 1 / RATE_HZ) for x in inter]
        fig['jitter_abs_p99_ms'] = round(A.percentiles_ms(jit)['p99'], 3)
        fig['e2e_frames_matched'] = len(lat_e2e)
        fig['e2e_frames_unmatched'] = unmatched
        if self.fused_loop:
            # The fused loop's own share, measured inside it (datagram read -> SET written) and
            # reported on /diagnostics over 10 s windows: the rest of e2e is UDP and the pty.
            reps = [
                d[4]
                for d in diags
                if d[1].startswith('control_loop:') and d[4].get('latency_p99_ms', 'nan') != 'nan'
            ]
            for q, agg in (('p50', np.median), ('p99', np.median), ('max', np.max)):
                vals = [float(r[f'latency_{q}_ms']) for r in reps]
                fig[f'fused_frame_to_write_{q}_ms'] = (
                    round(float(agg(vals)), 3) if vals else math.nan
                )
        # A speed figure, not a pass/fail check (benchmarks judge speed): the loop only has to run.
        checks.append(
            Check(
                'loop: the controller answers mocap frames in fault-free windows',
                n_frames > 0 and n_served >= 0.5 * n_frames,
                f'{n_frames - n_served} of {n_frames} frames without a command '
                f'({steady:.0f} s fault-free)',
            )
        )

        # -- recorder: acknowledged vs read back, recorded vs published (fault-free windows: a
        # restarted node's publisher is matched by each subscriber at its own pace)
        self._check_recorder(probe, cmd_real, checks, fig, windows)

        # -- processes: CPU and RSS growth
        growth_bad = []
        for name, rows in sorted(samples.items()):
            last_pid = rows[-1][1]
            seg = [r for r in rows if r[1] == last_pid]
            span = seg[-1][0] - seg[0][0] if len(seg) > 1 else 0.0
            cpu = 100 * (seg[-1][2] - seg[0][2]) / span if span > 0 else math.nan
            settled = [(r[0], r[3]) for r in seg if r[0] - seg[0][0] >= min(10.0, span / 3)]
            slope = A.rss_slope_mb_per_min(settled)
            key = name.split()[0]
            fig[f'cpu_pct_{key}'] = round(cpu, 1)
            fig[f'rss_mb_{key}'] = round(seg[-1][3], 1)
            fig[f'rss_growth_mb_per_min_{key}'] = round(slope, 3)
            if name in self.sup.procs and not math.isnan(slope) and slope > self.rss_limit(span):
                growth_bad.append(f'{name} {slope:.2f} MB/min')
        checks.append(
            Check(
                'invariant: no node grows without bound (RSS slope after warm-up)',
                not growth_bad,
                ', '.join(growth_bad)
                or f'every node under {self.rss_limit(self.duration):.1f} MB/min',
            )
        )
        checks.append(
            Check(
                'no node died on its own',
                not self.unexpected,
                '; '.join(u.splitlines()[0] for u in self.unexpected)
                or f'exit codes at the end {self.exit_codes}',
            )
        )
        fig['faults_injected'] = len(self.records)
        fig['checks_passed'] = sum(c.ok for c in checks)
        fig['checks_total'] = len(checks)
        fig['wall_s'] = round(self.wall, 1)
        return fig, checks

    def rss_limit(self, span: float) -> float:
        """MB/min allowed: a short run's slope is mostly start-up noise, so the bound widens."""
        return RSS_SLOPE_LIMIT_MB_MIN * max(1.0, 300.0 / max(span, 1.0))

    def _check_bad_commands(
        self,
        rec: FaultRecord,
        tl: A.BoardTimeline,
        cal,
        checks: list[Check],
        late: Callable[[float, float], float] = lambda a, b: 0.0,
    ) -> None:
        inj = rec.info['injected']
        bounds = [t for t, _ in inj] + [rec.info['t_restart']]
        problems, seen = [], 0
        for (t, cmd), t_next in zip(inj, bounds[1:], strict=True):
            sets = [s for s in tl.sets_between(t, t_next) if s[2]]
            # Frames that still repeat the output from before the command, within a frame
            # period plus the scheduling delay measured then, were written before the driver
            # had it (a loaded machine delays the delivery): the command starts after them.
            before = tuple(tl.codes_at(t))
            grace = t + 0.05 + late(t - 0.5, t_next)
            while len(sets) > 1 and tuple(sets[0][1]) == before and sets[0][0] <= grace:
                sets.pop(0)
            if not sets:
                problems.append(f'{cmd}: no SET frame')
                continue
            seen += len(sets)
            final = sets[-1][1]
            if len(cmd) != 2:
                want = tuple(tl.codes_at(t))  # rejected as a whole: output unchanged
            else:
                want = A.expected_codes(cmd, cal.kpa_to_code)
            if tuple(final) != tuple(want):
                problems.append(f'{cmd}: wire settled at {list(final)}, expected {list(want)}')
            for ch, v in enumerate(cmd[:2]):
                if not math.isfinite(v) and any(s[1][ch] for s in sets):
                    problems.append(f'{cmd}: channel {ch} not vented immediately')
        checks.append(
            Check(
                'kill_controller: NaN / out-of-range / wrong-length commands vented '
                'or clamped on the wire',
                not problems,
                '; '.join(problems)
                or f'{len(inj)} bad commands, {seen} SET frames '
                'checked: NaN/inf -> code 0, 1e6 -> code '
                f'{cal.max_code} (50 kPa), -10 -> 0, 3 values -> ignored',
            )
        )

    def _check_recorder(
        self,
        probe: dict,
        cmd_real: list,
        checks: list[Check],
        fig: dict,
        windows: list[tuple[float, float]],
    ) -> None:
        from equimus_record import bag as bagio

        rec_diags = [d for d in probe['diagnostics'] if d[1] == 'recorder']

        def acked_in(bag: Path) -> int:
            """The most messages the recorder writing `bag` reported as safe on disk."""
            return max(
                (
                    int(d[4].get('messages_on_disk', 0))
                    for d in rec_diags
                    if d[4].get('bag') == str(bag)
                ),
                default=0,
            )

        counts: dict[str, int] = {}
        times: dict[str, list[int]] = {}
        recorded_commands: dict[tuple, int] = {}
        ts = bagio._typestore()
        per_bag = []
        for bag in [*self.bags, *([self.load_bag] if self.load_bag else [])]:
            main = bag in self.bags
            n, err = 0, ''
            try:
                # read-only: a killed recorder's bag is read up to its last complete chunk
                for topic, msgtype, stamp, raw in bagio.raw_messages(bag, None):
                    n += 1
                    if not main:
                        continue
                    counts[topic] = counts.get(topic, 0) + 1
                    if topic in (VALVE_COMMAND.name, THIGH_POSE):
                        times.setdefault(topic, []).append(stamp)
                    if topic == VALVE_COMMAND.name:
                        msg = ts.deserialize_cdr(raw, msgtype)
                        cmd_key = _command_key(msg.data)
                        recorded_commands[cmd_key] = recorded_commands.get(cmd_key, 0) + 1
            except Exception as exc:  # noqa: BLE001 - reported as a failed check
                err = f'{type(exc).__name__}: {exc}'
            per_bag.append((bag, main, n, acked_in(bag), err))
        for topic_times in times.values():
            topic_times.sort()
        acked = sum(a for _, main, _, a, _ in per_bag if main)
        read_back = sum(n for _, main, n, _, _ in per_bag if main)
        fig['recorder_acknowledged'] = acked
        fig['recorder_read_back'] = read_back
        fig['bags'] = len(per_bag)
        if self.load_bag is not None:
            fig['second_recorder_read_back'] = sum(n for _, m, n, _, _ in per_bag if not m)
            fig['second_recorder_acknowledged'] = sum(a for _, m, _, a, _ in per_bag if not m)
        lost = [
            f'{b.name}: {err or f"read {n} < acknowledged {a}"}'
            for b, _, n, a, err in per_bag
            if err or n < a or a == 0
        ]
        checks.append(
            Check(
                'invariant: the bag holds every message the recorder acknowledged',
                not lost,
                '; '.join(lost)
                or ', '.join(
                    f'{b.name}: read {n} >= {a} acknowledged' for b, _, n, a, _ in per_bag
                ),
            )
        )
        # recorded vs published over the span the bag covers (ends where the disk filled up)
        for topic, published in (
            (VALVE_COMMAND.name, [c[1] for c in cmd_real]),
            (THIGH_POSE, [int((t + self.real_offset) * 1e9) for _, t in self.frames]),
        ):
            ts = times.get(topic, [])
            key = topic.strip('/').replace('/', '_')
            if len(ts) < 10:
                fig[f'recorded_vs_published_{key}'] = 'n/a'
                continue
            a, b = ts[0] + 100_000_000, ts[-1] - 100_000_000
            spans = [
                (
                    max(a, int((w0 + self.real_offset) * 1e9)),
                    min(b, int((w1 + self.real_offset) * 1e9)),
                )
                for w0, w1 in windows
            ]
            spans = [(x, y) for x, y in spans if y > x]
            # A restarted publisher is recorded from when the recorder discovered it (Fast DDS
            # announces participants every 3 s; at load the first announcements can be missed):
            # a window after a restart counts from the recorder's first message of the topic.
            restarts = sorted(
                int((r.info['t_restart'] + self.real_offset) * 1e9)
                for r in self.records
                if 't_restart' in r.info
            )
            heard = []
            for i, (x, y) in enumerate(spans):
                before = [r for r in restarts if r < x]
                if not before:
                    continue
                j = bisect.bisect_right(ts, before[-1])
                if j < len(ts):
                    heard.append((ts[j] - before[-1]) * 1e-9)
                    if ts[j] > x:
                        spans[i] = (ts[j], y)
            spans = [(x, y) for x, y in spans if y > x]
            if heard:
                fig[f'recorder_heard_restarted_{key}_after_s'] = round(max(heard), 2)
            rec_n = sum(x <= t <= y for t in ts for x, y in spans)
            pub_n = sum(x <= t <= y for t in published for x, y in spans)
            fig[f'recorded_{key}'] = rec_n
            fig[f'published_{key}'] = pub_n
            if topic == VALVE_COMMAND.name:
                # Matched by content: the recorder and the probe stamp arrivals in different
                # processes, so counting by time loses messages at window edges under load.
                left = dict(recorded_commands)
                seen = [c for c in cmd_real if any(x <= c[1] <= y for x, y in spans)]
                lost_at = []
                for c in seen:
                    cmd_key = _command_key(c[2])
                    if left.get(cmd_key, 0) > 0:
                        left[cmd_key] -= 1
                    else:
                        lost_at.append(c[0])
                missing = len(lost_at)
                fig['recorder_lost_valve_command'] = missing
                checks.append(
                    Check(
                        'recorder: every /valve/command the probe saw is in the bag',
                        missing == 0,
                        f'{len(seen) - missing} of the {len(seen)} commands the probe saw '
                        'in the fault-free windows while recording are in the bag '
                        f'(matched by value; {rec_n} recorded by arrival time)'
                        + (f'; not in the bag: {self._when(lost_at)}' if lost_at else ''),
                    )
                )

    def _when(self, times: list[float]) -> str:
        """Where probe times lie: after the loop started, and after the last fault cleared."""
        times = sorted(times)
        groups: list[list[float]] = []
        for t in times:
            if groups and t - groups[-1][-1] < 0.5:
                groups[-1].append(t)
            else:
                groups.append([t])
        out = []
        for g in groups:
            before = [r for r in self.records if r.t_clear <= g[0]]
            after = (
                f', {g[0] - before[-1].t_clear:.2f} s after {before[-1].name} cleared'
                if before
                else ''
            )
            out.append(
                f'{len(g)} from {g[0] - self.t_loop:.2f} s to {g[-1] - self.t_loop:.2f} s{after}'
            )
        return '; '.join(out)


def _command_key(values) -> tuple:
    """A /valve/command's values as a hashable key (rounded: the JSON round trip of the probe)."""
    return tuple(round(float(v), 9) for v in values)


def format_report(fig: dict[str, object], checks: list[Check]) -> str:
    lines = ['', f'{"figure":44s} value']
    for k, v in fig.items():
        lines.append(f'{k:44s} {v:.4g}' if isinstance(v, float) else f'{k:44s} {v}')
    lines.append('')
    for c in checks:
        lines.append(f'[{"PASS" if c.ok else "FAIL"}] {c.name}: {c.detail}')
    return '\n'.join(lines)
