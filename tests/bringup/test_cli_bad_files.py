"""`equimus launch` checks the files the graph will read before starting anything: a bad leg
override or parameter file is one line naming file, line and key, exit 2, and no bag is made."""

import math
import re
import shutil
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from equimus_bringup import cli
from equimus_bringup.graph import default_config_dir as _config_dir

CONFIG = Path(_config_dir())
SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
POSITIVE_KEYS = [
    f'actuators.{a}.{k}' for a in ('maa', 'baa') for k in ('m', 'l0', 'k', 'c', 'area')
] + [f'bodies.{b}.mass' for b in ('thigh', 'calf')]
INVALID = st.sampled_from([math.nan, math.inf, -math.inf, 'abc', None, [], {}, [1.0, 2.0], -1.0])
ONE_LINE = re.compile(r'^equimus: (?P<path>[^\n:]+):(?P<line>\d+): (?P<key>[\w.]+): [^\n]+$')


def _launch(capsys, tmp_path, *assignments):
    bag = tmp_path / 'bag'
    code = cli.main(['launch', 'sim', 'record:=true', f'bag:={bag}', *assignments])
    err = capsys.readouterr().err.strip()
    assert not bag.exists()  # nothing written
    return code, err


@SETTINGS
@given(key=st.sampled_from(POSITIVE_KEYS), value=INVALID, nested=st.booleans())
def test_bad_leg_override(capsys, tmp_path, key, value, nested):
    f = tmp_path / 'fit.yaml'
    doc = {key: value}
    if nested:
        a, b, c = key.split('.')
        doc = {a: {b: {c: value}}}
    f.write_text(yaml.safe_dump(doc))
    code, err = _launch(capsys, tmp_path, f'leg_overrides:={f}')
    assert code == 2, err
    m = ONE_LINE.match(err)
    assert m and m['path'] == str(f) and m['key'] == key, err


@SETTINGS
@given(
    node_file=st.sampled_from(['valve.yaml', 'recorder.yaml', 'control.yaml']),
    value=st.sampled_from([math.nan, math.inf, [1, 'a'], [[1]]]),
)
def test_bad_parameter_file(capsys, tmp_path, node_file, value):
    cfg = tmp_path / 'cfg'
    if not cfg.exists():
        shutil.copytree(CONFIG, cfg)
    doc = yaml.safe_load((CONFIG / node_file).read_text())
    params = doc[next(iter(doc))]['ros__parameters']
    key = sorted(params)[0]
    params[key] = value
    (cfg / node_file).write_text(yaml.safe_dump(doc))
    code, err = _launch(capsys, tmp_path, f'config_dir:={cfg}')
    assert code == 2, err
    m = ONE_LINE.match(err)
    assert m and m['path'] == str(cfg / node_file) and m['key'] == key, err
    shutil.copy(CONFIG / node_file, cfg / node_file)
