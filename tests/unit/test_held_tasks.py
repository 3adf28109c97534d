"""Held tasks (executor.spawn_ahead): the native runner keeps spawn-mode tasks ready and starts
each the moment a running task ends, without ever running more than max_executors at once.

The scheduler's side is tested on its own (grants, what the runner's events settle); the rest
runs real processes through the native runner.
"""

from __future__ import annotations

import asyncio
import time

import knarr
import pytest
from knarr.config.models import ExecutorConfig
from knarr.engine import native
from knarr.engine import execution
from knarr.engine.execution import HOLD_BUDGET_SECONDS, TaskExecutor, wake_up
from knarr.engine.ledger import Failed, Succeeded
from knarr.engine.scheduling import SlotScheduler
from knarr.engine.worker import Worker
from knarr.sources.memory import MemorySource

from tests.worker.harness import local_config

FREED, PASSED, NONE = native.SLOT_FREED, native.SLOT_PASSED, native.SLOT_NONE


# --- the scheduler ------------------------------------------------------------------------------
async def test_with_every_slot_taken_a_task_the_runner_can_hold_gets_a_held_place_up_to_the_limit():
    scheduler = SlotScheduler(1, held=2)
    assert await scheduler.acquire(0, can_hold=True) is False  # the slot
    assert await scheduler.acquire(0, can_hold=True) is True
    assert await scheduler.acquire(1, can_hold=True) is True
    third = asyncio.ensure_future(scheduler.acquire(2, can_hold=True))
    await asyncio.sleep(0)
    assert not third.done() and (scheduler.free, scheduler.held) == (0, 2)
    scheduler.settle(0, PASSED)  # the running task ended and its slot went to the first held one
    assert await third is True
    assert (scheduler.free, scheduler.held, scheduler.in_use) == (0, 2, 1)


async def test_what_the_runner_says_of_each_slot_brings_the_pool_back_to_where_it_started():
    scheduler = SlotScheduler(2, held=2)
    grants = [await scheduler.acquire(p, can_hold=True) for p in (0, 1, 0, 1)]
    assert grants == [False, False, True, True]
    scheduler.settle(0, PASSED)
    scheduler.settle(1, PASSED)
    scheduler.settle(0, FREED)
    scheduler.settle(1, FREED)
    assert (scheduler.free, scheduler.held, dict(scheduler.active)) == (2, 0, {})


async def test_a_held_task_that_leaves_unstarted_gives_back_its_place_and_no_slot():
    scheduler = SlotScheduler(1, held=1)
    await scheduler.acquire(0, can_hold=True)
    assert await scheduler.acquire(0, can_hold=True) is True
    scheduler.settle(0, NONE)
    assert (scheduler.free, scheduler.held) == (0, 0)
    assert await scheduler.acquire(0, can_hold=True) is True  # the place is free again, the slot is not


async def test_a_task_that_needs_a_slot_stops_held_grants_so_the_held_ones_drain_and_it_runs_next():
    scheduler = SlotScheduler(1, held=4)
    await scheduler.acquire(0, can_hold=True)
    program = asyncio.ensure_future(scheduler.acquire(0, priority=(0,), can_hold=False))  # a persistent task
    await asyncio.sleep(0)
    later = asyncio.ensure_future(scheduler.acquire(0, priority=(1,), can_hold=True))
    await asyncio.sleep(0)
    assert not later.done(), "a held place went to a task queued behind one that needs a slot"
    scheduler.settle(0, FREED)
    assert await program is False
    assert await later is True  # now the program has the slot, the spawn-mode task may be held behind it


async def test_a_slot_freed_outside_the_runner_goes_to_its_first_held_task():
    scheduler = SlotScheduler(1, held=1)
    held_in_runner = [1]

    def pass_slot() -> bool:
        if held_in_runner:
            held_in_runner.pop()
            return True
        return False

    scheduler.pass_slot = pass_slot
    await scheduler.acquire(0, can_hold=False)  # a persistent task has the slot
    assert await scheduler.acquire(1, can_hold=True) is True
    scheduler.release(0)  # the program's task ends: the runner's held task starts on its slot
    assert (scheduler.free, scheduler.held, held_in_runner) == (0, 0, [])


async def test_a_grant_the_runner_never_got_is_given_back_as_it_was_granted():
    scheduler = SlotScheduler(1, held=1)
    await scheduler.acquire(0, can_hold=True)
    await scheduler.acquire(0, can_hold=True)
    scheduler.give_back(0, True)
    scheduler.give_back(0, False)
    assert (scheduler.free, scheduler.held, dict(scheduler.active)) == (1, 0, {})


