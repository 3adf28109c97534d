"""Pool slots: how many subprocesses run at once, and who gets the next free slot.

One scheduler is shared by every partition. A slot goes to the waiting task with the lowest
``(priority, slots its partition already holds, when its partition was last served)``, so
equal-priority work is shared round-robin between partitions: a partition flooded with a
10,000-task fan-out cannot starve one that trickles. ``max_per_partition`` caps a partition
outright.

**Held places.** A task the native runner will spawn may also be granted a *held* place when
no slot is free (up to ``held`` of them): the runner queues it and starts it the moment a
running task ends, passing that task's slot on without a round trip through the event loop
(native.py, runner.c). The runner's event for each task says what became of its slot
(``settle``): free again, passed to the next held task, or none (a held task that left the
queue unstarted). Held places go in the same order as slots, and a task that cannot be held
(a persistent program's) at the head of the order stops further held grants, so the held tasks
drain and it gets the next free slot.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import defaultdict
from collections.abc import Callable
from typing import Protocol


class Waiter(Protocol):
    """What waits for a slot: an asyncio future, or anything answering the same two calls."""

    def done(self) -> bool: ...

    def set_result(self, held: bool) -> None: ...


class SlotScheduler:
    def __init__(self, slots: int, max_per_partition: int | None = None, held: int = 0) -> None:
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self.slots = slots
        self.max_per_partition = max_per_partition
        self.free = slots
        self.held_max = held
        self.held = 0  # held places granted and not yet settled
        self.pass_slot: Callable[[], bool] | None = None  # the runner's: a free slot to its first held task
        self.active: defaultdict[int, int] = defaultdict(int)
        self._waiting: dict[int, list[tuple[tuple, int, Waiter, bool]]] = {}  # heaps by partition, none empty
        self._last_served: defaultdict[int, int] = defaultdict(int)
        self._seq = itertools.count()
        self._grants = itertools.count(1)
        self.waiting_count = 0
        self._waiting_holdable = 0  # waiters that may take a held place
        # Called when a release leaves a slot free that no task waits for (the worker's flow control:
        # a hold ends rather than leave it idle).
        self.on_free_slot: Callable[[], None] | None = None

    @property
    def in_use(self) -> int:
        return self.slots - self.free

    @property
    def idle_slot(self) -> bool:
        """A slot is free and no task waits for one."""
        return self.free > 0 and not self._waiting

    def _under_cap(self, partition: int) -> bool:
        return self.max_per_partition is None or self.active[partition] < self.max_per_partition

    async def acquire(self, partition: int, priority: tuple = (), can_hold: bool = False) -> bool:
        """Wait for a slot, or (``can_hold``) a held place; True for a held place.

        ``priority`` is a key made by :func:`priority_key` (lower runs first).
        """
        if self.take(partition):
            return False
        if can_hold and self.take_held(partition):
            return True
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.wait(partition, priority, fut, can_hold)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                # Granted in the same tick we were cancelled: hand the slot (or place) back.
                self.give_back(partition, fut.result())
            raise

    def take(self, partition: int) -> bool:
        """A slot at once, if one is free and no task waits before this one (else wait for it)."""
        if not self._waiting and self.free > 0 and self._under_cap(partition):
            self._grant(partition)
            return True
        return False

    def take_held(self, partition: int) -> bool:
        """A held place at once, if no task waits and not all of them are granted (call after ``take``)."""
        if not self._waiting and self.held < self.held_max and self._under_cap(partition):
            self._grant(partition, held=True)
            return True
        return False

    def wait(self, partition: int, priority: tuple, waiter: Waiter, can_hold: bool = False) -> None:
        """Queue ``waiter`` for a slot (or, ``can_hold``, a held place) in priority order: its
        ``set_result(held)`` is called when it has one, unless it is ``done()`` by then (given up)."""
        heapq.heappush(self._waiting.setdefault(partition, []), (priority, next(self._seq), waiter, can_hold))
        self.waiting_count += 1
        self._waiting_holdable += can_hold
        self._dispatch()

    def release(self, partition: int) -> None:
        """A slot's task has ended: the slot is free."""
        self._leave(partition)
        self.free += 1
        self._dispatch()
        if self.on_free_slot is not None and self.idle_slot:
            self.on_free_slot()

    def give_back(self, partition: int, held: bool) -> None:
        """A grant ends without a running task's slot passing on: a slot is free again, or (``held``)
        one held place fewer is granted. Also for a grant the runner never got (the task ended before
        it was submitted)."""
        if held:
            self._leave(partition)
            self.held -= 1
            self._dispatch()
        else:
            self.release(partition)

    def settle(self, partition: int, slot: int) -> None:
        """What the runner's event says became of a task's slot (native.SLOT_*: freed, passed, none).

        Freed, the slot is free again; passed (a held task has it now) or none (a held task left
        unstarted), one held place fewer is granted: the same as giving a held place back."""
        self.give_back(partition, held=slot != 0)  # 0: SLOT_FREED

    def take_free(self) -> bool:
        """A held place becomes a slot, if one is free (a task about to go to the runner needs not wait)."""
        if self.free > 0 and self.held > 0:
            self.free -= 1
            self.held -= 1
            return True
        return False

    def _leave(self, partition: int) -> None:
        self.active[partition] -= 1
        if self.active[partition] <= 0:
            del self.active[partition]

    def _grant(self, partition: int, held: bool = False) -> None:
        if held:
            self.held += 1
        else:
            self.free -= 1
        self.active[partition] += 1
        self._last_served[partition] = next(self._grants)

    def _dispatch(self) -> None:
        while self.free > 0 and self.held > 0 and self.pass_slot is not None and self.pass_slot():
            self.free -= 1  # the runner's first held task has it now
            self.held -= 1
        waiting, cap = self._waiting, self.max_per_partition
        while waiting and (self.free > 0 or (self.held < self.held_max and self._waiting_holdable)):
            if len(waiting) == 1:  # the only partition waiting (most often): no order to find
                [(partition, heap)] = waiting.items()
                if heap[0][2].done() and not self._still_waiting(partition, heap):
                    continue
                if cap is not None and self.active[partition] >= cap:  # (_under_cap, without its call)
                    return
            else:
                best = self._first_in_order()
                if best is None:
                    return
                partition, heap = best, waiting[best]
            held = self.free == 0
            if held and not heap[0][3]:
                return  # it needs a slot: no more held places until one is free
            _, _, fut, can_hold = heapq.heappop(heap)
            if not heap:
                del waiting[partition]
            self.waiting_count -= 1
            self._waiting_holdable -= can_hold
            self._grant(partition, held)
            fut.set_result(held)

    def _first_in_order(self) -> int | None:
        """The partition whose first waiter is next in the order (None: every one left is at its cap),
        dropping the waiters that gave up (and the partitions left with none) on the way."""
        best: int | None = None
        best_key: tuple = ()
        for partition, heap in list(self._waiting.items()):
            if heap[0][2].done() and not self._still_waiting(partition, heap):
                continue
            if not self._under_cap(partition):
                continue
            key = (heap[0][0], self.active[partition], self._last_served[partition], heap[0][1])
            if best is None or key < best_key:
                best, best_key = partition, key
        return best

    def _still_waiting(self, partition: int, heap: list) -> bool:
        """Drop the waiters at the head of ``partition``'s heap that gave up (are done) before their grant;
        False, and the partition leaves the queue, when none is left."""
        while heap and heap[0][2].done():
            self._waiting_holdable -= heapq.heappop(heap)[3]
            self.waiting_count -= 1
        if heap:
            return True
        del self._waiting[partition]
        return False


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
