"""Pool slots: how many subprocesses run at once, and who gets the next free slot.

One scheduler is shared by every partition. A slot goes to the waiting task with the lowest
``(priority, slots its partition already holds, when its partition was last served)``, so
equal-priority work is shared round-robin between partitions: a partition flooded with a
10,000-task fan-out cannot starve one that trickles. ``max_per_partition`` caps a partition
outright.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import defaultdict


class SlotScheduler:
    def __init__(self, slots: int, max_per_partition: int | None = None) -> None:
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self.slots = slots
        self.max_per_partition = max_per_partition
        self.free = slots
        self.active: defaultdict[int, int] = defaultdict(int)
        self._waiting: dict[int, list[tuple[int, int, asyncio.Future[None]]]] = {}
        self._last_served: defaultdict[int, int] = defaultdict(int)
        self._seq = itertools.count()
        self._grants = itertools.count(1)
        self.waiting_count = 0

    @property
    def in_use(self) -> int:
        return self.slots - self.free

    def _under_cap(self, partition: int) -> bool:
        return self.max_per_partition is None or self.active[partition] < self.max_per_partition

    async def acquire(self, partition: int, priority: tuple = ()) -> None:
        """Wait for a slot; ``priority`` is a key made by :func:`priority_key` (lower runs first)."""
        if self.free > 0 and not self._waiting and self._under_cap(partition):
            self._grant(partition)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting.setdefault(partition, []), (priority, next(self._seq), fut))
        self.waiting_count += 1
        self._dispatch()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                # Granted in the same tick we were cancelled: hand the slot back.
                self.release(partition)
            raise

    def release(self, partition: int) -> None:
        self.active[partition] -= 1
        if self.active[partition] <= 0:
            del self.active[partition]
        self.free += 1
        self._dispatch()

    def _grant(self, partition: int) -> None:
        self.free -= 1
        self.active[partition] += 1
        self._last_served[partition] = next(self._grants)

    def _dispatch(self) -> None:
        while self.free > 0 and self._waiting:
            best: tuple | None = None
            for partition, heap in list(self._waiting.items()):
                while heap and heap[0][2].done():  # cancelled waiters
                    heapq.heappop(heap)
                    self.waiting_count -= 1
                if not heap:
                    del self._waiting[partition]
                    continue
                if not self._under_cap(partition):
                    continue
                key = (heap[0][0], self.active[partition], self._last_served[partition], heap[0][1])
                if best is None or key < best[0]:
                    best = (key, partition)
            if best is None:
                return
            partition = best[1]
            heap = self._waiting[partition]
            _, _, fut = heapq.heappop(heap)
            if not heap:
                del self._waiting[partition]
            self.waiting_count -= 1
            self._grant(partition)
            fut.set_result(None)


def priority_key(value: object) -> tuple:
    """What ``task_priority`` returned, as a key every other task's key compares with.

    A number, a string, or a tuple/list of them (Drakkar handlers return e.g.
    ``(tier, min(task.source_offsets))``). Each element is ranked by its type first, so keys of
    different shapes (a tuple next to the default 0) still compare instead of raising
    TypeError inside the scheduler. Anything else raises TypeError for the hook door.
    """
    if type(value) is int:  # the common case, and the default
        return ((0, value),)
    items = value if isinstance(value, (tuple, list)) else (value,)
    key = []
    for item in items:
        if isinstance(item, (int, float)):
            key.append((0, item))
        elif isinstance(item, str):
            key.append((1, item))
        else:
            raise TypeError(f"task_priority returned {value!r}; return a number, a string, or a tuple of them")
    return tuple(key)