def test_spawn_ahead_defaults_to_sixteen_per_slot_and_zero_turns_it_off():
    assert ExecutorConfig(max_executors=3).held_tasks == 48  # at most: the tasks' duration decides (below)
    assert ExecutorConfig(max_executors=3, spawn_ahead=0).held_tasks == 0
    with pytest.raises(ValueError, match="spawn_ahead"):
        ExecutorConfig(spawn_ahead=-1)


# --- real tasks through the native runner -------------------------------------------------------
def _executor(slots: int, held: int) -> tuple[TaskExecutor, SlotScheduler]:
    scheduler = SlotScheduler(slots, held=held)
    config = ExecutorConfig(binary_path="/bin/sh", max_executors=slots, spawn_ahead=held)
    return TaskExecutor(knarr.BaseHandler(), scheduler, config), scheduler


def _task(script: str, **fields) -> knarr.ExecutorTask:
    return knarr.ExecutorTask(args=["-c", script], **fields)


async def _settled(scheduler: SlotScheduler) -> tuple[int, int]:
    """The pool once every event has come (they arrive from the runner's thread)."""
    for _ in range(200):
        if scheduler.free == scheduler.slots and scheduler.held == 0:
            break
        await asyncio.sleep(0.01)
    return scheduler.free, scheduler.held


@pytest.fixture
def holds(monkeypatch) -> list[bool]:
    """Whether each task went to the runner held."""
    seen: list[bool] = []
    real = native.NativeRunner.submit

    def submit(self, *args, hold=False, **kwargs):
        seen.append(hold)
        return real(self, *args, hold=hold, **kwargs)

    monkeypatch.setattr(native.NativeRunner, "submit", submit)
    return seen


async def test_held_tasks_never_make_more_than_max_executors_run_at_once(holds):
    executor, scheduler = _executor(2, 4)
    script = "date +%s%N; sleep 0.15; date +%s%N"
    runs = await asyncio.gather(*(executor.run(_task(script), p % 2) for p in range(10)))
    spans = []
    for outcome, _ in runs:
        assert isinstance(outcome, Succeeded), outcome
        begin, end = (int(line) for line in outcome.result.stdout.split())
        spans.append((begin, end))
    most = max(sum(1 for b, e in spans if b <= at < e) for at, _ in spans)
    assert most == 2
    assert any(holds), "no task was handed to the runner ahead of a free slot"
    assert await _settled(scheduler) == (2, 0)


async def test_a_held_tasks_timeout_and_duration_count_from_its_own_start(holds):
    executor, scheduler = _executor(1, 2)
    runs = await asyncio.gather(*(executor.run(_task("sleep 0.4", timeout_seconds=0.7), 0) for _ in range(3)))
    assert holds.count(True) == 2
    for outcome, _ in runs:  # the last waited 0.8 s held: longer than its timeout, yet it ran in full
        assert isinstance(outcome, Succeeded), outcome
        assert 0.35 <= outcome.result.duration_seconds < 0.65
    assert await _settled(scheduler) == (1, 0)


async def test_a_held_task_that_overruns_its_timeout_is_killed_that_long_after_it_started():
    executor, scheduler = _executor(1, 1)
    first = asyncio.ensure_future(executor.run(_task("sleep 0.5"), 0))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    outcome, _ = await executor.run(_task("sleep 5", timeout_seconds=0.5), 0)
    waited = time.monotonic() - started
    assert isinstance(outcome, Failed) and outcome.error.reason == "timeout"
    assert 0.85 <= waited < 2.5, waited  # held ~0.45 s, then 0.5 s of its own
    await first
    assert await _settled(scheduler) == (1, 0)


async def test_a_task_whose_expires_at_passes_while_held_is_dropped_as_expired_and_never_runs(tmp_path):
    executor, scheduler = _executor(1, 1)
    first = asyncio.ensure_future(executor.run(_task("sleep 0.5"), 0))
    await asyncio.sleep(0.05)
    marker = tmp_path / "ran"
    outcome, _ = await executor.run(_task(f"touch {marker}", expires_at=time.time() + 0.2), 0)
    assert isinstance(outcome, Failed) and outcome.error.reason == "expired"
    assert not marker.exists()
    assert isinstance((await first)[0], Succeeded)
    assert await _settled(scheduler) == (1, 0)


