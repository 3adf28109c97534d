"""The fan-out guide's examples, run as a user would write them, on the real broker.

Each handler below is the guide's code with only the import changed (``import knarr``) and
a real program behind the tasks (grep, or a tiny script written to tmp_path). The tests check
what the guide promises: one MessageGroup per source message, fired once after every task
derived from it is terminal, with ``total == succeeded + failed + replaced``; shared (fan-in)
results are the same object in every group; the offset commits whatever the hooks do.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

import knarr
from knarr.engine.worker import Worker
from tests.services.kafka import committed_offsets, consume_all, create_topic, produce_json, unique_name
from tests.worker.harness import kafka_config, running, topics, wait_until

pytestmark = pytest.mark.kafka

GREP = shutil.which("grep") or "/usr/bin/grep"


def committed_to(bootstrap: str, cfg: knarr.KnarrConfig, expected: dict[int, int]):
    return lambda: committed_offsets(bootstrap, cfg.kafka.consumer_group, cfg.kafka.source_topic) == expected


def script(tmp_path: Path, name: str, body: str) -> str:
    """Write an executable sh script into tmp_path and return its path."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def one_window(count: int) -> dict:
    """Executor settings that make ``count`` messages produced up front land in one arrange() call."""
    return {"window_size": count, "window_linger_ms": 5000}


@pytest.fixture
def corpus(tmp_path: Path) -> dict[str, Path]:
    """Three small files to search; line counts per pattern are known."""
    files = {
        "a.txt": "error one\nwarn two\nerror three\n",
        "b.txt": "warn one\nwarn two\nwarn three\nerror four\n",
        "c.txt": "nothing to see\n",
    }
    out = {}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        out[name] = tmp_path / name
    return out


# --- (a) search request -> patterns x files -> per-task detail + one summary ---------------------


class SearchRequest(BaseModel):
    request_id: str
    patterns: list[str] = Field(min_length=1)
    file_paths: list[str] = Field(min_length=1)


class PerTaskResult(BaseModel):
    request_id: str
    pattern: str
    file_path: str
    match_count: int


class RequestSummary(BaseModel):
    request_id: str
    total_tasks: int
    succeeded: int
    failed: int
    total_matches: int


class SearchHandler(knarr.BaseHandler[SearchRequest, PerTaskResult]):
    async def arrange(self, messages, pending):
        tasks = []
        for msg in messages:
            req = msg.payload
            for pattern in req.patterns:
                for file_path in req.file_paths:
                    tasks.append(
                        knarr.ExecutorTask(
                            task_id=knarr.make_task_id("search"),
                            args=[pattern, file_path],
                            metadata={"request_id": req.request_id, "pattern": pattern, "file_path": file_path},
                            source_offsets=[msg.offset],
                        )
                    )
        return tasks

    async def on_task_complete(self, result):
        meta = result.task.metadata
        matches = sum(1 for line in result.stdout.split("\n") if line)
        per_task = PerTaskResult(
            request_id=meta["request_id"], pattern=meta["pattern"], file_path=meta["file_path"], match_count=matches
        )
        # Two Kafka sinks are configured here, so the per-task payload names its sink too.
        return knarr.CollectResult(
            kafka=[knarr.KafkaPayload(data=per_task, key=meta["request_id"].encode(), sink="tasks")]
        )

    async def on_message_complete(self, group):
        req: SearchRequest = group.source_message.payload
        if req is None or group.is_empty:
            return None
        total_matches = sum(sum(1 for line in r.stdout.split("\n") if line) for r in group.results)
        summary = RequestSummary(
            request_id=req.request_id, total_tasks=group.total, succeeded=group.succeeded,
            failed=group.failed, total_matches=total_matches,
        )
        return knarr.CollectResult(
            kafka=[knarr.KafkaPayload(data=summary, key=req.request_id.encode(), sink="summaries")]
        )


