"""ROS parameter files: every malformed one is one line naming file, line and key, exit 2, no
traceback and nothing written; checked on the plain checker (property) and on real node
processes (the recorder, which would otherwise create its bag)."""

import math
import re
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from equimus_ros import paramfiles

REPO_CONFIG = __import__('pathlib').Path(__file__).resolve().parents[2] / 'config'
FILES = sorted(p.name for p in REPO_CONFIG.glob('*.yaml') if p.name not in ('leg.yaml',))
ROS_FILES = [f for f in FILES if 'ros__parameters' in (REPO_CONFIG / f).read_text()]
LOCATED = re.compile(r'^(?P<path>[^\n:]+):(?P<line>\d+): [^\n]+$')
SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
VALUES = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, None, '', 'abc', True, 1e308, -1]),
    st.lists(st.one_of(st.floats(), st.text(max_size=3), st.booleans()), max_size=4),
    st.lists(st.lists(st.integers(), max_size=2), min_size=1, max_size=2),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def test_the_shipped_parameter_files_pass():
    assert ROS_FILES
    for f in ROS_FILES:
        paramfiles.check(str(REPO_CONFIG / f))


@SETTINGS
@given(
    name=st.sampled_from(ROS_FILES),
    data=st.data(),
    value=VALUES,
)
def test_a_mutated_parameter_file_is_accepted_or_one_located_line(tmp_path, name, data, value):
    doc = yaml.safe_load((REPO_CONFIG / name).read_text())
    node = next(iter(doc))
    params = doc[node]['ros__parameters']
    key = data.draw(st.sampled_from(sorted(params)))
    params[key] = value
    f = tmp_path / name
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        paramfiles.check(str(f))
    except paramfiles.ParamFileError as exc:
        m = LOCATED.match(str(exc))
        assert m and m['path'] == str(f), str(exc)
        assert key in str(exc) or 'YAML' in str(exc), str(exc)


@SETTINGS
@given(text=st.text(max_size=200))
def test_any_text_is_accepted_or_one_located_line(tmp_path, text):
    f = tmp_path / 'p.yaml'
    f.write_text(text)
    try:
        paramfiles.check(str(f))
    except paramfiles.ParamFileError as exc:
        assert LOCATED.match(str(exc)), str(exc)


def _recorder(tmp_path, text: str) -> tuple[subprocess.CompletedProcess, str]:
    f = tmp_path / 'recorder.yaml'
    f.write_text(text)
    bag = tmp_path / 'bag'
    proc = subprocess.run(
        [
            sys.executable,
            '-m',
            'equimus_record.recorder_node',
            '--ros-args',
            '--params-file',
            str(f),
            '-p',
            f'bag_path:={bag}',
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc, str(f)


CASES = {
    'syntax': ('recorder:\n  ros__parameters:\n    flush_period: [0.5\n', 4, 'YAML syntax'),
    'nan': ('recorder:\n  ros__parameters:\n    flush_period: .nan\n', 3, 'flush_period'),
    'type': ('recorder:\n  ros__parameters:\n    flush_period: fast\n', 3, 'flush_period'),
    'range': ('recorder:\n  ros__parameters:\n    flush_period: 1000.0\n', 3, 'flush_period'),
    'layout': ('recorder:\n  flush_period: 0.5\n', 2, 'ros__parameters'),
    'mixed': ('recorder:\n  ros__parameters:\n    exclude_topics: [a, 1]\n', 3, 'exclude_topics'),
}


@pytest.mark.parametrize('case', sorted(CASES))
def test_node_with_a_bad_parameter_file_exits_2_with_one_line(tmp_path, case):
    text, line, key = CASES[case]
    proc, path = _recorder(tmp_path, text)
    assert proc.returncode == 2, proc.stderr
    assert 'Traceback' not in proc.stderr, proc.stderr
    lines = [s for s in proc.stderr.splitlines() if s.strip()]
    assert len(lines) == 1, proc.stderr
    assert f'{path}:{line}: ' in lines[0] and key in lines[0], lines[0]
    assert not (tmp_path / 'bag').exists()  # nothing written


def test_a_missing_parameter_file_is_one_line(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            '-m',
            'equimus_record.recorder_node',
            '--ros-args',
            '--params-file',
            str(tmp_path / 'nope.yaml'),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and 'Traceback' not in proc.stderr, proc.stderr
    assert f'{tmp_path / "nope.yaml"}: cannot read' in proc.stderr


# Scalars whose type rcl and PyYAML disagree on, and plain ones: rcl's parser decides what a
# node gets, so `paramfiles.rcl_value` must agree with it (checked against rcl itself here).
SCALARS = [
    '1', '-0', '+5', '010', '08', '0x1F', '1.0', '5.', '.5', '1e3', '1.5e-3', '-2E+2',
    'true', 'True', 'yes', 'Y', 'n', 'off', 'On', 'abc', '~', 'null', '1_000', '1:2',
    "'5'", '"true"', '!!str 7', '9223372036854775807', '9223372036854775808', 'nan', '.inf',
]  # fmt: skip


def test_values_are_typed_as_rcl_types_them(tmp_path):
    import rclpy

    f = tmp_path / 'typed.yaml'
    f.write_text(
        'typed:\n  ros__parameters:\n' + ''.join(f'    p{i}: {v}\n' for i, v in enumerate(SCALARS))
    )
    ctx = rclpy.Context()
    rclpy.init(context=ctx, args=['--ros-args', '--params-file', str(f)])
    try:
        node = rclpy.create_node(
            'typed', context=ctx, automatically_declare_parameters_from_overrides=True
        )
        rcl = {i: node.get_parameter(f'p{i}').value for i in range(len(SCALARS))}
        node.destroy_node()
    finally:
        rclpy.try_shutdown(context=ctx)
    text = f.read_text()
    mapping = yaml.compose(text).value[0][1].value[0][1]  # typed: ros__parameters: {...}
    ours = {i: paramfiles.rcl_value(v, text) for i, (_, v) in enumerate(mapping.value)}
    for i, scalar in enumerate(SCALARS):
        a, b = rcl[i], ours[i]
        same = (type(a), a) == (type(b), b) or (
            isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
        )
        assert same, (scalar, a, b)


@pytest.mark.parametrize(
    ('value', 'why'),
    [('[1, 2.5]', 'mixes double and integer'), ('[]', 'empty list'), ('', 'no value')],
)
def test_what_rcl_cannot_parse_is_one_located_line(tmp_path, value, why):
    f = tmp_path / 'p.yaml'
    f.write_text(f'n:\n  ros__parameters:\n    x: {value}\n')
    with pytest.raises(paramfiles.ParamFileError, match=why) as exc:
        paramfiles.check(str(f))
    assert str(exc.value).startswith(f'{f}:3: x: ')