async def test_cancelling_held_and_running_tasks_leaves_the_pool_whole(tmp_path):
    executor, scheduler = _executor(1, 2)
    marker = tmp_path / "ran"
    running = asyncio.ensure_future(executor.run(_task("sleep 30"), 0))
    await asyncio.sleep(0.1)
    held = [asyncio.ensure_future(executor.run(_task(f"touch {marker}"), 0)) for _ in range(2)]
    await asyncio.sleep(0.1)
    assert scheduler.held == 2
    for task in (held[0], running, held[1]):
        task.cancel()
    await asyncio.gather(running, *held, return_exceptions=True)
    assert await _settled(scheduler) == (1, 0)
    await asyncio.sleep(0.2)
    assert not marker.exists(), "a cancelled held task started"


async def test_a_held_task_that_cannot_start_passes_its_slot_on(tmp_path):
    executor, scheduler = _executor(1, 3)
    first = asyncio.ensure_future(executor.run(_task("sleep 0.3"), 0))
    await asyncio.sleep(0.05)
    missing = knarr.ExecutorTask(args=[], binary_path=str(tmp_path / "no-such-binary"))
    runs = await asyncio.gather(executor.run(missing, 0), executor.run(_task("echo after"), 0))
    assert isinstance(runs[0][0], Failed) and runs[0][0].error.reason == "launch"
    assert isinstance(runs[1][0], Succeeded) and runs[1][0].result.stdout == "after\n"
    await first
    assert await _settled(scheduler) == (1, 0)


async def test_a_worker_on_defaults_holds_tasks_and_finishes_every_message(tmp_path, holds):
    class Sleepy(knarr.BaseHandler[None, None]):
        async def arrange(self, messages, pending):
            return [knarr.ExecutorTask(args=["-c", f"sleep 0.02; echo {m.offset}"], source_offsets=[m.offset])
                    for m in messages]

        async def on_task_complete(self, result):
            self.seen = getattr(self, "seen", []) + [result.stdout]

    config = local_config(tmp_path, binary_path="/bin/sh", max_executors=2)
    handler = Sleepy()
    messages = [knarr.SourceMessage(topic="t", partition=0, offset=o, value=b"{}") for o in range(40)]
    worker = Worker(config, handler, source=MemorySource(messages))
    assert await asyncio.wait_for(worker.run(), 60) == 0
    assert sorted(handler.seen) == sorted(f"{o}\n" for o in range(40))
    assert any(holds)
    assert (worker.scheduler.free, worker.scheduler.held) == (2, 0)


async def test_unset_spawn_ahead_holds_short_tasks_and_not_long_ones(holds):
    scheduler = SlotScheduler(2, held=4)
    executor = TaskExecutor(knarr.BaseHandler(), scheduler, ExecutorConfig(binary_path="/bin/sh", max_executors=2))
    assert scheduler.held_max == 0  # nothing is known of the tasks yet
    await asyncio.gather(*(executor.run(_task("sleep 0.25"), 0) for _ in range(4)))
    assert scheduler.held_max == 0 and not any(holds), "tasks of 250 ms were held"
    for _ in range(40):  # short tasks bring the mean duration down to a few milliseconds
        await asyncio.gather(*(executor.run(_task("true"), 0) for _ in range(8)))
        if any(holds):
            break
    assert any(holds), "short tasks were never held"
    assert 0 < scheduler.held_max <= 4
    assert await _settled(scheduler) == (2, 0)


async def test_two_pools_sharing_the_runner_never_pass_each_other_a_slot():
    (slow, slow_pool), (quick, quick_pool) = _executor(1, 2), _executor(1, 2)
    slow_runs = [slow.run(_task("date +%s%N; sleep 0.3; date +%s%N"), 0) for _ in range(3)]
    quick_runs = [quick.run(_task("date +%s%N; sleep 0.05; date +%s%N"), 0) for _ in range(3)]
    runs = await asyncio.gather(*slow_runs, *quick_runs)  # the slow pool's tasks are held first
    for pool_runs in (runs[:3], runs[3:]):
        spans = [tuple(int(line) for line in outcome.result.stdout.split()) for outcome, _ in pool_runs]
        assert max(sum(1 for b, e in spans if b <= at < e) for at, _ in spans) == 1, "a pool ran two at once"
    assert await _settled(slow_pool) == (1, 0)
    assert await _settled(quick_pool) == (1, 0)


# --- how soon the loop hears of ended tasks while others are held -------------------------------
def test_the_loop_is_woken_once_all_but_two_tasks_per_slot_of_the_held_ones_could_have_started():
    assert wake_up(64, 4) == (56, HOLD_BUDGET_SECONDS)
    assert wake_up(8, 4) == (6, HOLD_BUDGET_SECONDS)  # never fewer than 1.5 per slot
    assert wake_up(0, 1) == (1, HOLD_BUDGET_SECONDS)