async def test_a_search_request_fans_out_to_patterns_times_files_with_per_task_outputs_and_one_summary(
    kafka_bootstrap, corpus
):
    src, per_task_topic = topics(kafka_bootstrap)
    summary_topic = unique_name("summaries")
    create_topic(kafka_bootstrap, summary_topic)
    a, b, c = (str(corpus[n]) for n in ("a.txt", "b.txt", "c.txt"))
    produce_json(kafka_bootstrap, src, [
        {"request_id": "r1", "patterns": ["error", "warn"], "file_paths": [a, b]},  # 4 tasks, all match
        {"request_id": "r2", "patterns": ["error"], "file_paths": [a, b, c]},  # grep exits 1 on c: a failed task
    ])
    cfg = kafka_config(
        kafka_bootstrap, src, executor={"binary_path": GREP},
        sinks={"kafka": {"tasks": {"topic": per_task_topic}, "summaries": {"topic": summary_topic}}},
    )
    async with running(Worker(cfg, SearchHandler())):
        await wait_until(committed_to(kafka_bootstrap, cfg, {0: 2}), what="both requests committed")

    summaries = {m.json()["request_id"]: m.json() for m in consume_all(kafka_bootstrap, summary_topic, expected=2)}
    assert summaries == {
        "r1": {"request_id": "r1", "total_tasks": 4, "succeeded": 4, "failed": 0, "total_matches": 2 + 1 + 1 + 3},
        "r2": {"request_id": "r2", "total_tasks": 3, "succeeded": 2, "failed": 1, "total_matches": 2 + 1},
    }
    per_task = [m.json() for m in consume_all(kafka_bootstrap, per_task_topic, expected=6)]
    assert len(per_task) == 6  # one per succeeded task; the failed grep has none
    for request_id, summary in summaries.items():
        mine = [p for p in per_task if p["request_id"] == request_id]
        assert len(mine) == summary["succeeded"]
        assert sum(p["match_count"] for p in mine) == summary["total_matches"]


# --- (b) fan-in: identical queries across a window become one task -------------------------------


class Query(BaseModel):
    request_id: str
    pattern: str
    file_path: str


class Aggregate(BaseModel):
    request_id: str
    matches: int
    shared_with: int


class DedupeHandler(knarr.BaseHandler[Query, Aggregate]):
    def __init__(self) -> None:
        self.arranged: list[list[knarr.ExecutorTask]] = []
        self.groups: dict[str, knarr.MessageGroup] = {}

    async def arrange(self, messages, pending):
        groups: dict[tuple[str, str], list[knarr.SourceMessage]] = {}
        for msg in messages:
            key = (msg.payload.pattern, msg.payload.file_path)
            groups.setdefault(key, []).append(msg)
        tasks = []
        for (pattern, file_path), msgs in groups.items():
            tasks.append(
                knarr.ExecutorTask(
                    task_id=knarr.make_task_id("rg"),
                    args=[pattern, file_path],
                    source_offsets=[m.offset for m in msgs],
                    metadata={"pattern": pattern, "file_path": file_path,
                              "request_ids": [m.payload.request_id for m in msgs]},
                )
            )
        self.arranged.append(tasks)
        return tasks

    async def on_message_complete(self, group):
        req = group.source_message.payload
        self.groups[req.request_id] = group
        [result] = group.results
        return knarr.CollectResult(
            kafka=[knarr.KafkaPayload(
                data=Aggregate(request_id=req.request_id, matches=len(result.stdout.splitlines()),
                               shared_with=len(result.task.source_offsets)),
                key=req.request_id.encode(), sink="results",
            )],
        )


async def test_identical_queries_in_one_window_run_once_and_answer_every_request(kafka_bootstrap, corpus):
    src, out = topics(kafka_bootstrap)
    a, b = str(corpus["a.txt"]), str(corpus["b.txt"])
    queries = [("q0", "error", a), ("q1", "warn", b), ("q2", "error", a), ("q3", "error", b),
               ("q4", "error", a), ("q5", "warn", b)]
    offsets = [o for _, o in produce_json(
        kafka_bootstrap, src, [{"request_id": r, "pattern": p, "file_path": f} for r, p, f in queries])]
    handler = DedupeHandler()
    cfg = kafka_config(kafka_bootstrap, src, executor={"binary_path": GREP, **one_window(len(queries))},
                       sinks={"kafka": {"results": {"topic": out}}})
    async with running(Worker(cfg, handler)):
        await wait_until(committed_to(kafka_bootstrap, cfg, {0: len(queries)}), what="every query committed")

    [tasks] = handler.arranged
    assert sorted((t.args[0], t.args[1], t.source_offsets) for t in tasks) == sorted([
        ("error", a, [offsets[0], offsets[2], offsets[4]]),
        ("warn", b, [offsets[1], offsets[5]]),
        ("error", b, [offsets[3]]),
    ])
    answers = {m.json()["request_id"]: m.json() for m in consume_all(kafka_bootstrap, out, expected=len(queries))}
    assert answers == {
        "q0": {"request_id": "q0", "matches": 2, "shared_with": 3},
        "q1": {"request_id": "q1", "matches": 3, "shared_with": 2},
        "q2": {"request_id": "q2", "matches": 2, "shared_with": 3},
        "q3": {"request_id": "q3", "matches": 1, "shared_with": 1},
        "q4": {"request_id": "q4", "matches": 2, "shared_with": 3},
        "q5": {"request_id": "q5", "matches": 3, "shared_with": 2},
    }
    g = handler.groups
    assert g["q0"].results[0] is g["q2"].results[0] is g["q4"].results[0]
    assert g["q1"].results[0] is g["q5"].results[0]
    assert g["q3"].results[0] is not g["q0"].results[0]


