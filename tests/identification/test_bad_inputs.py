"""`equimus identify` inputs: any CSV text loads or is refused with one DataError line naming the
file; a damaged bag and a bad leg file end the CLI with exit 2, one line, no output folder.
(Well-formed but degenerate data, e.g. one equilibrium, is the fit's concern, not the loader's.)"""

import math

import numpy as np
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from equimus_description.leg import default_leg_path
from equimus_identification import data
from equimus_identification.cli import main

SETTINGS = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
CELL = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(alphabet=',;"\\n abc-+.eE0123456789', max_size=6),
)


def _identify(capsys, tmp_path, *inputs):
    out = tmp_path / 'fit'
    code = main([*map(str, inputs), '--out', str(out)])
    err = capsys.readouterr().err.strip()
    return code, err, out


@SETTINGS
@given(
    header=st.sampled_from(['P1,P2,theta1,theta2', 'relative_time,pressure1_start', '', 'x']),
    rows=st.lists(st.lists(CELL, min_size=0, max_size=6), max_size=5),
)
def test_malformed_csv(tmp_path, header, rows):
    f = tmp_path / 'StaticPoint_x.csv'
    f.write_text('\n'.join([header, *(','.join(r) for r in rows)]))
    try:
        got = data.load_any([str(f)])
    except data.DataError as exc:
        assert str(exc).count('\n') == 0 and str(f) in str(exc), str(exc)
        return
    for s in got['static']:
        assert np.all(np.isfinite(s.pressures_kpa)) and np.all(np.isfinite(s.q))


def test_damaged_bag_and_bad_leg(capsys, tmp_path):
    bag = tmp_path / 'b'
    bag.mkdir()
    (bag / 'b_0.mcap').write_bytes(b'not an mcap file')
    code, err, out = _identify(capsys, tmp_path, bag)
    assert code == 2 and 'not an MCAP file' in err and err.count('\n') == 0, err
    assert not out.exists()
    leg = tmp_path / 'leg.yaml'
    doc = yaml.safe_load(default_leg_path().read_text())
    doc['bodies']['thigh']['mass'] = math.nan
    leg.write_text(yaml.safe_dump(doc, sort_keys=False))
    code = main([str(bag), '--leg', str(leg), '--out', str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and f'{leg}:' in err and 'bodies.thigh.mass' in err, err
    assert not out.exists()