@pytest.fixture
async def runner():
    """The process's native runner on this test's loop; its wake-up batch is put back afterwards."""
    runner = native.runner()
    assert runner.claim(asyncio.get_running_loop())
    yield runner
    runner.set_batch(1, 0.0)


class Heard:
    """When the loop heard of each ended task, and the runner's event for it."""

    def __init__(self) -> None:
        self.at: dict[int, float] = {}
        self.end: dict[int, native.Ended] = {}

    def submit(self, runner: native.NativeRunner, owner: int, n: int, script: str, hold: bool) -> None:
        def on_end(end: native.Ended) -> None:
            self.at[n], self.end[n] = time.monotonic(), end

        runner.submit(["sh", "-c", script], None, None, 30, 4096, hold=hold, owner=owner, on_end=on_end)

    def ended(self, n: int) -> float:
        return self.end[n].ended_ns / 1e9

    async def all(self, count: int) -> None:
        for _ in range(500):
            if len(self.at) == count:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"heard of {sorted(self.at)} of {count} tasks")


async def test_while_tasks_are_held_the_loop_hears_of_ended_ones_a_batch_at_a_time(runner):
    runner.set_batch(3, 30.0)  # three ended tasks, however long they take
    owner, heard = runner.new_owner(), Heard()
    heard.submit(runner, owner, 0, "sleep 0.2", hold=False)  # the one slot
    for n in range(1, 6):
        heard.submit(runner, owner, n, "true", hold=True)  # each starts as the one before ends
    await heard.all(6)
    assert all(end.status == 0 for end in heard.end.values())
    assert heard.at[0] >= heard.ended(2), "the loop heard of the first task before the batch of three had ended"
    assert heard.at[2] - heard.ended(2) < 1.0, "the batch was complete, yet the loop was not woken"
    assert heard.at[5] - heard.ended(5) < 1.0, "with nothing held any more, the loop must hear at once"


async def test_while_tasks_are_held_the_loop_hears_of_an_ended_one_no_later_than_the_bound(runner):
    runner.set_batch(100, 0.3)
    owner, heard = runner.new_owner(), Heard()
    heard.submit(runner, owner, 0, "true", hold=False)
    for n in range(1, 4):
        heard.submit(runner, owner, n, "sleep 0.8", hold=True)
    await heard.all(4)
    late = heard.at[0] - heard.ended(0)
    assert 0.25 <= late < 0.75, f"heard of the first task {late:.2f} s after it ended (bound 0.3 s)"
    assert heard.at[0] < heard.ended(1), "the loop waited for the next task's end"


async def test_a_held_tasks_duration_is_its_run_not_how_late_the_loop_heard_of_its_end(monkeypatch, runner):
    monkeypatch.setattr(execution, "HOLD_BUDGET_SECONDS", 0.4)  # the loop hears of an ended task 0.4 s late
    executor, scheduler = _executor(1, 6)
    started = time.monotonic()
    quick = asyncio.ensure_future(executor.run(_task("true"), 0))
    slow = [asyncio.ensure_future(executor.run(_task("sleep 0.5"), 0)) for _ in range(3)]
    outcome, _ = await quick
    assert time.monotonic() - started >= 0.35, "the loop heard at once: this test shows nothing"
    assert isinstance(outcome, Succeeded) and outcome.result.duration_seconds < 0.2, outcome
    for done in await asyncio.gather(*slow):
        assert 0.45 <= done[0].result.duration_seconds < 0.8
    assert await _settled(scheduler) == (1, 0)


async def test_the_wake_up_batch_follows_the_held_places_as_the_tasks_durations_decide_them(monkeypatch, runner):
    batches: list[tuple[int, float]] = []
    real = native.NativeRunner.set_batch
    monkeypatch.setattr(native.NativeRunner, "set_batch",
                        lambda self, batch, hold: (batches.append((batch, hold)), real(self, batch, hold)))
    scheduler = SlotScheduler(2, held=32)
    executor = TaskExecutor(knarr.BaseHandler(), scheduler, ExecutorConfig(binary_path="/bin/sh", max_executors=2))
    assert batches == [wake_up(0, 2)]  # nothing held until a task's duration is known
    for _ in range(5):
        await asyncio.gather(*(executor.run(_task("true"), 0) for _ in range(8)))
    assert scheduler.held_max > 0
    assert batches[-1] == wake_up(scheduler.held_max, 2) == (max(3, scheduler.held_max - 4), HOLD_BUDGET_SECONDS)
    assert await _settled(scheduler) == (2, 0)
