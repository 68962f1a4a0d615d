"""yamlfile.load reads with libyaml where PyYAML has it: for any text PyYAML's own parser reads,
the same data and key lines; for text it refuses, the same one-line error, unless libyaml reads
it (libyaml, YAML's reference parser, is the more lenient: a block scalar's indicator followed by
a comment, for one)."""

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


@pytest.fixture(scope='module')
def path(tmp_path_factory):
    """One file, written again for every example."""
    return tmp_path_factory.mktemp('yamlfile') / 'f.yaml'


def _same(path, text):
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
def test_documents_read_the_same(path, doc, flow):
    text = yaml.safe_dump(doc, default_flow_style=flow, allow_unicode=True)
    _same(path, text)


@SETTINGS
@given(st.text(max_size=200))
def test_any_text_reads_or_fails_the_same(path, text):
    _same(path, text)


def test_the_shipped_leg_reads_the_same_and_fast(monkeypatch):
    from equimus_description.leg import default_leg_path

    leg = default_leg_path()
    assert outcome(leg) == pure(leg)
    data, lines = yamlfile.load(leg)
    assert lines.line('actuators.maa.k') > 1  # the key's own line, not the file's first
    # libyaml's pass is what load took (PyYAML's parser is not called for a valid file)
    with monkeypatch.context() as m:
        m.setattr(yaml, 'compose', None)
        m.setattr(yaml, 'safe_load', None)
        assert yamlfile.load(leg)[0] == data