# --- (c) one validation task shared by the whole window ------------------------------------------


class Record(BaseModel):
    data: str


class ValidatingHandler(knarr.BaseHandler[Record, None]):
    def __init__(self) -> None:
        self.groups: list[knarr.MessageGroup] = []

    async def arrange(self, messages, pending):
        tasks = [knarr.ExecutorTask(task_id="validate", args=["--check-health"],
                                    source_offsets=[m.offset for m in messages])]
        for msg in messages:
            tasks.append(knarr.ExecutorTask(task_id=knarr.make_task_id("proc"),
                                            args=["--process", msg.payload.data], source_offsets=[msg.offset]))
        return tasks

    async def on_message_complete(self, group):
        self.groups.append(group)


async def test_a_validation_task_shared_across_the_window_counts_in_every_group(kafka_bootstrap, tmp_path):
    src, _ = topics(kafka_bootstrap)
    tool = script(tmp_path, "tool", 'case "$1" in --check-health) echo healthy ;; --process) echo "processed $2" ;; esac\n')
    produce_json(kafka_bootstrap, src, [{"data": f"d{i}"} for i in range(4)])
    handler = ValidatingHandler()
    cfg = kafka_config(kafka_bootstrap, src, tmp_path=tmp_path, executor={"binary_path": tool, **one_window(4)})
    async with running(Worker(cfg, handler)):
        await wait_until(committed_to(kafka_bootstrap, cfg, {0: 4}), what="all four committed")

    assert len(handler.groups) == 4
    validation = handler.groups[0].results
    shared = next(r for r in validation if r.task.task_id == "validate")
    for group in handler.groups:
        assert (group.total, group.succeeded, group.failed) == (2, 2, 0)
        [own] = [r for r in group.results if r.task.task_id != "validate"]
        assert own.stdout == f"processed {group.source_message.payload.data}\n"
        assert any(r is shared for r in group.results)
    assert shared.stdout == "healthy\n"


# --- (d) split on failure: replacements, chains and accounting -----------------------------------


class Job(BaseModel):
    job_id: str
    ranges: list[tuple[int, int]]


class SplittingHandler(knarr.BaseHandler[Job, None]):
    """Each task processes a range [lo, hi); the tool runs out of memory on ranges wider than 2."""

    def __init__(self) -> None:
        self.roots: set[str] = set()
        self.groups: list[knarr.MessageGroup] = []
        self.window_results: list[list[knarr.ExecutorResult]] = []

    async def arrange(self, messages, pending):
        tasks = [
            knarr.ExecutorTask(task_id=knarr.make_task_id("range"), args=[str(lo), str(hi)], source_offsets=[m.offset])
            for m in messages for lo, hi in m.payload.ranges
        ]
        self.roots.update(t.task_id for t in tasks)
        return tasks

    async def on_error(self, task, error):
        # knarr reports a non-zero exit through stderr (error.exception is for engine-level causes).
        if "memory" in error.stderr.lower():
            lo, hi = int(task.args[0]), int(task.args[1])
            mid = lo + (hi - lo) // 2
            return [
                knarr.ExecutorTask(task_id=knarr.make_task_id("half1"), args=[str(lo), str(mid)],
                                   source_offsets=task.source_offsets),
                knarr.ExecutorTask(task_id=knarr.make_task_id("half2"), args=[str(mid), str(hi)],
                                   source_offsets=task.source_offsets),
            ]
        return knarr.ErrorAction.SKIP

    async def on_message_complete(self, group):
        self.groups.append(group)

    async def on_window_complete(self, results, source_messages):
        self.window_results.append(results)


