"""The run summary on hand-made series: samples without a valid joint state (NaN) are counted
and left out of the errors, never turn them into NaN."""

import math

import numpy as np

from equimus_bringup.run_report import JS, REF, Series, summarize


def _series(n=200, nan_at=()):
    t = np.linspace(0.0, 2.0, n)
    ref = Series(t, np.column_stack([np.sin(t), np.cos(t)]))
    est = np.column_stack([np.sin(t) + 0.01, np.cos(t) - 0.02])
    for i in nan_at:
        est[i] = np.nan
    return {JS: Series(t, est), REF: ref}


def test_a_nan_sample_is_counted_and_left_out_of_the_errors():
    clean = summarize(_series())
    one = summarize(_series(nan_at=[100]))
    assert clean.invalid == {'hip': 0.0, 'knee': 0.0}
    assert math.isclose(one.rmse['hip'], 0.01, rel_tol=1e-6)
    assert math.isclose(one.maxae['knee'], 0.02, rel_tol=1e-6)
    assert math.isclose(one.invalid['hip'], 1 / 200)
    assert 'no valid joint state in 0.5 % of the hip samples' in one.table()
    assert 'no valid joint state' not in clean.table()


def test_no_valid_sample_at_all_is_nan_not_an_error():
    s = summarize(_series(nan_at=range(200)))
    assert math.isnan(s.rmse['hip']) and s.invalid['knee'] == 1.0
