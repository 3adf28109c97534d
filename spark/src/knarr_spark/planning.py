"""Backfill planning: which chunk of which partition each Spark task processes. Pure.

A backfill covers, per partition, a half-open offset range ``[start, end)``. Each range
becomes one or more chunks of at most ``chunk_size`` offsets; one chunk is one Spark task,
processed in offset order by one in-task worker, and retried as a whole if that task fails.
Long partitions are split into chunks of near-equal size, so the last chunk of a
partition is not a straggler of a few messages while the others are full.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class PartitionRange:
    """The offsets ``[start, end)`` of one partition that the backfill covers."""

    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.partition < 0:
            raise ValueError(f"partition {self.partition} is negative")
        if self.start < 0 or self.end < self.start:
            raise ValueError(
                f"partition {self.partition}: range [{self.start}, {self.end}) is not valid; "
                "the start must be >= 0 and not after the end"
            )

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, order=True)
class Chunk:
    """One Spark task's share: offsets ``[start, end)`` of one partition, processed in order."""

    partition: int
    start: int
    end: int
    index: int = 0  # position in the plan; the Spark partition that processes it

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def label(self) -> str:
        return f"partition {self.partition} [{self.start}, {self.end})"


def plan_chunks(ranges: Iterable[PartitionRange], chunk_size: int) -> list[Chunk]:
    """Split every range into chunks of at most ``chunk_size`` offsets, covering each offset once.

    Chunks come partition by partition, in offset order; their ``index`` is their position.
    Empty ranges give no chunk. Two ranges of the same partition must not overlap.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
    ordered = sorted(r for r in ranges if r.size > 0)
    for before, after in zip(ordered, ordered[1:], strict=False):
        if before.partition == after.partition and after.start < before.end:
            raise ValueError(f"partition {before.partition}: ranges [{before.start}, {before.end}) and "
                             f"[{after.start}, {after.end}) overlap; give each offset once")
    chunks: list[Chunk] = []
    for r in ordered:
        count = -(-r.size // chunk_size)  # ceil
        base, extra = divmod(r.size, count)
        start = r.start
        for i in range(count):
            end = start + base + (1 if i < extra else 0)
            chunks.append(Chunk(r.partition, start, end, len(chunks)))
            start = end
    return chunks


class ChunkIndex:
    """Finds the chunk an offset belongs to (for inputs read as a whole, like files)."""

    def __init__(self, chunks: Iterable[Chunk]) -> None:
        self._starts: dict[int, list[int]] = {}
        self._chunks: dict[int, list[Chunk]] = {}
        for chunk in sorted(chunks):
            self._starts.setdefault(chunk.partition, []).append(chunk.start)
            self._chunks.setdefault(chunk.partition, []).append(chunk)

    def locate(self, partition: int, offset: int) -> Chunk | None:
        """The chunk holding ``offset`` of ``partition``, or None if the plan does not cover it."""
        starts = self._starts.get(partition)
        if not starts:
            return None
        i = bisect.bisect_right(starts, offset) - 1
        if i < 0:
            return None
        chunk = self._chunks[partition][i]
        return chunk if offset < chunk.end else None
