"""The offset watermark: never commits past unfinished work; reaches the end once all is done."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knarr.engine.watermark import OffsetWatermark


def test_nothing_is_committable_before_anything_completes():
    wm = OffsetWatermark()
    wm.register(10)
    assert wm.committable() is None


def test_the_watermark_stops_at_the_first_incomplete_offset():
    wm = OffsetWatermark()
    for o in range(10, 15):
        wm.register(o)
    for o in (10, 11, 12, 14):
        wm.complete(o)
    assert wm.committable() == 13


def test_a_committed_watermark_is_not_offered_again():
    wm = OffsetWatermark()
    wm.register(0)
    wm.complete(0)
    assert wm.committable() == 1
    wm.acknowledge_commit(1)
    assert wm.committable() is None


def test_gaps_between_offsets_do_not_block_the_watermark():
    wm = OffsetWatermark()
    for o in (5, 9, 20):
        wm.register(o)
    for o in (5, 9, 20):
        wm.complete(o)
    assert wm.committable() == 21


def test_offsets_must_be_registered_in_ascending_order():
    wm = OffsetWatermark()
    wm.register(3)
    with pytest.raises(ValueError, match="must ascend"):
        wm.register(2)


def test_completing_an_unknown_offset_is_an_error():
    with pytest.raises(KeyError):
        OffsetWatermark().complete(7)


@given(
    st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=60),
    st.randoms(use_true_random=False),
)
def test_the_committed_offset_never_passes_an_incomplete_one(gaps, rnd):
    offsets, o = [], 100
    for g in gaps:
        o += g
        offsets.append(o)
    wm = OffsetWatermark()
    for off in offsets:
        wm.register(off)
    order = offsets[:]
    rnd.shuffle(order)
    done: set[int] = set()
    for off in order:
        wm.complete(off)
        done.add(off)
        c = wm.committable()
        if c is not None:
            assert all(x in done for x in offsets if x < c), "committed past an incomplete offset"
            wm.acknowledge_commit(c)
    assert wm.watermark == offsets[-1] + 1
    assert wm.all_done
