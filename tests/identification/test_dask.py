"""The population evaluation on a Dask LocalCluster gives the same fit as the process pool and
the serial map for the same seed (the cluster path of `--mapper dask --scheduler tcp://...`)."""

import numpy as np
import pytest

from equimus_description.leg import load_leg
from equimus_identification import data
from equimus_identification import dynamic as D
from equimus_identification.parallel import Mapper

pytest.importorskip(
    'dask.distributed', reason='optional extra: pip install "dask[distributed]" (scripts/setup.sh)'
)

TOCENTER = 'data/equimus/physical/dynamic/ToCenter_2025-02-20_21-06-20_A2B_data.csv'
NAMES = ['actuators.maa.k', 'actuators.baa.k', 'joints.hip.damping']


def _fit(ev, x0, mapper):
    return D.fit(ev, popsize=3, maxiter=3, workers=mapper, seed=7, refine='', x0=x0, log=print)


def test_local_cluster_matches_process_pool_and_serial(shared_dir):
    exps = [e.head(1.0) for e in data.load_tocenter(shared_dir / TOCENTER)[:3]]
    leg = load_leg(parameter_set='table_v_dynamic')
    ev = D.Evaluator(exps, NAMES, leg=leg, loss='shooting')
    x0 = [D.leg_value(leg, n) for n in NAMES]
    with Mapper('serial') as m:
        serial = _fit(ev, x0, m)
    with Mapper('process', workers=2) as m:
        pool = _fit(ev, x0, m)
    with Mapper('dask', workers=2) as m:
        assert m._client is not None and len(m._client.scheduler_info()['workers']) == 2
        cluster = _fit(ev, x0, m)
    assert cluster.generations == pool.generations == 3
    np.testing.assert_array_equal(cluster.x, pool.x)
    np.testing.assert_array_equal(cluster.x, serial.x)
    assert cluster.loss == pool.loss
    assert cluster.loss < ev(ev.to_unit(x0))  # it did optimise
