"""A poll's messages reach each partition's processor as one batch, in the order they were polled."""

from __future__ import annotations

from knarr.api.messages import SourceMessage, by_partition


def message(partition: int, offset: int) -> SourceMessage:
    return SourceMessage(topic="in", partition=partition, offset=offset, value=b"{}")


def test_a_poll_across_partitions_is_split_per_partition_each_in_poll_order():
    polled = [message(1, 10), message(0, 5), message(1, 11), message(2, 7), message(0, 6), message(1, 12)]
    parts = by_partition(polled)
    assert {p: [m.offset for m in msgs] for p, msgs in parts.items()} == {1: [10, 11, 12], 0: [5, 6], 2: [7]}


def test_an_empty_poll_gives_no_batches():
    assert by_partition([]) == {}
