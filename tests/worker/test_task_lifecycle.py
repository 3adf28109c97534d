"""A task's life between arrange() and its terminal outcome: deadlines, delays, expiry, retries, slots.

Most tests run a bounded MemorySource through the real engine and real subprocesses (no
Kafka needed); the window-linger tests need messages that arrive over time, so they use the
broker. Timing is read from the subprocesses themselves: the ``stamp`` program prints the
wall-clock time it started and ended, so "ran no earlier than" and "ran while" are facts
about processes, not about when a hook happened to be scheduled.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import knarr
from knarr.config.loading import config_from_dict
from knarr.engine.worker import Worker
from knarr.sources.memory import MemorySource
from tests.services.kafka import committed_offsets, produce_json
from tests.worker.harness import BEHAVE, kafka_config, running, topics, wait_until

STAMP = """#!/bin/sh
# stamp: print "start <unix time>", then act on args (sleep=S, touch=FILE, exit=CODE), print "end <unix time>"
echo "start $(date +%s.%N)"
code=0
for arg; do
  case "$arg" in
    sleep=*) sleep "${arg#sleep=}" ;;
    touch=*) : > "${arg#touch=}" ;;
    exit=*) code="${arg#exit=}" ;;
  esac
done
echo "end $(date +%s.%N)"
exit "$code"
"""


@pytest.fixture
def stamp(tmp_path: Path) -> str:
    path = tmp_path / "stamp"
    path.write_text(STAMP)
    path.chmod(0o755)
    return str(path)


def span(stdout: str) -> tuple[float, float]:
    """(start, end) wall-clock times a stamp run printed."""
    times = dict(line.split() for line in stdout.splitlines() if line.startswith(("start ", "end ")))
    return float(times["start"]), float(times.get("end", "inf"))


def memory_config(tmp_path: Path, binary: str, **executor) -> knarr.KnarrConfig:
    return config_from_dict({
        "executor": {"binary_path": binary, "max_executors": 4, "task_timeout_seconds": 20,
                     "retry_backoff_base_seconds": 0.01, "retry_backoff_max_seconds": 0.05,
                     "drain_timeout_seconds": 10, **executor},
        "sinks": {"filesystem": {"out": {"base_path": str(tmp_path / "out")}}},
        "dlq": {"path": str(tmp_path / "dlq.jsonl")},
        "metrics": {"enabled": False},
        "logging": {"level": "WARNING", "format": "console"},
    })


def messages(count: int = 1, partition: int = 0) -> list[knarr.SourceMessage]:
    return [knarr.SourceMessage(topic="t", partition=partition, offset=o, value=b"{}") for o in range(count)]


async def run_to_completion(cfg: knarr.KnarrConfig, handler: knarr.BaseHandler,
                            msgs: list[knarr.SourceMessage]) -> None:
    code = await asyncio.wait_for(Worker(cfg, handler, source=MemorySource(msgs)).run(), 60)
    assert code == 0


class Recorder(knarr.BaseHandler[None, None]):
    """Runs the tasks ``plan(message)`` returns; records results, errors passed to on_error, and groups."""

    def __init__(self, plan, on_error=knarr.ErrorAction.SKIP) -> None:
        self.plan = plan
        self.error_action = on_error
        self.arranged_at = 0.0
        self.results: dict[str, knarr.ExecutorResult] = {}
        self.attempts: dict[str, list[knarr.ExecutorError]] = {}
        self.groups: list[knarr.MessageGroup] = []

    async def arrange(self, messages, pending):
        self.arranged_at = time.time()
        return [task for m in messages for task in self.plan(m)]

    def task_priority(self, task):
        return task.metadata.get("priority", 0)

    async def on_task_complete(self, result):
        self.results[result.task.task_id] = result

    async def on_error(self, task, error):
        self.attempts.setdefault(task.task_id, []).append(error)
        return self.error_action

    async def on_message_complete(self, group):
        self.groups.append(group)


def task(task_id: str, *args: str, offset: int = 0, **fields) -> knarr.ExecutorTask:
    return knarr.ExecutorTask(task_id=task_id, args=list(args), source_offsets=[offset], **fields)


def max_overlap(spans: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda ev: (ev[0], ev[1]))
    running_now = peak = 0
    for _, delta in events:
        running_now += delta
        peak = max(peak, running_now)
    return peak


# --- deadlines -----------------------------------------------------------------------------------


async def test_a_tasks_timeout_seconds_replaces_the_configured_deadline(tmp_path):
    handler = Recorder(lambda m: [
        task("shorter", "sleep=10", timeout_seconds=0.3),
        task("longer", "out=done", "sleep=1.5", timeout_seconds=10),
    ])
    await run_to_completion(memory_config(tmp_path, BEHAVE, task_timeout_seconds=1), handler, messages())

    [killed] = handler.attempts["shorter"]
    assert killed.reason == "timeout" and "timed out after 0.3s" in killed.exception
    assert killed.result.duration_seconds < 2
    assert handler.results["longer"].stdout == "done\n"  # outlived the configured 1s deadline


# --- waiting to start ----------------------------------------------------------------------------


async def test_a_delayed_task_waits_its_delay_without_holding_a_slot(tmp_path, stamp):
    handler = Recorder(lambda m: [
        task("delayed", delay_seconds=0.8),
        task("immediate", "sleep=0.1"),  # submitted after the delayed one
    ])
    await run_to_completion(memory_config(tmp_path, stamp, max_executors=1), handler, messages())

    delayed, _ = span(handler.results["delayed"].stdout)
    immediate, _ = span(handler.results["immediate"].stdout)
    assert immediate < handler.arranged_at + 0.8, "the only slot was held by the waiting task"
    assert immediate < delayed
    assert delayed >= handler.arranged_at + 0.8


async def test_a_task_does_not_start_before_its_not_before_time(tmp_path, stamp):
    not_before = {}

    def plan(m):
        not_before["at"] = time.time() + 0.7
        return [task("scheduled", not_before=not_before["at"]), task("now")]

    handler = Recorder(plan)
    await run_to_completion(memory_config(tmp_path, stamp, max_executors=1), handler, messages())

    scheduled, _ = span(handler.results["scheduled"].stdout)
    now, _ = span(handler.results["now"].stdout)
    assert scheduled >= not_before["at"]
    assert now < not_before["at"]


async def test_a_task_that_expires_before_it_starts_never_runs_and_fails_as_expired(tmp_path, stamp):
    stale, late = tmp_path / "stale-ran", tmp_path / "late-ran"

    def plan(m):
        now = time.time()
        return [
            task("blocker", "sleep=1"),
            task("late", f"touch={late}", expires_at=now + 0.3),  # expires while waiting for the slot
            task("stale", f"touch={stale}", expires_at=now - 1),  # already expired when arranged
        ]

    handler = Recorder(plan)
    await run_to_completion(memory_config(tmp_path, stamp, max_executors=1), handler, messages())

    assert not late.exists() and not stale.exists()
    [group] = handler.groups
    assert (group.total, group.succeeded, group.failed) == (3, 1, 2)
    assert sorted((e.task.task_id, e.reason, e.pid) for e in group.errors) == [
        ("late", "expired", None), ("stale", "expired", None)]


# --- retries -------------------------------------------------------------------------------------


async def test_retries_back_off_exponentially_and_free_the_slot_while_they_wait(tmp_path, stamp):
    base = 0.2
    handler = Recorder(lambda m: [task("flaky", "exit=1"), task("other")], on_error=knarr.ErrorAction.RETRY)
    cfg = memory_config(tmp_path, stamp, max_executors=1, max_retries=3,
                        retry_backoff_base_seconds=base, retry_backoff_max_seconds=5)
    await run_to_completion(cfg, handler, messages())

    attempts = handler.attempts["flaky"]
    assert [e.attempt for e in attempts] == [1, 2, 3, 4]
    spans = [span(e.result.stdout) for e in attempts]
    for n in range(1, 4):
        computed = base * 2 ** (n - 1)  # before jitter; the jittered delay is at least half of it
        gap = spans[n][0] - spans[n - 1][1]
        assert gap >= computed / 2, f"attempt {n + 1} started {gap:.3f}s after attempt {n} ended"
    other, _ = span(handler.results["other"].stdout)
    assert spans[0][1] <= other < spans[1][0], "the other task should run while the retry waits"


async def test_a_tasks_max_attempts_caps_retries_below_the_configured_count(tmp_path, stamp):
    handler = Recorder(lambda m: [task("capped", "exit=1", max_attempts=2), task("default", "exit=1")],
                       on_error=knarr.ErrorAction.RETRY)
    await run_to_completion(memory_config(tmp_path, stamp, max_retries=4), handler, messages())

    assert [e.attempt for e in handler.attempts["capped"]] == [1, 2]
    assert [e.attempt for e in handler.attempts["default"]] == [1, 2, 3, 4, 5]
    [group] = handler.groups
    assert sorted((e.task.task_id, e.attempt) for e in group.errors) == [("capped", 2), ("default", 5)]


# --- pool slots ----------------------------------------------------------------------------------


async def test_max_per_partition_caps_a_partitions_concurrent_slots_and_leaves_the_rest_to_others(tmp_path, stamp):
    def plan(m):
        count = 6 if m.partition == 0 else 2
        return [task(f"p{m.partition}-{i}", "sleep=0.5", offset=m.offset) for i in range(count)]

    handler = Recorder(plan)
    cfg = memory_config(tmp_path, stamp, max_executors=4, max_per_partition=2)
    await run_to_completion(cfg, handler, messages(partition=0) + messages(partition=1))

    spans = {tid: span(r.stdout) for tid, r in handler.results.items()}
    assert len(spans) == 8
    assert max_overlap([s for tid, s in spans.items() if tid.startswith("p0-")]) == 2
    assert max_overlap(list(spans.values())) > 2, "partition 1 should use the slots partition 0 may not"


async def test_task_priority_orders_waiting_tasks_lowest_first(tmp_path, stamp):
    priorities = [5, 2, 9, -1, 1]
    handler = Recorder(lambda m: [task("blocker", "sleep=0.3")] + [
        task(f"prio{p}", metadata={"priority": p}) for p in priorities])
    await run_to_completion(memory_config(tmp_path, stamp, max_executors=1), handler, messages())

    started = sorted((span(r.stdout)[0], tid) for tid, r in handler.results.items())
    assert [tid for _, tid in started] == ["blocker"] + [f"prio{p}" for p in sorted(priorities)]


# --- windows filling over time (real broker) -----------------------------------------------------


class WindowRecorder(knarr.BaseHandler[None, None]):
    def __init__(self) -> None:
        self.windows: list[list[int]] = []

    async def arrange(self, messages, pending):
        self.windows.append([m.offset for m in messages])
        return [knarr.ExecutorTask(args=["out=x"], source_offsets=[m.offset]) for m in messages]


async def windows_of_messages_produced_apart(bootstrap: str, tmp_path: Path, linger_ms: int) -> list[list[int]]:
    src, _ = topics(bootstrap)
    handler = WindowRecorder()
    cfg = kafka_config(bootstrap, src, tmp_path=tmp_path, executor={"window_size": 3, "window_linger_ms": linger_ms})
    worker = Worker(cfg, handler)
    async with running(worker):
        await wait_until(lambda: 0 in worker.processors, what="partition 0 assigned")
        for i in range(3):
            await asyncio.to_thread(produce_json, bootstrap, src, [{"i": i}])
            await asyncio.sleep(0.3)  # the scenario: messages that arrive a little apart
        await wait_until(lambda: committed_offsets(bootstrap, cfg.kafka.consumer_group, src) == {0: 3},
                         what="three messages committed")
    return handler.windows


@pytest.mark.kafka
async def test_with_window_linger_messages_arriving_apart_share_one_arrange_call(kafka_bootstrap, tmp_path):
    assert await windows_of_messages_produced_apart(kafka_bootstrap, tmp_path, linger_ms=5000) == [[0, 1, 2]]


@pytest.mark.kafka
async def test_without_window_linger_messages_arriving_apart_are_arranged_separately(kafka_bootstrap, tmp_path):
    assert await windows_of_messages_produced_apart(kafka_bootstrap, tmp_path, linger_ms=0) == [[0], [1], [2]]
