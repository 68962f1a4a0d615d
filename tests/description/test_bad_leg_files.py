"""Property: every malformed leg YAML or override file ends in one LegDescriptionError line
`file:line: key: why` (never another exception), and loading writes nothing."""

import copy
import math
import re

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from equimus_description.leg import LegDescriptionError, default_leg_path, load_leg

GOOD = yaml.safe_load(default_leg_path().read_text())
LOCATED = re.compile(r'^(?P<path>[^\n:]+):(?P<line>\d+): (?P<rest>[^\n]+)$')
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

BAD_VALUES = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 0.0, 1e308, 'abc', '', True, None]),
    st.just([]),
    st.just({}),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=7),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.text(max_size=20),
    st.integers(),
)


def _paths(node, prefix=()):
    """Every key path of the document (mappings and list items)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield (*prefix, i)
            yield from _paths(v, (*prefix, i))


PATHS = [p for p in _paths(GOOD) if p[0] != 'parameter_sets']


def _mutate(doc, path, kind, value):
    doc = copy.deepcopy(doc)
    node = doc
    for p in path[:-1]:
        node = node[p]
    if kind == 'delete' and isinstance(node, dict):
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


def _check_located(exc: LegDescriptionError, path) -> None:
    text = str(exc)
    m = LOCATED.match(text)
    assert m, f'not one located line: {text!r}'
    assert m['path'] == str(path), text
    n_lines = len(path.read_text().splitlines()) or 1
    assert 1 <= int(m['line']) <= n_lines + 1, text


@SETTINGS
@given(
    path=st.sampled_from(PATHS),
    kind=st.sampled_from(['delete', 'replace']),
    value=BAD_VALUES,
)
def test_malformed_leg_yaml_is_one_located_line(tmp_path, path, kind, value):
    f = tmp_path / 'leg.yaml'
    f.write_text(yaml.safe_dump(_mutate(GOOD, path, kind, value), sort_keys=False))
    before = sorted(tmp_path.iterdir())
    try:
        load_leg(f)
    except LegDescriptionError as exc:
        _check_located(exc, f)
        rest = LOCATED.match(str(exc))['rest']
        # a key of the document (the mutated one, or the one that refers to it)
        assert re.match(r'^[A-Za-z_][\w.]*: ', rest) or rest.startswith('not a leg'), rest
    assert sorted(tmp_path.iterdir()) == before  # nothing written


@SETTINGS
@given(text=st.text(max_size=200))
def test_any_text_as_leg_yaml_is_one_located_line(tmp_path, text):
    f = tmp_path / 'leg.yaml'
    f.write_text(text)
    try:
        load_leg(f)
    except LegDescriptionError as exc:
        _check_located(exc, f)


@SETTINGS
@given(
    key=st.sampled_from(
        ['actuators.maa.k', 'actuators.baa.l0', 'bodies.thigh.mass', 'joints.hip.damping']
    )
    | st.text(max_size=12),
    value=BAD_VALUES,
)
def test_malformed_override_file_names_the_override_file(tmp_path, key, value):
    f = tmp_path / 'fit.yaml'
    f.write_text(yaml.safe_dump({key: value}))
    try:
        load_leg(overrides=f)
    except LegDescriptionError as exc:
        m = LOCATED.match(str(exc))
        assert m and m['path'] in (str(f), str(default_leg_path())), str(exc)


def test_examples_read_as_a_user_would():
    """The messages for three common mistakes, as they are printed."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / 'leg.yaml'
        doc = _mutate(GOOD, ('actuators', 'maa', 'k'), 'replace', 'stiff')
        f.write_text(yaml.safe_dump(doc, sort_keys=False))
        try:
            load_leg(f)
            raise AssertionError('accepted k: stiff')
        except LegDescriptionError as exc:
            text = str(exc)
        line = next(
            i + 1
            for i, s in enumerate(f.read_text().splitlines())
            if s.strip().startswith('k: stiff')
        )
        assert text.startswith(f'{f}:{line}: actuators.maa.k: expected a number'), text
        doc = _mutate(GOOD, ('bodies', 'thigh', 'mass'), 'delete', None)
        f.write_text(yaml.safe_dump(doc, sort_keys=False))
        try:
            load_leg(f)
            raise AssertionError('accepted a body without mass')
        except LegDescriptionError as exc:
            assert "bodies.thigh.mass: missing key 'mass'" in str(exc), str(exc)
        f.write_text('bodies:\n  thigh: [1,\n')
        try:
            load_leg(f)
            raise AssertionError('accepted broken YAML')
        except LegDescriptionError as exc:
            assert str(exc).startswith(f'{f}:3: YAML syntax error'), str(exc)