async def test_a_task_split_on_failure_is_replaced_by_its_halves_down_to_ranges_that_succeed(kafka_bootstrap, tmp_path):
    src, _ = topics(kafka_bootstrap)
    tool = script(tmp_path, "ranges", (
        'if [ "$2" -ge 100 ]; then echo "bad input $1-$2" >&2; exit 2; fi\n'
        'if [ $(($2 - $1)) -gt 2 ]; then echo "out of memory for $1-$2" >&2; exit 137; fi\n'
        'seq "$1" $(($2 - 1))\n'
    ))
    # [0,5) fails -> [0,2) ok + [2,5) fails -> [2,3) ok + [3,5) ok; [100,101) fails for good (SKIP).
    produce_json(kafka_bootstrap, src, [{"job_id": "j1", "ranges": [[0, 5], [100, 101]]}])
    handler = SplittingHandler()
    cfg = kafka_config(kafka_bootstrap, src, tmp_path=tmp_path, executor={"binary_path": tool})
    async with running(Worker(cfg, handler)):
        await wait_until(committed_to(kafka_bootstrap, cfg, {0: 1}), what="the job committed")
        await wait_until(lambda: handler.window_results, 10, "on_window_complete")

    [group] = handler.groups
    assert (group.total, group.succeeded, group.failed, group.replaced) == (6, 3, 1, 2)
    assert group.total == group.succeeded + group.failed + group.replaced
    assert sorted(tuple(r.task.args) for r in group.results) == [("0", "2"), ("2", "3"), ("3", "5")]
    assert sorted(int(line) for r in group.results for line in r.stdout.split()) == [0, 1, 2, 3, 4]
    assert [tuple(e.task.args) for e in group.errors] == [("100", "101")]

    by_id = {t.task_id: t for t in group.tasks}
    depth = {}
    for task in group.tasks:
        chain = [task]
        while chain[-1].parent_task_id:
            chain.append(by_id[chain[-1].parent_task_id])
        assert chain[-1].task_id in handler.roots
        depth[tuple(task.args)] = len(chain) - 1
    assert depth == {("0", "5"): 0, ("100", "101"): 0, ("0", "2"): 1, ("2", "5"): 1, ("2", "3"): 2, ("3", "5"): 2}

    # The window sees one result per invocation that did not hand off: 3 successes + the SKIPped failure.
    [results] = handler.window_results
    assert sorted(tuple(r.task.args) for r in results) == [("0", "2"), ("100", "101"), ("2", "3"), ("3", "5")]
    assert len(results) == group.total - group.replaced


# --- (e) on_message_complete raising does not stall the partition --------------------------------


class Item(BaseModel):
    id: int


class RaisingHandler(knarr.BaseHandler[Item, None]):
    def __init__(self) -> None:
        self.completed: list[int] = []

    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=[f"out={m.payload.id}"], source_offsets=[m.offset]) for m in messages]

    async def on_message_complete(self, group):
        self.completed.append(group.source_message.payload.id)
        if group.source_message.payload.id == 1:
            raise RuntimeError("aggregate store unavailable")


async def test_an_on_message_complete_that_raises_dead_letters_that_message_with_its_offset_and_commits(
    kafka_bootstrap, tmp_path, capsys
):
    src, _ = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": i} for i in range(3)])
    handler = RaisingHandler()
    cfg = kafka_config(kafka_bootstrap, src, tmp_path=tmp_path)
    async with running(Worker(cfg, handler)):
        await wait_until(committed_to(kafka_bootstrap, cfg, {0: 3}), what="all three committed, the raising one too")

    assert sorted(handler.completed) == [0, 1, 2]
    logs = capsys.readouterr().err
    assert "on_message_complete raised; the message is dead-lettered with its offset" in logs
    [record] = [m.json() for m in consume_all(kafka_bootstrap, cfg.dlq_topic, expected=1, timeout=10)]
    assert (record["sink_name"], record["partition"], record["offsets"]) == ("on_message_complete", 0, [1])
    assert "aggregate store unavailable" in record["error"]
    assert json.loads(record["original_payloads"][0]) == {"id": 1}


# --- (f) arrange() returning nothing -------------------------------------------------------------


class NothingToDo(knarr.BaseHandler[Item, None]):
    def __init__(self) -> None:
        self.groups: list[knarr.MessageGroup] = []

    async def arrange(self, messages, pending):
        return []

    async def on_message_complete(self, group):
        self.groups.append(group)


