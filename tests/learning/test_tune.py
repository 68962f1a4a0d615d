"""`equimus tune pid`: the search improves the closed-loop error on the model and writes a
parameter file that the graph takes as params_file:=."""

import math

import numpy as np
import yaml

from equimus_bringup.cli import main as equimus
from equimus_control.pid import PIDGains
from equimus_learning.tune import (
    TuneConfig,
    closed_loop_rmse,
    read_gains,
    tune_pid,
    write_params,
)


def test_local_search_improves_the_closed_loop_error(tmp_path):
    cfg = TuneConfig(duration=3.0, local_evals=10, global_generations=0)
    result = tune_pid(cfg)
    assert result.evaluations >= 8
    assert result.cost < 0.99 * result.start_cost, (result.cost, result.start_cost)
    assert result.gains != PIDGains()
    # the reported cost is the loop's error with those gains (deterministic objective)
    rmse, vented = closed_loop_rmse(result.gains, 'triangle', 3.0, cfg.noise_seed)
    assert not vented
    assert math.isclose(float(np.mean(rmse**2)), result.cost, rel_tol=1e-9)
    path = tmp_path / 'tuned.yaml'
    write_params(path, result, cfg)
    doc = yaml.safe_load(path.read_text())
    assert set(doc['controller']['ros__parameters']) == {'kp', 'ki', 'kd'}
    back = read_gains(path)
    assert np.allclose(back.kp, result.gains.kp, rtol=1e-5)
    assert np.allclose(back.kd, result.gains.kd, rtol=1e-5)


def test_the_graph_takes_the_file_as_params_file(tmp_path):
    from equimus_bringup.graph import describe_graph

    path = tmp_path / 'tuned.yaml'
    rc = equimus(
        [
            'tune',
            'pid',
            '--duration',
            '1.5',
            '--local-evals',
            '2',
            '--generations',
            '0',
            '--out',
            str(path),
        ]
    )
    assert rc == 0 and path.is_file()
    split = {
        s.name: s for s in describe_graph('sim', {'params_file': str(path), 'composed': 'false'})
    }
    assert split['controller'].parameter_files[-1] == str(path)  # applied after the defaults
    (composed,) = describe_graph('sim', {'params_file': str(path)})
    assert composed.parameter_files[-1] == str(path)  # after control.yaml, which it overrides
    fused = describe_graph('hardware', {'params_file': str(path), 'fused_loop': 'true'})
    assert next(s for s in fused if s.name == 'control_loop').parameter_files[-1] == str(path)


def test_unknown_task_exits_2_with_the_choices(capsys):
    try:
        rc = equimus(['tune', 'pid', '--task', 'dance'])
    except SystemExit as exc:  # argparse's choices
        rc = exc.code
    assert rc == 2
    assert 'triangle' in capsys.readouterr().err


def test_a_lead_reads_the_references_preview_and_round_trips_through_the_file(tmp_path):
    """adapt's retune keeps the best lead (equimus_bringup.adapt.with_lead): with one, the PID
    follows the reference's own future (the closed loop then sends the preview, as the
    reference node does), which changes its error; without one the loop is as before. The
    parameter file carries it."""
    from dataclasses import replace

    from equimus_bringup.adapt import with_lead
    from equimus_learning.tune import Costs, TuneResult

    g = PIDGains()
    plain, _ = closed_loop_rmse(g, 'triangle', 3.0, 0)
    led, vented = closed_loop_rmse(replace(g, lead=0.15), 'triangle', 3.0, 0)
    assert not vented and not np.allclose(plain, led)
    cfg = TuneConfig(duration=3.0)
    cost = float(np.mean(closed_loop_rmse(g, cfg.task, 3.0, cfg.noise_seed, cfg.skip)[0] ** 2))
    lines: list[str] = []
    r = with_lead(TuneResult(g, g, cost, cost, 1, 0.0), Costs(cfg), lines.append)
    assert sum('[tune] lead' in line for line in lines) >= 4, lines
    assert r.cost <= cost
    path = tmp_path / 'led.yaml'
    write_params(path, replace(r, gains=replace(r.gains, lead=0.1)), cfg)
    assert read_gains(path).lead == 0.1


def test_a_delay_margin_scores_gains_at_both_delays():
    """The cost with a margin is the mean of the costs at the measured delay and at that many
    frames more, and later valves cost more: the margin is what the search then pays for."""
    from dataclasses import replace

    from equimus_learning.tune import Costs, gains_cost

    base = TuneConfig(duration=3.0, delay_frames=1)
    gains = PIDGains(kp=(4.5, 2.25), ki=(6.0, 3.0), kd=(0.3, 0.12))
    at_1, at_4 = gains_cost(gains, base), gains_cost(gains, replace(base, delay_frames=4))
    both = gains_cost(gains, replace(base, delay_margin_frames=3))
    assert at_4 > at_1
    assert math.isclose(both, 0.5 * (at_1 + at_4), rel_tol=1e-12), (both, at_1, at_4)
    # the same costs from runs spread over two processes, in the order asked
    other = PIDGains()
    with Costs(replace(base, delay_margin_frames=3, workers=2)) as costs:
        assert costs([gains, other]) == [
            both,
            gains_cost(other, replace(base, delay_margin_frames=3)),
        ]
