#!/usr/bin/env python3
"""How often the valve fit's 95 % intervals hold the truth (issue 26), over drawn rigs.

    python benchmarks/bench_intervals.py RUN [--draws 30] [--channel-errors] [--repeatability [KPA]]

RUN is an `equimus adapt --out` folder. The applied commands of its excitation (bag_excite, the
part `equimus adapt` fits) are replayed, on the board's 1 ms clock, through the valves of rigs
drawn as `--truth random` draws them (`equimus_sim.truth.draw`, seeds 1000 on): the board
emulator's own `ValveModel` (the code a DAC code takes there: each channel's DAC chain, the
VPPE's hysteresis and repeatability, the truth's dead time and fill and vent constants) read
back at the recording's own read-back times. `valve_fit` fits each draw as `equimus adapt
--budget short` does. Printed: per parameter, the share of draws whose 95 % interval holds the
truth, and its median half-width; calibrated intervals hold it in about 95 % of draws.
--repeatability: the intervals also carry a level error of that spread (the datasheet's 3 kPa
without a value; `valve_fit.fit(repeatability_kpa=)`).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys

import numpy as np

from equimus_description.valve import REPEATABILITY_KPA

CHANNELS = 2  # maa, baa


def replay(truth, series, seed: int) -> np.ndarray:
    """The read-back (kPa, (m, 2)) of the drawn rig's valves for the series' applied commands."""
    from equimus_hw.valve.board_model import replay as board_replay
    from equimus_hw.valve.board_model import valve_models
    from equimus_hw.valve.calibration import ValveCalibration

    cal = ValveCalibration()
    valves = valve_models(cal, truth.leg().valve, CHANNELS, seed=seed, **truth.board_keywords())
    return np.array(board_replay(valves, cal, series.t_grid, series.command, series.t_meas))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('run', help='an equimus adapt --out folder (its bag_excite)')
    p.add_argument('--draws', type=int, default=30)
    p.add_argument(
        '--channel-errors', action='store_true', help='draw DAC gain/offset and ADC noise too'
    )
    p.add_argument(
        '--repeatability',
        type=float,
        nargs='?',
        const=REPEATABILITY_KPA,
        default=0.0,
        help=f'kPa (±2σ) of level error carried into the intervals (alone: {REPEATABILITY_KPA:g})',
    )
    a = p.parse_args(argv)

    from equimus_bringup.adapt import BUDGETS, truth_table
    from equimus_identification import data, leg_fit, valve_fit
    from equimus_sim.truth import draw

    run = pathlib.Path(a.run)
    try:
        rec = data.load_bag(run / 'bag_excite')
    except data.DataError as exc:
        print(f'bench_intervals: {exc}', file=sys.stderr)
        return 2
    parts = leg_fit.excitation_parts(rec)
    series = valve_fit.series(rec).window(0.0, parts.split_s)
    held: dict[str, list[bool]] = {n: [] for n in valve_fit.NAMES}
    half: dict[str, list[float]] = {n: [] for n in valve_fit.NAMES}
    for i in range(a.draws):
        seed = 1000 + i
        truth = draw(seed, channel_errors=a.channel_errors)
        s = valve_fit.Series(
            series.t_grid, series.command, series.t_meas, replay(truth, series, seed)
        )
        vf = valve_fit.fit(
            s, max_nfev=BUDGETS['short'].valve_nfev, repeatability_kpa=a.repeatability
        )
        for row in truth_table(truth, vf.values, vf.interval):
            lo, hi = row['interval']
            held[row['name']].append(row['covered'])
            half[row['name']].append(0.5 * (hi - lo))
        print(
            f'draw {i + 1}/{a.draws}: {sum(h[-1] for h in held.values())}/{len(held)} held',
            flush=True,
        )
    print(
        f'\n{a.draws} draws, excitation of {run.name} ({parts.split_s:.1f} s fitted), '
        f'level error carried: {a.repeatability:g} kPa'
    )
    print(f'{"parameter":30s} {"held":>6s} {"median half-width":>18s}')
    for n in valve_fit.NAMES:
        print(f'{n:30s} {100 * np.mean(held[n]):5.0f} % {statistics.median(half[n]):18.4g}')
    total = np.mean([np.mean(h) for h in held.values()])
    print(f'{"all":30s} {100 * total:5.0f} %  (a calibrated 95 % interval: about 95 %)')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
