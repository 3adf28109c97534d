"""Backfill planning and range resolution: pure functions, checked by properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knarr_spark.job import task_attempts
from knarr_spark.planning import ChunkIndex, PartitionRange, plan_chunks
from knarr_spark.progress import retries_text
from knarr_spark.ranges import RangeError, parse_offsets, parse_timestamp, ranges_from_offsets, ranges_from_times

pytestmark = pytest.mark.spark


@st.composite
def partition_ranges(draw: st.DrawFn) -> list[PartitionRange]:
    partitions = draw(st.lists(st.integers(0, 50), unique=True, max_size=6))
    out = []
    for p in partitions:
        start = draw(st.integers(0, 10_000))
        out.append(PartitionRange(p, start, start + draw(st.integers(0, 400))))
    return out


chunk_sizes = st.integers(1, 120)


@given(partition_ranges(), chunk_sizes)
def test_chunks_cover_every_offset_of_every_range_exactly_once(ranges, chunk_size):
    chunks = plan_chunks(ranges, chunk_size)
    covered = [(c.partition, o) for c in chunks for o in range(c.start, c.end)]
    wanted = [(r.partition, o) for r in ranges for o in range(r.start, r.end)]
    assert len(covered) == len(set(covered))  # disjoint
    assert sorted(covered) == sorted(wanted)  # nothing left out, nothing added


@given(partition_ranges(), chunk_sizes)
def test_no_chunk_is_empty_or_larger_than_the_chunk_size(ranges, chunk_size):
    for chunk in plan_chunks(ranges, chunk_size):
        assert 1 <= chunk.size <= chunk_size


@given(partition_ranges(), chunk_sizes)
def test_a_partitions_chunks_are_contiguous_and_in_offset_order(ranges, chunk_size):
    chunks = plan_chunks(ranges, chunk_size)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for r in ranges:
        mine = [c for c in chunks if c.partition == r.partition]
        if r.size == 0:
            assert mine == []
            continue
        assert mine[0].start == r.start and mine[-1].end == r.end
        assert all(a.end == b.start for a, b in zip(mine, mine[1:], strict=False))


@given(partition_ranges(), chunk_sizes)
def test_a_partition_is_split_into_the_fewest_chunks_of_near_equal_size(ranges, chunk_size):
    chunks = plan_chunks(ranges, chunk_size)
    for r in ranges:
        sizes = [c.size for c in chunks if c.partition == r.partition]
        assert len(sizes) == -(-r.size // chunk_size)
        assert not sizes or max(sizes) - min(sizes) <= 1


@given(partition_ranges(), chunk_sizes, st.data())
def test_every_offset_is_located_in_the_chunk_that_holds_it(ranges, chunk_size, data):
    chunks = plan_chunks(ranges, chunk_size)
    index = ChunkIndex(chunks)
    for chunk in chunks:
        offset = data.draw(st.integers(chunk.start, chunk.end - 1))
        assert index.locate(chunk.partition, offset) == chunk
    for r in ranges:
        assert index.locate(r.partition, r.end) is None
        assert index.locate(r.partition, r.start - 1) is None if r.start > 0 else True
    assert index.locate(999, 0) is None


def test_overlapping_ranges_of_one_partition_are_refused():
    with pytest.raises(ValueError, match="partition 1: ranges .* overlap"):
        plan_chunks([PartitionRange(1, 0, 10), PartitionRange(1, 5, 20)], 4)


def test_offsets_are_parsed_as_the_operator_writes_them():
    assert parse_offsets("0:100,1:250, 2:0", "--from-offsets") == {0: 100, 1: 250, 2: 0}
    with pytest.raises(RangeError, match="'0=100' is not PARTITION:OFFSET"):
        parse_offsets("0=100", "--from-offsets")
    with pytest.raises(RangeError, match="partition 0 is given twice"):
        parse_offsets("0:1,0:2", "--to-offsets")


def test_timestamps_are_rfc3339_or_epoch_millis_and_empty_means_now():
    assert parse_timestamp("2026-11-01T00:00:00Z", "--from-timestamp") == 1_793_491_200_000
    assert parse_timestamp("2026-11-01T01:00:00+01:00", "--from-timestamp") == 1_793_491_200_000
    assert parse_timestamp("1793491200000", "--from-timestamp") == 1_793_491_200_000
    assert parse_timestamp("", "--to-timestamp") is None
    with pytest.raises(RangeError, match="not an RFC 3339 time"):
        parse_timestamp("yesterday", "--from-timestamp")


def test_offset_ranges_are_checked_against_the_log_and_deleted_offsets_are_skipped_with_a_warning():
    marks = {0: (10, 100), 1: (0, 50)}
    ranges, warnings = ranges_from_offsets({0: 0, 1: 5}, {0: 40, 1: 50}, marks)
    assert ranges == [PartitionRange(0, 10, 40), PartitionRange(1, 5, 50)]
    assert warnings == ["partition 0: offsets 0..9 were already deleted by retention; starting at 10"]
    with pytest.raises(RangeError, match="past the end of the log"):
        ranges_from_offsets({1: 0}, {1: 51}, marks)
    with pytest.raises(RangeError, match=r"partition\(s\) \[1\] appear in only one"):
        ranges_from_offsets({0: 0, 1: 0}, {0: 5}, marks)
    with pytest.raises(RangeError, match="partition 7 does not exist"):
        ranges_from_offsets({7: 0}, {7: 1}, marks)


def test_time_ranges_take_the_logs_end_where_the_broker_has_no_later_message():
    marks = {0: (0, 100), 1: (0, 30), 2: (0, 0)}
    ranges = ranges_from_times({0: 20, 1: -1, 2: -1}, {0: 60, 1: -1, 2: None}, marks)
    assert ranges == [PartitionRange(0, 20, 60), PartitionRange(1, 30, 30), PartitionRange(2, 0, 0)]
    assert ranges_from_times({0: 20}, {0: None}, {0: (0, 100)}) == [PartitionRange(0, 20, 100)]


def test_spark_retries_a_task_as_often_as_the_master_or_max_failures_say():
    assert task_attempts("local[2]", "8") == 1
    assert task_attempts("local[2,3]", None) == 3
    assert task_attempts("local[*, 2]", None) == 2
    assert task_attempts("k8s://https://kubernetes", "6") == 6
    assert task_attempts("spark://host:7077", None) == 4


def test_the_progress_bar_mentions_retried_attempts_only_when_there_were_some():
    assert retries_text(0) == ""
    assert retries_text(2) == "2 failed attempt(s), retried"
