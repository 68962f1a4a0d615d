#!/usr/bin/env python3
"""Where identification error comes from: least squares started AT the true parameters.

A synthetic bag (identification/synth.py) is cut into experiments and the eleven parameters are
refined by least squares from the truth itself, so whatever error remains is bias of the data
preparation and the simulation step, or noise, never a failed search. Prints the relative error
per parameter and the identifiability analysis's relative standard errors.

    python scripts/identification_bias.py                          # bags' pipeline, 2 mrad noise
    python scripts/identification_bias.py --noise 0 --target smoothed --rate 100 --dt 0.005
"""

import argparse
import pathlib
import sys
import tempfile

import numpy as np
from scipy.optimize import least_squares

from equimus_description.leg import load_leg
from equimus_identification import data, dynamic, synth


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        '--steps', type=int, default=20, help='random pressure steps (0 = synth.DEFAULT_STEPS)'
    )
    ap.add_argument('--noise', type=float, default=0.002, help='mocap-like angle noise (rad)')
    ap.add_argument('--target', default='raw', choices=('raw', 'smoothed'))
    ap.add_argument('--rate', type=float, default=data.BAG_RATE_HZ, help='experiment grid (Hz)')
    ap.add_argument('--dt', type=float, default=synth.SIM_DT, help='identification step (s)')
    ap.add_argument('--horizon', type=float, default=0.6)
    a = ap.parse_args(argv)
    steps = synth.random_steps(a.steps, seed=3) if a.steps else synth.DEFAULT_STEPS
    hold = 1.0 if a.steps else 2.0
    truth = synth.GROUND_TRUTH
    sim = synth.simulate_steps(truth, steps_kpa=steps, hold_s=hold)
    with tempfile.TemporaryDirectory() as tmp:
        rec = data.load_bag(synth.write_bag(pathlib.Path(tmp) / 'bag', sim, noise_rad=a.noise))
    exps = data.segment_steps(rec, max_duration=hold, rate=a.rate, target=a.target)
    names = list(truth)
    ev = dynamic.Evaluator(
        exps,
        names,
        leg=load_leg(parameter_set='table_v_dynamic'),
        loss='shooting',
        horizon=a.horizon,
        dt=a.dt,
    )
    x_true = np.array([truth[n] for n in names])
    print(
        f'{len(exps)} experiments, {ev.n_residuals} residuals, data simulated at '
        f'{synth.SIM_DT:.6f} s, identified at {a.dt:.6f} s, target {a.target} at {a.rate:g} Hz'
    )
    fit = least_squares(
        lambda lp: ev.residuals(np.exp(lp)), np.log(x_true), diff_step=1e-3, max_nfev=60
    )
    ident = dynamic.identifiability(ev, x_true)
    print(f'residual RMS at the truth {ident["residual_rms_rad"]:.2e} rad')
    print(f'{"parameter":28s} {"error":>9s} {"rel. std. err":>14s}')
    for n, v, f in zip(names, x_true, np.exp(fit.x), strict=True):
        print(
            f'{n:28s} {100 * abs(f - v) / v:8.2f} % {100 * ident["relative_std_error"][n]:12.2f} %'
        )
    return 0


if __name__ == '__main__':
    sys.exit(main())
