"""yamlfile.load reads with libyaml where PyYAML has it: for any text PyYAML's own parser reads,
the same data and key lines; for text it refuses, the same one-line error, unless libyaml reads
it (libyaml, YAML's reference parser, is the more lenient: a block scalar's indicator followed by
a comment, for one)."""

import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from equimus_description import yamlfile

pytestmark = pytest.mark.skipif(
    yamlfile._CLoader is None, reason='PyYAML without libyaml: only its own parser is used'
)

SETTINGS = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def pure(path):
    """What load gives with PyYAML's own parser alone."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(yamlfile, '_CLoader', None)
        return outcome(path)


def outcome(path):
    try:
        data, lines = yamlfile.load(path)
    except yamlfile.YamlFileError as exc:
        return 'error', str(exc)
    return repr(data), lines._lines  # repr: NaN equals itself


def _same(tmp_path, text):
    path = tmp_path / 'f.yaml'
    path.write_text(text, encoding='utf-8')
    got, want = outcome(path), pure(path)
    if want[0] != 'error' or got[0] == 'error':
        assert got == want


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=8),
)
documents = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@SETTINGS
@given(documents, st.booleans())
def test_documents_read_the_same(tmp_path_factory, doc, flow):
    text = yaml.safe_dump(doc, default_flow_style=flow, allow_unicode=True)
    _same(tmp_path_factory.mktemp('doc'), text)


@SETTINGS
@given(st.text(max_size=200))
def test_any_text_reads_or_fails_the_same(tmp_path_factory, text):
    _same(tmp_path_factory.mktemp('text'), text)


def test_the_shipped_leg_reads_the_same_and_fast(tmp_path, monkeypatch):
    from equimus_description.leg import default_leg_path

    path = default_leg_path()
    assert outcome(path) == pure(path)
    data, lines = yamlfile.load(path)
    assert lines.line('actuators.maa.k') > 1 and not math.isnan(lines.line('actuators.maa.k'))
    # libyaml's pass is what load took (PyYAML's parser is not called for a valid file)
    with monkeypatch.context() as m:
        m.setattr(yaml, 'compose', None)
        m.setattr(yaml, 'safe_load', None)
        assert yamlfile.load(path)[0] == data
