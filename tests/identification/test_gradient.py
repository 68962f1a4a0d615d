"""`equimus identify --method gradient` (equimus_identification.gradient): trust-region
Gauss-Newton on the multiple-shooting residuals recovers known parameters from a synthetic bag.

The finite-difference Jacobian (`--jacobian fd`, through mujoco.rollout) needs nothing beyond the
base install; the MJX one (`--jacobian mjx`) needs the optional `mjx` extra and is skipped, with
the reason, without it. Small on purpose: a few pressure steps, a handful of parameters."""

import os
import subprocess
import sys

import numpy as np
import pytest
import yaml

from equimus_identification import cli as identify_cli
from equimus_identification import data, synth
from equimus_identification import dynamic as D
from equimus_identification import gradient as G

FREE = {
    'actuators.maa.k': 1.25,  # start factor: the fit starts this far off the truth
    'actuators.baa.k': 0.8,
    'actuators.maa.area': 0.85,
    'actuators.baa.area': 1.2,
    'valve.time_constant': 1.4,
}


@pytest.fixture(scope='module')
def session(tmp_path_factory):
    """A bag of six random pressure steps with the ground-truth parameters, and a start file
    with the free ones off the truth (the rest at the truth)."""
    tmp = tmp_path_factory.mktemp('gradient')
    sim = synth.simulate_steps(
        synth.GROUND_TRUTH, steps_kpa=synth.random_steps(5, seed=4), hold_s=1.0
    )
    bag = synth.write_bag(tmp / 'bag', sim, noise_rad=0.0005, seed=3)
    start = tmp / 'start.yaml'
    start.write_text(
        yaml.safe_dump(
            {
                'parameters': {
                    **synth.GROUND_TRUTH,
                    **{k: synth.GROUND_TRUTH[k] * f for k, f in FREE.items()},
                }
            }
        )
    )
    return {'bag': bag, 'start': start, 'tmp': tmp}


@pytest.mark.timeout(300)
def test_gradient_fd_recovers_known_parameters(session):
    out = session['tmp'] / 'fit-fd'
    rc = identify_cli.main(
        [
            str(session['bag']),
            '--method',
            'gradient',
            '--jacobian',
            'fd',
            '--iterations',
            '12',
            '--params',
            ','.join(FREE),
            '--loss',
            'shooting',
            '--duration',
            '1.0',
            '--start',
            str(session['start']),
            '--mapper',
            'serial',
            '--out',
            str(out),
            '--no-plots',
        ]
    )
    assert rc == 0
    fitted = yaml.safe_load((out / 'params.yaml').read_text())['parameters']
    errors = {k: abs(fitted[k] / synth.GROUND_TRUTH[k] - 1.0) for k in FREE}
    assert all(e < 0.02 for e in errors.values()), errors
    assert 'Gauss-Newton iterations' in (out / 'report.md').read_text()


def test_gradient_refuses_the_sign_term_in_one_line(session, capsys):
    rc = identify_cli.main(
        [
            str(session['bag']),
            '--method',
            'gradient',
            '--params',
            'lag',
            '--loss',
            'whole',
            '--sign-weight',
            '100',
            '--out',
            str(session['tmp'] / 'fit-sign'),
            '--no-plots',
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and '--sign-weight 0' in err[0]


def test_fd_jacobian_matches_a_central_difference(session):
    """The forward-difference columns agree with central differences (a step 10x larger) where
    the residuals are smooth: the Jacobian Gauss-Newton trusts is the residuals' slope."""
    exps = data.load_any([str(session['bag'])], duration=1.0)['dynamic']
    names = list(FREE)
    ev = D.Evaluator(exps, names, loss='shooting', dt=1 / 600, sign_weight=0.0)
    u = np.full(len(names), 0.4)
    r0 = ev.residuals(ev.from_unit(u))
    J = G.fd_jacobian(ev, u, r0)
    h = 1e-3
    Jc = np.column_stack(
        [
            (ev.residuals(ev.from_unit(u + h * e)) - ev.residuals(ev.from_unit(u - h * e)))
            / (2 * h)
            for e in np.eye(len(names))
        ]
    )
    rel = np.linalg.norm(J - Jc, axis=0) / np.linalg.norm(Jc, axis=0)
    assert np.all(rel < 0.02), rel


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_mjx_residuals_and_jacobian_match_the_c_simulator(session):
    """MJX (the optional extra) runs this model, loop closures and valve model included: its
    residuals equal the C simulator's and its exact Jacobian the finite differences' where the
    residuals are smooth. Compiling MJX's step and its Jacobian
    takes minutes on two cores (cached under ~/.cache/equimus/jax for the next run), so it runs
    on request only: EQUIMUS_MJX_TESTS=1."""
    why = G.mjx_available()
    if why:
        pytest.skip(why)
    if os.environ.get('EQUIMUS_MJX_TESTS') != '1':
        pytest.skip('compiling MJX takes minutes on two cores: set EQUIMUS_MJX_TESTS=1 to run it')
    exps = data.load_any([str(session['bag'])], duration=1.0)['dynamic']
    names = list(FREE)
    ev = D.Evaluator(exps, names, loss='shooting', dt=1 / 600, sign_weight=0.0)
    x0 = np.array([synth.GROUND_TRUTH[k] * f for k, f in FREE.items()])
    u0 = ev.to_unit(x0)
    mj = G.MjxResiduals(ev, u0)
    J, r = mj.jacobian(u0)
    r_c = ev.residuals(x0)
    assert np.max(np.abs(r - r_c)) < 1e-4 * max(1.0, np.max(np.abs(r_c)))
    Jfd = G.fd_jacobian(ev, u0, r_c)
    h = 1e-3  # where forward and central differences agree, the residuals are smooth there
    Jc = np.column_stack(
        [
            (ev.residuals(ev.from_unit(u0 + h * e)) - ev.residuals(ev.from_unit(u0 - h * e)))
            / (2 * h)
            for e in np.eye(len(names))
        ]
    )
    norm = np.linalg.norm(Jfd, axis=0)
    smooth = np.linalg.norm(Jc - Jfd, axis=0) / norm < 0.01
    assert smooth.sum() >= 3, smooth
    rel = np.linalg.norm(J - Jfd, axis=0) / norm
    assert np.all(rel[smooth] < 0.01), rel


VALVE_CHECK = """
import numpy as np
from equimus_description.valve import ValveParams, follow
from equimus_identification import gradient as G

_jax, jnp, _mjx = G._jax()
dt = 0.01
valve = ValveParams((0.22, 0.32), (0.005, 0.12), 0.095, float('inf'))
u = np.repeat(np.random.default_rng(0).uniform(0, 50, (12, 2)), 25, axis=0)
p0 = np.array([10.0, 30.0])
want, _ = follow(valve, u, p0, dt)
got = G.valve_pressures(
    jnp, jnp.asarray(u), jnp.asarray(p0), dt, jnp.asarray([0.22, 0.32]),
    jnp.asarray([0.005, 0.12]), 0.095, max_delay=12,
)
print(float(np.max(np.abs(np.asarray(got) - want))))
"""


def test_jax_valve_model_equals_the_description_s():
    """The valve/chamber model in JAX (dead time of a fractional number of steps, fill and vent
    constants per valve) gives the pressures of equimus_description.valve.follow. In a child
    process: JAX's threads in this one would make the process pools of later tests fork unsafely."""
    why = G.mjx_available()
    if why:
        pytest.skip(why)
    out = subprocess.run(
        [sys.executable, '-c', VALVE_CHECK], capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.strip().splitlines()[-1]) < 1e-9
