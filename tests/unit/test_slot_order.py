"""Who gets a freed slot: the scheduler's order between partitions, on its own (no loop, no processes)."""

from __future__ import annotations

from knarr.engine.scheduling import SlotScheduler, priority_key


class Waiter:
    """A task waiting for a slot, as the direct path's tasks wait: it records when it got one."""

    def __init__(self, name: str, granted: list[str]) -> None:
        self.name, self.granted, self.given_up = name, granted, False

    def done(self) -> bool:
        return self.given_up

    def set_result(self, held: bool) -> None:
        self.granted.append(self.name)


def queue(scheduler: SlotScheduler, granted: list[str], partition: int, names: str, priority: int = 0) -> list[Waiter]:
    waiters = [Waiter(name, granted) for name in names]
    for waiter in waiters:
        scheduler.wait(partition, priority_key(priority), waiter)
    return waiters


def test_equal_priority_slots_go_round_robin_between_the_waiting_partitions():
    scheduler, granted = SlotScheduler(1), []
    assert scheduler.take(2)  # a third partition holds the one slot
    queue(scheduler, granted, 0, "abc")
    queue(scheduler, granted, 1, "xyz")
    scheduler.release(2)
    while len(granted) < 6:  # each task ends in turn, freeing its partition's slot
        scheduler.release(0 if granted[-1] in "abc" else 1)
    assert granted == ["a", "x", "b", "y", "c", "z"]


def test_a_partition_holding_fewer_slots_goes_first():
    scheduler, granted = SlotScheduler(2), []
    assert scheduler.take(0) and scheduler.take(0)
    queue(scheduler, granted, 0, "a")
    queue(scheduler, granted, 1, "x")
    scheduler.release(0)
    assert granted == ["x"]


def test_a_lower_priority_goes_first_whatever_partition_it_waits_in():
    scheduler, granted = SlotScheduler(1), []
    assert scheduler.take(2)
    queue(scheduler, granted, 0, "ab", priority=5)
    queue(scheduler, granted, 1, "x", priority=1)
    for partition in (2, 1, 0):
        scheduler.release(partition)
    assert granted == ["x", "a", "b"]


def test_a_partition_at_its_cap_is_passed_over_and_alone_it_waits_for_its_own_slot():
    scheduler, granted = SlotScheduler(3, max_per_partition=1), []
    assert scheduler.take(0)
    queue(scheduler, granted, 0, "ab")
    assert granted == [] and scheduler.free == 2  # free slots, but partition 0 holds its one
    queue(scheduler, granted, 1, "x")
    assert granted == ["x"]
    scheduler.release(0)
    assert granted == ["x", "a"]


def test_a_waiter_that_gave_up_is_skipped_and_its_partition_leaves_the_order():
    scheduler, granted = SlotScheduler(1), []
    assert scheduler.take(2)
    [gone] = queue(scheduler, granted, 0, "a")
    queue(scheduler, granted, 1, "x")
    gone.given_up = True
    scheduler.release(2)
    assert granted == ["x"] and scheduler.waiting_count == 0
    scheduler.release(1)
    assert scheduler.free == 1 and scheduler.idle_slot


def test_alone_in_the_queue_a_partition_skips_its_waiters_that_gave_up_and_leaves_when_none_is_left():
    scheduler, granted = SlotScheduler(1), []
    assert scheduler.take(0)
    first, second, third = queue(scheduler, granted, 0, "abc")
    first.given_up = second.given_up = True
    scheduler.release(0)
    assert granted == ["c"] and scheduler.waiting_count == 0
    [last] = queue(scheduler, granted, 0, "d")
    last.given_up = True
    scheduler.release(0)
    assert granted == ["c"] and scheduler.waiting_count == 0 and scheduler.idle_slot
