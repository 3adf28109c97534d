"""The offset watermark of one partition: what may be committed without skipping unfinished work."""

from __future__ import annotations

from collections import deque


class OffsetWatermark:
    """Tracks registered offsets and which are complete.

    ``committable()`` is the highest offset such that every registered offset below it is
    complete, plus one — the value Kafka expects as a commit. Offsets are registered in
    ascending order (the order a partition delivers them); gaps (compaction, transaction
    markers) are fine. Completed offsets below the watermark are forgotten, so memory is
    bounded by the work in flight.
    """

    __slots__ = ("_order", "_done", "_watermark", "_committed")

    def __init__(self) -> None:
        self._order: deque[int] = deque()  # registered, not yet below the watermark, ascending
        self._done: dict[int, bool] = {}
        self._watermark: int | None = None  # next offset to commit (last contiguous done + 1)
        self._committed: int | None = None

    def register(self, offset: int) -> None:
        if self._order and offset <= self._order[-1]:
            raise ValueError(f"offset {offset} registered after {self._order[-1]}: offsets must ascend")
        if self._watermark is not None and offset < self._watermark:
            raise ValueError(f"offset {offset} is below the watermark {self._watermark}")
        self._order.append(offset)
        self._done[offset] = False

    def complete(self, offset: int) -> None:
        if offset not in self._done:
            raise KeyError(f"offset {offset} was never registered (or is already below the watermark)")
        self._done[offset] = True
        # Advance over the completed prefix right away, so committable() is O(1).
        order, done = self._order, self._done
        while order and done[order[0]]:
            first = order.popleft()
            del done[first]
            self._watermark = first + 1

    def is_tracked(self, offset: int) -> bool:
        return offset in self._done

    def committable(self) -> int | None:
        """The offset to commit now, or None when nothing new is committable."""
        if self._watermark is None or self._watermark == self._committed:
            return None
        return self._watermark

    @property
    def watermark(self) -> int | None:
        return self._watermark

    def acknowledge_commit(self, offset: int) -> None:
        self._committed = offset if self._committed is None else max(self._committed, offset)

    @property
    def committed(self) -> int | None:
        return self._committed

    @property
    def pending_count(self) -> int:
        return len(self._order)

    @property
    def all_done(self) -> bool:
        return not self._order
