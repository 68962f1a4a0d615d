"""/valve/pressure stamps stay in order when a read-back's arrival was noted late, and follow
the clock when it is set back (valve_driver.ordered_stamp_ns)."""

from hypothesis import given
from hypothesis import strategies as st

from equimus_hw.valve.driver_node import MAX_HELD_BACK_S, ordered_stamp_ns

S = 1_000_000_000
LAST = 1_700_000_000 * S


def test_a_read_back_noted_late_does_not_put_the_next_before_it():
    assert ordered_stamp_ns(LAST - 8_000_000, LAST) == LAST  # 8 ms behind: held
    assert ordered_stamp_ns(LAST + 8_000_000, LAST) == LAST + 8_000_000  # in order: as it is
    assert ordered_stamp_ns(LAST, LAST) == LAST


def test_a_clock_set_back_is_followed_not_held():
    back = LAST - int(2 * MAX_HELD_BACK_S * S)
    assert ordered_stamp_ns(back, LAST) == back
    assert ordered_stamp_ns(5 * S, 0) == 5 * S  # the first read-back


@given(st.lists(st.integers(0, int(0.4 * S)), min_size=2, max_size=200))
def test_read_backs_noted_up_to_0_4_s_late_give_stamps_that_never_go_back(lateness):
    """Read-backs every 8 ms, each stamped late by up to 0.4 s (less than MAX_HELD_BACK_S)."""
    last, out = 0, []
    for k, late in enumerate(lateness):
        last = ordered_stamp_ns(LAST + k * 8_000_000 + late, last)
        out.append(last)
    assert all(b >= a for a, b in zip(out, out[1:], strict=False))
