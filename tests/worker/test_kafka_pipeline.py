"""The worker against a real broker: the basic shapes of processing, success and failure paths."""

from __future__ import annotations

import json
import os
import uuid

import pytest
from pydantic import BaseModel

import knarr
from knarr.engine.worker import Worker
from knarr.sinks.delivery import Origin
from tests.services.kafka import committed_offsets, consume_all, produce_json
from tests.worker.harness import kafka_config, running, topics, wait_until

pytestmark = pytest.mark.kafka


class Item(BaseModel):
    id: int
    text: str = ""


class Echo(knarr.BaseHandler[Item, Item]):
    """One task per message; its stdout goes to the output topic."""

    tasks_per_message = 1
    behave: tuple[str, ...] = ()

    async def arrange(self, messages, pending):
        return [
            knarr.ExecutorTask(args=[f"out={m.payload.id}:{i}", *self.behave], source_offsets=[m.offset],
                               metadata={"id": m.payload.id if m.payload else None})
            for m in messages if m.payload is not None
            for i in range(self.tasks_per_message)
        ]

    async def on_task_complete(self, result):
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(data={"out": result.stdout.strip()})])


def committed_to(bootstrap, group, topic, expected: dict[int, int]):
    return lambda: committed_offsets(bootstrap, group, topic) == expected


async def test_one_message_in_gives_one_output_and_the_offset_is_committed(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": i} for i in range(20)])
    cfg = kafka_config(kafka_bootstrap, src, out_topic=out)
    async with running(Worker(cfg, Echo())):
        await wait_until(committed_to(kafka_bootstrap, cfg.kafka.consumer_group, src, {0: 20}), what="offset 20 committed")
    outputs = sorted(m.json()["out"] for m in consume_all(kafka_bootstrap, out, expected=20))
    assert outputs == sorted(f"{i}:0" for i in range(20))


async def test_one_message_fanning_out_to_n_tasks_gives_n_outputs_and_one_aggregate(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": i} for i in range(5)])

    class FanOut(Echo):
        tasks_per_message = 4

        async def on_message_complete(self, group):
            return knarr.CollectResult(kafka=[knarr.KafkaPayload(
                data={"aggregate": group.source_message.payload.id, "total": group.total, "succeeded": group.succeeded})])

    cfg = kafka_config(kafka_bootstrap, src, out_topic=out)
    async with running(Worker(cfg, FanOut())):
        await wait_until(committed_to(kafka_bootstrap, cfg.kafka.consumer_group, src, {0: 5}))
    values = [m.json() for m in consume_all(kafka_bootstrap, out, expected=25)]
    assert len([v for v in values if "out" in v]) == 20
    aggregates = sorted((v["aggregate"], v["total"], v["succeeded"]) for v in values if "aggregate" in v)
    assert aggregates == [(i, 4, 4) for i in range(5)]


async def test_a_retried_task_succeeds_on_a_later_attempt(kafka_bootstrap, tmp_path):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 1}])
    failfile = tmp_path / "fails"
    failfile.write_text("2")
    attempts = []

    class Flaky(Echo):
        behave = (f"failfile={failfile}",)

        async def on_error(self, task, error):
            attempts.append(error.attempt)
            return knarr.ErrorAction.RETRY

        async def on_task_complete(self, result):
            attempts.append(("ok", result.attempt))
            return await super().on_task_complete(result)

    cfg = kafka_config(kafka_bootstrap, src, out_topic=out)
    async with running(Worker(cfg, Flaky())):
        await wait_until(committed_to(kafka_bootstrap, cfg.kafka.consumer_group, src, {0: 1}))
    assert attempts == [1, 2, ("ok", 3)]
    assert len(consume_all(kafka_bootstrap, out, expected=1)) == 1


async def test_a_skipped_task_fails_its_group_and_the_offset_still_commits(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 1}, {"id": 2}])
    groups = []

    class Failing(Echo):
        behave = ("err=boom", "exit=5")

        async def on_message_complete(self, group):
            groups.append((group.failed, group.succeeded, group.errors[0].exit_code, group.errors[0].stderr.strip()))

    cfg = kafka_config(kafka_bootstrap, src, out_topic=out)
    async with running(Worker(cfg, Failing())):
        await wait_until(committed_to(kafka_bootstrap, cfg.kafka.consumer_group, src, {0: 2}))
    assert groups == [(1, 0, 5, "boom"), (1, 0, 5, "boom")]


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


async def test_a_timeout_kills_the_whole_process_group(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 1}])
    marker = f"30.{uuid.uuid4().int % 10**6:06d}"  # a unique sleep length identifies the grandchild
    errors = []

    class Slow(Echo):
        behave = (f"spawn={marker}", f"sleep={marker}")

        async def on_error(self, task, error):
            errors.append((error.reason, error.exception))
            return knarr.ErrorAction.SKIP

    cfg = kafka_config(kafka_bootstrap, src, out_topic=out, executor={"task_timeout_seconds": 1})
    async with running(Worker(cfg, Slow())):
        await wait_until(lambda: errors, 20, "the timeout")
        await wait_until(lambda: not _processes_with(marker), 5, "the process group to be gone")
    assert errors[0][0] == "timeout" and "timed out after 1s" in errors[0][1]
    assert not _processes_with(marker)


