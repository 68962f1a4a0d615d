"""`equimus excite`: design a pressure trajectory that makes the leg's parameters identifiable.

The trajectory is a sequence of pressure levels (both channels, within the valve's 0–HARD_MAX_KPA
range), each reached by a ramp at the valve driver's slew limit and then held, at the 120 Hz
command rate, for a fixed total duration. Its quality is the Fisher information of the
identification it feeds: J = ∂(simulated angles)/∂(log parameters) of the multiple-shooting
residuals (the loss `equimus identify --loss shooting` minimises), simulated at the nominal
parameters, F = JᵀJ / σ² with σ the mocap noise. The levels are improved by a (1+1) evolution
strategy on log det F (D-optimal) or its smallest eigenvalue (E-optimal). The predicted relative
standard errors sqrt(diag F⁻¹) are reported next to those of ToCenter-style releases (each
effective pressure pair held, then vented) of the same duration.

Outputs in --out: excite.csv (t s, P1 kPa, P2 kPa: the command to play), excite.yaml (levels,
settings, predicted errors), excite.png. Play the CSV's pressures on the rig (or the sim),
record a bag, then `equimus identify BAG --loss shooting --horizon 0.6`.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np
import yaml

from equimus_description.valve import HARD_MAX_KPA, P_MIN_KPA

from . import data, synth
from . import dynamic as D
from .report import pyplot, save_figure

RATE_HZ = data.BAG_RATE_HZ  # the valve command and mocap rate
DEFAULT_SLEW_KPA_S = 1000.0  # the valve driver's default slew_rate_kpa_s (config/valve.yaml)
HORIZON_S = 0.6  # multiple-shooting segment of the identification the design is for
NOISE_RAD = 0.002  # mocap angle noise assumed for the predicted errors


def command_from_levels(levels, hold_s: float, slew_kpa_s: float, rate: float = RATE_HZ):
    """(N, 2) command at `rate`: from each level to the next by a slew-limited ramp, then held;
    each level lasts hold_s including its ramp. Starts and ends vented."""
    lv = np.vstack([[P_MIN_KPA, P_MIN_KPA], np.asarray(levels, float), [P_MIN_KPA, P_MIN_KPA]])
    n = int(round(hold_s * rate))
    step = slew_kpa_s / rate
    out, cur = [], lv[0].copy()
    for target in lv:
        for _ in range(n):
            cur = cur + np.clip(target - cur, -step, step)
            out.append(cur.copy())
    return np.clip(np.array(out), P_MIN_KPA, HARD_MAX_KPA)


def experiment(sim: dict, name: str = 'excite') -> data.Experiment:
    return data.Experiment(
        name=name,
        t=sim['t'],
        q=sim['q'],
        qd=sim['qd'],
        command_kpa=sim['command'],
        p0_kpa=sim['pressure'][0],
    )


def information(command, nominal: dict, names, noise_rad: float = NOISE_RAD, rel_step=1e-3):
    """Fisher information of the shooting residuals in log-parameter coordinates."""
    sim = synth.simulate_command(nominal, command)
    ev = D.Evaluator(
        [experiment(sim)],
        names,
        leg=sim['leg'],
        loss='shooting',
        horizon=HORIZON_S,
        dt=synth.SIM_DT,
    )
    x = np.array([D.leg_value(sim['leg'], n) for n in names])
    r0 = ev.residuals(x)
    J = np.empty((r0.size, len(x)))
    for i in range(len(x)):
        xi = x.copy()
        xi[i] *= 1.0 + rel_step
        J[:, i] = (ev.residuals(xi) - r0) / rel_step
    return J.T @ J / noise_rad**2


def criteria(F: np.ndarray) -> dict:
    w = np.linalg.eigvalsh(F)
    rse = np.sqrt(np.clip(np.diag(np.linalg.pinv(F)), 0, None))
    return {
        'logdet': float(np.sum(np.log(np.clip(w, 1e-300, None)))),
        'mineig': float(w[0]),
        'rse': rse,
    }


def tocenter_levels(n: int) -> np.ndarray:
    """ToCenter-style releases: effective pressure pairs, each followed by venting."""
    pairs = [p for p in data.EFFECTIVE_13 if any(p)]
    out = []
    for k in range(n // 2):
        out += [pairs[k % len(pairs)], (0.0, 0.0)]
    return np.array(out[:n], float)


def design(
    nominal: dict,
    names,
    n_levels: int,
    hold_s: float,
    slew: float,
    criterion: str = 'logdet',
    iterations: int = 40,
    seed: int = 0,
    progress: bool = True,
) -> dict:
    """(1+1) evolution strategy over the levels; returns the best levels and their criteria."""
    rng = np.random.default_rng(seed)
    levels = rng.uniform(P_MIN_KPA, HARD_MAX_KPA, (n_levels, 2))

    def score(lv):
        c = criteria(information(command_from_levels(lv, hold_s, slew), nominal, names))
        return c[criterion], c

    best, best_c = score(levels)
    history = [best]
    it = range(iterations)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc='excite', unit='design')
    sigma = 0.25 * (HARD_MAX_KPA - P_MIN_KPA)
    for _ in it:
        cand = levels.copy()
        k = rng.integers(0, n_levels, size=max(1, n_levels // 4))
        cand[k] += rng.normal(0.0, sigma, (len(k), 2))
        cand = np.clip(cand, P_MIN_KPA, HARD_MAX_KPA)
        s, c = score(cand)
        if s > best:
            levels, best, best_c = cand, s, c
            sigma = min(sigma * 1.5, HARD_MAX_KPA)
        else:
            sigma = max(sigma * 0.9, 1.0)
        history.append(best)
    return {'levels': levels, 'criteria': best_c, 'history': history}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='equimus excite',
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument('--out', default='excite', help='output folder (default: excite/)')
    p.add_argument(
        '--nominal', default='table_v_dynamic', help='parameter file or set the design assumes'
    )
    p.add_argument('--params', default='paper+valve', help='parameters to make identifiable')
    p.add_argument('--duration', type=float, default=24.0, help='total length (s)')
    p.add_argument('--hold', type=float, default=1.0, help='time per level incl. its ramp (s)')
    p.add_argument('--slew', type=float, default=DEFAULT_SLEW_KPA_S, help='ramp limit (kPa/s)')
    p.add_argument('--criterion', choices=('logdet', 'mineig'), default='logdet')
    p.add_argument('--iterations', type=int, default=40, help='design candidates to try')
    p.add_argument('--noise', type=float, default=NOISE_RAD, help='angle noise (rad)')
    p.add_argument('--seed', type=int, default=0)
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    from equimus_description.leg import LegDescriptionError

    from .evaluate import load_params
    from .options import parse_params

    try:
        leg = load_params(a.nominal)
        names = parse_params(a.params)
    except (LegDescriptionError, FileNotFoundError, ValueError) as exc:
        print(f'equimus excite: {exc}', file=sys.stderr)
        return 2
    if a.slew <= 0 or a.hold <= 0 or a.duration < 3 * a.hold:
        print('equimus excite: need slew > 0, hold > 0 and duration ≥ 3 holds', file=sys.stderr)
        return 2
    nominal = {n: D.leg_value(leg, n) for n in D.BOUNDS}
    n_levels = int(a.duration // a.hold) - 2  # the vented start and end take one hold each
    t0 = time.monotonic()
    r = design(nominal, names, n_levels, a.hold, a.slew, a.criterion, a.iterations, a.seed)
    scale = a.noise / NOISE_RAD
    ref = criteria(
        information(command_from_levels(tocenter_levels(n_levels), a.hold, a.slew), nominal, names)
    )
    cmd = command_from_levels(r['levels'], a.hold, a.slew)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t = np.arange(len(cmd)) / RATE_HZ
    np.savetxt(
        out / 'excite.csv',
        np.column_stack([t, cmd]),
        delimiter=',',
        fmt='%.4f',
        header='t_s,P1_kpa,P2_kpa',
        comments='',
    )
    rse = dict(zip(names, (scale * r['criteria']['rse']).tolist(), strict=True))
    rse_ref = dict(zip(names, (scale * ref['rse']).tolist(), strict=True))
    doc = {
        'levels_kpa': r['levels'].round(2).tolist(),
        'hold_s': a.hold,
        'slew_kpa_s': a.slew,
        'rate_hz': RATE_HZ,
        'duration_s': float(t[-1] + 1.0 / RATE_HZ),
        'criterion': a.criterion,
        'nominal': a.nominal,
        'noise_rad': a.noise,
        'predicted_relative_std_error': rse,
        'tocenter_style_relative_std_error': rse_ref,
        'logdet': r['criteria']['logdet'],
        'tocenter_style_logdet': ref['logdet'],
        'wall_s': time.monotonic() - t0,
    }
    (out / 'excite.yaml').write_text(yaml.safe_dump(doc, sort_keys=False))
    print(
        f'{"parameter":28s} {"designed":>10s} {"ToCenter-style":>15s}  (predicted rel. std. error)'
    )
    for n in names:
        print(f'{n:28s} {100 * rse[n]:9.3f}% {100 * rse_ref[n]:14.3f}%')
    print(
        f'log det F: designed {doc["logdet"]:.2f}, '
        f'ToCenter-style {doc["tocenter_style_logdet"]:.2f}'
    )
    _plot(t, cmd, r['history'], out / 'excite.png')
    print(f'trajectory: {out / "excite.csv"}\ndesign: {out / "excite.yaml"}')
    return 0


def _plot(t, cmd, history, path):
    plt = pyplot()

    fig, (a0, a1) = plt.subplots(1, 2, figsize=(11, 3.2), gridspec_kw={'width_ratios': [3, 1]})
    a0.plot(t, cmd[:, 0], label='P1 (MAA)')
    a0.plot(t, cmd[:, 1], label='P2 (BAA)')
    a0.set_xlabel('t (s)')
    a0.set_ylabel('command (kPa)')
    a0.legend(fontsize=7)
    a1.plot(history)
    a1.set_xlabel('candidate')
    a1.set_ylabel('criterion (best so far)')
    save_figure(fig, path)


if __name__ == '__main__':
    sys.exit(main())