async def test_messages_arrange_gives_no_tasks_still_get_an_empty_group_and_commit(kafka_bootstrap, tmp_path):
    src, _ = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": i} for i in range(5)])
    handler = NothingToDo()
    cfg = kafka_config(kafka_bootstrap, src, tmp_path=tmp_path)
    async with running(Worker(cfg, handler)):
        await wait_until(committed_to(kafka_bootstrap, cfg, {0: 5}), what="all five committed")

    assert sorted(g.source_message.payload.id for g in handler.groups) == [0, 1, 2, 3, 4]
    for group in handler.groups:
        assert group.is_empty and group.total == 0 and not group.all_succeeded and not group.any_failed


# --- (g) precomputed results mixed with real subprocesses ----------------------------------------


class Lookup(BaseModel):
    key: str


class CachingHandler(knarr.BaseHandler[Lookup, None]):
    """A cache hit per message (precomputed) plus a real check per message."""

    cache = {"k0": "cached-0", "k1": "cached-1"}

    def __init__(self) -> None:
        self.task_results: list[knarr.ExecutorResult] = []
        self.groups: list[knarr.MessageGroup] = []

    async def arrange(self, messages, pending):
        tasks = []
        for msg in messages:
            key = msg.payload.key
            tasks.append(knarr.ExecutorTask(args=[], source_offsets=[msg.offset], metadata={"kind": "cache"},
                                            precomputed=knarr.PrecomputedResult(stdout=self.cache[key] + "\n")))
            tasks.append(knarr.ExecutorTask(args=[f"out=live-{key}"], source_offsets=[msg.offset],
                                            metadata={"kind": "live"}))
        return tasks

    async def on_task_complete(self, result):
        self.task_results.append(result)

    async def on_message_complete(self, group):
        self.groups.append(group)


async def test_precomputed_results_skip_the_subprocess_and_flow_through_the_same_hooks(kafka_bootstrap, tmp_path):
    src, _ = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"key": "k0"}, {"key": "k1"}])
    handler = CachingHandler()
    cfg = kafka_config(kafka_bootstrap, src, tmp_path=tmp_path)
    async with running(Worker(cfg, handler)):
        await wait_until(committed_to(kafka_bootstrap, cfg, {0: 2}), what="both committed")

    assert sorted((r.task.metadata["kind"], r.pid is None) for r in handler.task_results) == [
        ("cache", True), ("cache", True), ("live", False), ("live", False)]
    assert len(handler.groups) == 2
    for group in handler.groups:
        key = group.source_message.payload.key
        assert (group.total, group.succeeded) == (2, 2)
        by_kind = {r.task.metadata["kind"]: r for r in group.results}
        assert by_kind["cache"].pid is None and by_kind["cache"].stdout == f"cached-{key[1]}\n"
        assert isinstance(by_kind["live"].pid, int) and by_kind["live"].stdout == f"live-{key}\n"


# --- (h) pre-registration: a fast first task cannot complete the group early ---------------------


class StaggeredHandler(knarr.BaseHandler[Item, None]):
    """Each task prints the wall-clock time it started; the first is instant, the others queue."""

    def __init__(self, tasks_per_message: int) -> None:
        self.n = tasks_per_message
        self.completed_at: dict[int, float] = {}
        self.groups_when_first_done: int | None = None
        self.groups: list[knarr.MessageGroup] = []

    async def arrange(self, messages, pending):
        return [
            knarr.ExecutorTask(binary_path="/bin/sh", args=["-c", f"date +%s.%N; sleep {0 if i == 0 else 0.2}"],
                               source_offsets=[m.offset], metadata={"index": i},
                               delay_seconds=0.5 if i == self.n - 1 else None)
            for m in messages for i in range(self.n)
        ]

    async def on_task_complete(self, result):
        index = result.task.metadata["index"]
        self.completed_at[index] = time.time()
        if index == 0:
            self.groups_when_first_done = len(self.groups)

    async def on_message_complete(self, group):
        self.groups.append(group)


async def test_a_group_waits_for_tasks_that_had_not_started_when_its_first_task_finished(kafka_bootstrap, tmp_path):
    src, _ = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 1}])
    handler = StaggeredHandler(tasks_per_message=4)
    cfg = kafka_config(kafka_bootstrap, src, tmp_path=tmp_path, executor={"max_executors": 1})
    async with running(Worker(cfg, handler)):
        await wait_until(committed_to(kafka_bootstrap, cfg, {0: 1}), what="the message committed")

    [group] = handler.groups
    assert (group.total, group.succeeded) == (4, 4)
    assert handler.groups_when_first_done == 0
    started = {r.task.metadata["index"]: float(r.stdout.split()[0]) for r in group.results}
    assert handler.completed_at[0] < started[3], "the last task should not have started when the first finished"
    assert group.finished_at >= group.started_at
