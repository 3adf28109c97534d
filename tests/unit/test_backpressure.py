"""Which partitions backpressure pauses: heavy ones, with hysteresis, and memory stays bounded."""

from hypothesis import given
from hypothesis import strategies as st

from knarr.engine.backpressure import paused_partitions

HIGH, LOW = 128, 16


def test_nothing_pauses_below_the_high_watermark():
    assert paused_partitions({0: 60, 1: 60}, set(), HIGH, LOW) == set()


def test_a_single_partition_pauses_at_the_high_watermark_and_resumes_at_the_low_one():
    assert paused_partitions({0: 128}, set(), HIGH, LOW) == {0}
    assert paused_partitions({0: 50}, {0}, HIGH, LOW) == {0}  # hysteresis: still above low
    assert paused_partitions({0: 16}, {0}, HIGH, LOW) == set()


def test_a_flooded_partition_is_paused_while_a_trickling_one_keeps_flowing():
    assert paused_partitions({0: 10_000, 1: 1}, set(), HIGH, LOW) == {0}


def test_evenly_loaded_partitions_all_pause_together():
    assert paused_partitions({0: 40, 1: 40, 2: 40, 3: 40}, set(), HIGH, LOW) == {0, 1, 2, 3}


def test_a_paused_partition_that_drained_resumes_even_if_another_is_still_heavy():
    assert paused_partitions({0: 10_000, 1: 2}, {0, 1}, HIGH, LOW) == {0}


@given(st.lists(st.integers(0, 400), min_size=1, max_size=8), st.integers(0, 2**8 - 1))
def test_every_partition_left_running_is_light_or_the_worker_is_under_its_watermark(loads, mask):
    by_partition = dict(enumerate(loads))
    before = {p for p in by_partition if mask >> p & 1}
    paused = paused_partitions(by_partition, before, HIGH, LOW)
    total, n = sum(loads), len(loads)
    for p, load in by_partition.items():
        if p in paused:
            continue
        if p in before:  # resumed: the worker drained, or this partition did
            assert total <= LOW or load <= max(1, LOW // n)
        else:  # never paused: the worker is under the watermark, or this partition is light
            assert total < HIGH or load < max(1, HIGH // n)
    # So what keeps flowing is bounded whatever the lag: paused partitions stop growing and the
    # others together add less than the high watermark.