async def test_a_missing_binary_is_a_failed_task_with_a_clear_error(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 1}])
    errors = []

    class Missing(Echo):
        async def arrange(self, messages, pending):
            return [task.model_copy(update={"binary_path": "/nonexistent/knarr-tool"})
                    for task in await super().arrange(messages, pending)]

        async def on_error(self, task, error):
            errors.append(error)
            return knarr.ErrorAction.SKIP

    cfg = kafka_config(kafka_bootstrap, src, out_topic=out)
    async with running(Worker(cfg, Missing())):
        await wait_until(committed_to(kafka_bootstrap, cfg.kafka.consumer_group, src, {0: 1}))
    assert errors[0].reason == "launch" and errors[0].pid is None
    assert "cannot start '/nonexistent/knarr-tool': No such file or directory" in errors[0].exception


async def test_unparseable_messages_reach_arrange_with_no_payload_and_do_not_stall_the_partition(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    records = [{"id": 1}, "not json at all", {"id": "not-an-int"}, {"id": 4}]
    produce_json(kafka_bootstrap, src, records)
    seen = []

    class Typed(Echo):
        async def arrange(self, messages, pending):
            seen.extend((m.offset, m.payload.id if m.payload else None, m.parse_error is not None) for m in messages)
            return await super().arrange(messages, pending)

    cfg = kafka_config(kafka_bootstrap, src, out_topic=out)
    async with running(Worker(cfg, Typed())):
        await wait_until(committed_to(kafka_bootstrap, cfg.kafka.consumer_group, src, {0: 4}))
    assert sorted(seen) == [(0, 1, False), (1, None, True), (2, None, True), (3, 4, False)]
    assert sorted(m.json()["out"] for m in consume_all(kafka_bootstrap, out, expected=2)) == ["1:0", "4:0"]


async def test_an_offset_is_committed_only_after_its_kafka_outputs_are_confirmed(kafka_bootstrap):
    src, out = topics(kafka_bootstrap, partitions=2)
    produce_json(kafka_bootstrap, src, [{"id": i} for i in range(200)], key_fn=lambda r: str(r["id"]).encode())
    journal: list[tuple[str, int, int]] = []
    cfg = kafka_config(kafka_bootstrap, src, out_topic=out, executor={"window_size": 7})

    class Recording(Echo):
        behave = ("sleep=0.01",)

        async def on_task_complete(self, result):
            collect = await super().on_task_complete(result)
            await worker.sinks.deliver(collect, Origin(None))  # deliver here to record when it is confirmed
            for offset in result.task.source_offsets:
                journal.append(("confirmed", partition_of[result.task.task_id], offset))
            return None

        async def arrange(self, messages, pending):
            tasks = await super().arrange(messages, pending)
            for t in tasks:
                partition_of[t.task_id] = messages[0].partition
            return tasks

    partition_of: dict[str, int] = {}
    worker = Worker(cfg, Recording())
    async with running(worker):
        original = worker.source._commit_sync

        def recording_commit(commits):
            done = original(commits)
            for p, o in done.items():
                journal.append(("committed", p, o))
            return done

        worker.source._commit_sync = recording_commit
        await wait_until(lambda: sum(committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, src).values()) == 200)
    confirmed: set[tuple[int, int]] = set()
    commits = 0
    for kind, p, o in journal:
        if kind == "confirmed":
            confirmed.add((p, o))
        else:
            commits += 1
            missing = [x for x in range(o) if (p, x) not in confirmed and (p, x) in all_offsets(journal)]
            assert not missing, f"partition {p} committed {o} before outputs of {missing[:5]} were confirmed"
    assert commits > 0


def all_offsets(journal):
    return {(p, o) for kind, p, o in journal if kind == "confirmed"}


async def test_a_delivery_that_fails_goes_to_the_dlq_with_its_envelope(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 1, "text": "x" * 5000}])
    dlq = src + "_dlq"

    class Big(Echo):
        async def on_task_complete(self, result):
            return knarr.CollectResult(kafka=[knarr.KafkaPayload(data={"blob": "y" * 5000})])

    cfg = kafka_config(kafka_bootstrap, src, sinks={"kafka": {"out": {"topic": out, "extra": {"message.max.bytes": 2000}}}})
    async with running(Worker(cfg, Big())):
        await wait_until(committed_to(kafka_bootstrap, cfg.kafka.consumer_group, src, {0: 1}))
    [record] = consume_all(kafka_bootstrap, dlq, expected=1)
    envelope = record.json()
    assert envelope["sink_name"] == "out" and envelope["sink_type"] == "kafka"
    assert envelope["partition"] == 0 and envelope["attempt_count"] == 1
    assert "too large" in envelope["error"].lower() or "size" in envelope["error"].lower()
    assert json.loads(envelope["original_payloads"][0]) == {"blob": "y" * 5000}
    assert isinstance(envelope["timestamp"], float)


async def test_a_file_path_escaping_base_path_is_dead_lettered_not_written(kafka_bootstrap, tmp_path):
    src, _ = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 1}])

    class Escaping(Echo):
        async def on_task_complete(self, result):
            return knarr.CollectResult(files=[knarr.FilePayload(data={"x": 1}, path="../escape.jsonl")])

    base = tmp_path / "base"
    cfg = kafka_config(kafka_bootstrap, src, sinks={"filesystem": {"out": {"base_path": str(base)}}})
    async with running(Worker(cfg, Escaping())):
        await wait_until(committed_to(kafka_bootstrap, cfg.kafka.consumer_group, src, {0: 1}))
    assert not (tmp_path / "escape.jsonl").exists()
    [record] = consume_all(kafka_bootstrap, src + "_dlq", expected=1)
    assert "escapes base_path" in record.json()["error"]
