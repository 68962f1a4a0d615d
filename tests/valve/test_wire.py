"""The compiled SET encoder (equimus_hw.valve._wire) against its interpreted form,
protocol.encode_set: the same bytes, or the same exception with the same message, on drawn
input; and the link writing its frames through it."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from equimus_description.compiled import ENV
from equimus_hw.valve import protocol as P
from equimus_hw.valve.calibration import ValveCalibration
from equimus_hw.valve.link import BoardLink

from .conftest import make_emulator, wait_for

W = P._wire


def test_this_build_has_the_compiled_encoder():
    """setup.py builds it optionally; here (a C compiler is present) it must be built, or every
    test below would compare the interpreted encoder with itself."""
    assert W is not None
    assert (W.T_SET, W.MAX_CHANNELS) == (P.T_SET, P.MAX_CHANNELS)
    assert P.set_encoder() is W.encode_set
    assert P.set_encoder(False) is P.encode_set


def test_the_environment_picks_the_interpreted_encoder(monkeypatch):
    monkeypatch.setenv(ENV, 'python')
    assert P.set_encoder() is P.encode_set
    assert P.set_encoder(True) is W.encode_set


def _outcome(f, *args):
    try:
        return 'ok', f(*args)
    except Exception as exc:  # noqa: BLE001 - type and message are what is compared
        return 'raised', type(exc), str(exc)


values = st.one_of(
    st.integers(-3, 70_000),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.sampled_from(['7', 'x', None, 2**70]),
)


@settings(max_examples=400, deadline=None)
@given(seq=values, codes=st.lists(values, max_size=10))
@example(seq=0, codes=[0])  # every byte after the type a zero: COBS blocks of one
@example(seq=255, codes=[65535] * 8)
@example(seq=256, codes=[1])
@example(seq=1, codes=[65536])
@example(seq=1, codes=[])
@example(seq=-1, codes=[1, 2])
@example(seq=3.9, codes=[1000.7, 2.2])  # int() truncates in both
def test_compiled_and_interpreted_agree(seq, codes):
    assert _outcome(W.encode_set, seq, codes) == _outcome(P.encode_set, seq, codes)


@settings(max_examples=200, deadline=None)
@given(seq=st.integers(0, 255), codes=st.lists(st.integers(0, 65535), min_size=1, max_size=8))
def test_the_frame_decodes_to_the_set(seq, codes):
    data = W.encode_set(seq, codes)
    assert data.endswith(b'\x00') and b'\x00' not in data[:-1]
    assert P.decode_payload(P.cobs_decode(data[:-1])) == P.Set(seq, tuple(codes))


@pytest.mark.parametrize('form', ['compiled', 'python'])
def test_the_link_writes_its_sets_through_the_encoder(form, monkeypatch, tmp_path):
    """Over the board emulator's real pseudo-terminal: the link's SET frames, encoded by either
    form, reach the board, which outputs their codes; a vent is confirmed."""
    if form == 'python':
        monkeypatch.setenv(ENV, 'python')
    want = P.encode_set if form == 'python' else W.encode_set
    cal = ValveCalibration()
    emu = make_emulator(tmp_path)
    link = BoardLink(emu.link, 2, cal)
    try:
        assert link.encode_set is want and link.set_encoder == form
        link.start()
        assert wait_for(lambda: link.connected, 5.0), link.last_error
        codes = [cal.kpa_to_code(20.0), cal.kpa_to_code(35.0)]
        assert link.send_codes(codes) is not None
        assert wait_for(lambda: emu.codes == codes, 2.0), (emu.codes, codes)
        assert link.rehearse(codes) == want(0, codes)
        with pytest.raises(ValueError, match='outside 0..65535'):
            link.send_codes([70_000, 0])
        assert link.vent_and_close(1.0)
        assert emu.codes == [0, 0]
    finally:
        link.vent_and_close(0.0)
        emu.close()
