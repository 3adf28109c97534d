"""No input stops a partition: hostile outputs, raising hooks, unparsable messages and failing tasks
end in the DLQ (or as the policy says), and the messages after them are processed and committed.

Each test runs a real worker in-process against the real broker.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest
from pydantic import BaseModel

import knarr
from knarr.engine.worker import Worker
from knarr.errors import ExitCode
from tests.services.kafka import committed_offsets, consume_all, produce_json
from tests.worker.harness import BEHAVE_PERSISTENT, kafka_config, running, topics, wait_until

pytestmark = pytest.mark.kafka


class Item(BaseModel):
    id: int
    size: int = 0  # bytes of output the task should print
    fail: bool = False


class Echo(knarr.BaseHandler[Item, None]):
    """One task per message; its stdout goes to the Kafka sink."""

    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=[f"bytes={m.payload.size}" if m.payload.size else f"out={m.payload.id}",
                                         *(["exit=3"] if m.payload.fail else [])],
                                   source_offsets=[m.offset], metadata={"id": m.payload.id})
                for m in messages if m.payload is not None]

    async def on_task_complete(self, result):
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(data={"id": result.task.metadata["id"],
                                                                   "out": result.stdout.strip()})])


def committed(bootstrap, cfg, expected):
    return lambda: committed_offsets(bootstrap, cfg.kafka.consumer_group, cfg.kafka.source_topic) == expected


def dlq_records(bootstrap, cfg, count):
    return [m.json() for m in consume_all(bootstrap, cfg.dlq_topic, expected=count, timeout=15)]


async def test_a_result_larger_than_the_broker_accepts_is_dead_lettered_bounded_and_the_partition_goes_on(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 0}, {"id": 1, "size": 3_000_000}, {"id": 2}], key_fn=lambda r: f"k{r['id']}")
    cfg = kafka_config(kafka_bootstrap, src, out_topic=out)
    async with running(Worker(cfg, Echo())):
        await wait_until(committed(kafka_bootstrap, cfg, {0: 3}), what="all three offsets committed")

    assert sorted(m.json()["id"] for m in consume_all(kafka_bootstrap, out)) == [0, 2]
    [record] = dlq_records(kafka_bootstrap, cfg, 1)
    assert len(json.dumps(record)) <= cfg.dlq.max_record_bytes
    assert record["truncated"] is True
    assert (record["partition"], record["offsets"], record["keys"]) == (0, [1], ["k1"])
    full = json.dumps({"id": 1, "out": "x" * 3_000_000}, separators=(",", ":"))
    assert record["payload_sizes"] == [len(full)]
    assert record["payload_sha256"] == [hashlib.sha256(full.encode()).hexdigest()]
    assert full.startswith(record["original_payloads"][0]) and len(record["original_payloads"][0]) > 100_000
    assert "size" in record["error"].lower() or "large" in record["error"].lower()


async def test_a_dead_letter_the_dlq_refuses_is_dropped_and_counted_under_the_drop_policy(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 0, "size": 3_000_000}, {"id": 1}])
    # A DLQ record limit above what the producer may send: the DLQ itself refuses the record.
    cfg = kafka_config(kafka_bootstrap, src, out_topic=out,
                       dlq={"on_send_failure": "drop", "max_record_bytes": 10_000_000})
    worker = Worker(cfg, Echo())
    async with running(worker):
        await wait_until(committed(kafka_bootstrap, cfg, {0: 2}), 60, what="both offsets committed")
    assert [m.json()["id"] for m in consume_all(kafka_bootstrap, out)] == [1]
    assert consume_all(kafka_bootstrap, cfg.dlq_topic, timeout=2) == []
    assert worker.exit_code == 0


async def test_a_raising_on_window_complete_dead_letters_the_windows_messages_with_their_offsets(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": i} for i in range(3)])

    class WindowRaises(Echo):
        async def on_window_complete(self, results, source_messages):
            raise RuntimeError("summary store down")

    cfg = kafka_config(kafka_bootstrap, src, out_topic=out, executor={"window_linger_ms": 300})
    async with running(Worker(cfg, WindowRaises())):
        await wait_until(committed(kafka_bootstrap, cfg, {0: 3}), what="the window committed")
        records = dlq_records(kafka_bootstrap, cfg, 1)
    offsets = sorted(o for r in records for o in r["offsets"])
    assert offsets == [0, 1, 2]
    assert all(r["sink_name"] == "on_window_complete" and "summary store down" in r["error"] for r in records)


async def test_a_task_that_exhausts_its_retries_is_dead_lettered_by_default(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 0, "fail": True}, {"id": 1}])

    class Retrying(Echo):
        async def on_error(self, task, error):
            return knarr.ErrorAction.RETRY

    cfg = kafka_config(kafka_bootstrap, src, out_topic=out, executor={"max_retries": 2})
    async with running(Worker(cfg, Retrying())):
        await wait_until(committed(kafka_bootstrap, cfg, {0: 2}), what="both offsets committed")
        [record] = dlq_records(kafka_bootstrap, cfg, 1)
    assert (record["sink_name"], record["sink_type"], record["offsets"]) == ("task", "executor", [0])
    assert "retries exhausted after 3 attempt(s)" in record["error"] and "exit code 3" in record["error"]
    assert json.loads(record["original_payloads"][0]) == {"id": 0, "fail": True}


async def test_with_on_retries_exhausted_discard_a_failed_task_only_counts(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 0, "fail": True}, {"id": 1}])

    class Retrying(Echo):
        async def on_error(self, task, error):
            return knarr.ErrorAction.RETRY

    cfg = kafka_config(kafka_bootstrap, src, out_topic=out,
                       executor={"max_retries": 1, "on_retries_exhausted": "discard"})
    worker = Worker(cfg, Retrying())
    async with running(worker):
        await wait_until(committed(kafka_bootstrap, cfg, {0: 2}), what="both offsets committed")
    assert consume_all(kafka_bootstrap, cfg.dlq_topic, timeout=2) == []
    assert worker.stats.failed == 1 and worker.stats.dead_lettered == 0


@pytest.mark.parametrize("policy", ["dlq", "skip"])
async def test_a_message_that_does_not_parse_follows_on_parse_error(kafka_bootstrap, policy):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 0}, {"nope": True}, {"id": 2}])

    class Strict(Echo):
        async def arrange(self, messages, pending):
            assert all(m.payload is not None for m in messages), "an unparsed message reached arrange()"
            return await super().arrange(messages, pending)

    cfg = kafka_config(kafka_bootstrap, src, out_topic=out, source={"on_parse_error": policy})
    worker = Worker(cfg, Strict())
    async with running(worker):
        await wait_until(committed(kafka_bootstrap, cfg, {0: 3}), what="all three committed")
    assert sorted(m.json()["id"] for m in consume_all(kafka_bootstrap, out)) == [0, 2]
    if policy == "dlq":
        [record] = dlq_records(kafka_bootstrap, cfg, 1)
        assert (record["sink_name"], record["offsets"]) == ("parse", [1])
        assert "id" in record["error"]
    else:
        assert consume_all(kafka_bootstrap, cfg.dlq_topic, timeout=2) == []


async def test_an_arrange_result_larger_than_max_tasks_per_window_is_dead_lettered_not_buffered(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 0}])

    class Flood(Echo):
        async def arrange(self, messages, pending):
            return [knarr.ExecutorTask(args=["out=x"], source_offsets=[messages[0].offset]) for _ in range(100_001)]

    cfg = kafka_config(kafka_bootstrap, src, out_topic=out, executor={"max_tasks_per_window": 100_000})
    worker = Worker(cfg, Flood())
    async with running(worker):
        await wait_until(committed(kafka_bootstrap, cfg, {0: 1}), what="the offset committed")
        [record] = dlq_records(kafka_bootstrap, cfg, 1)
    assert record["sink_name"] == "arrange"
    assert "100001 tasks" in record["error"] and "executor.max_tasks_per_window (100000)" in record["error"]
    assert worker.stats.tasks == 0


async def test_a_processor_that_dies_is_restarted_once_then_the_partition_is_failed(kafka_bootstrap, monkeypatch):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 0}])
    cfg = kafka_config(kafka_bootstrap, src, out_topic=out)
    worker = Worker(cfg, Echo())
    from knarr.engine.ledger import Ledger

    real_take, deaths = Ledger.take, []

    def take(self, messages):
        # An engine bug: offset 1 breaks the processor once, offset 2 every time.
        offset = messages[0].offset
        if (offset == 1 and 1 not in deaths) or offset == 2:
            deaths.append(offset)
            raise RuntimeError(f"engine bug at offset {offset}")
        return real_take(self, messages)

    monkeypatch.setattr(Ledger, "take", take)
    async with running(worker):
        await wait_until(committed(kafka_bootstrap, cfg, {0: 1}), what="the first message committed")
        produce_json(kafka_bootstrap, src, [{"id": 1}])
        await wait_until(committed(kafka_bootstrap, cfg, {0: 2}), what="offset 1 processed after the restart")
        assert deaths == [1] and worker._readiness()[0]
        produce_json(kafka_bootstrap, src, [{"id": 2}, {"id": 3}])
        await wait_until(lambda: not worker._readiness()[0], what="readiness to fail after the second death")
        reason = worker._readiness()[1]
        assert "partition 0 failed twice" in reason and "engine bug at offset 2" in reason
        assert "engine bug at offset 2" in worker._failure()  # /healthz fails too: the liveness probe restarts the pod
    assert worker.exit_code == ExitCode.DRAIN_INCOMPLETE  # a failed partition does not drain clean
    assert committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, src) == {0: 2}
    assert sorted(m.json()["id"] for m in consume_all(kafka_bootstrap, out)) == [0, 1]


# --- a broken handler never silently diverts traffic ----------------------------------------------
class PoisonAware(Echo):
    """arrange() raises for any window holding a message whose id is in ``poison`` (or for all, when broken)."""

    def __init__(self, poison: set[int] = frozenset(), broken: bool = False) -> None:
        self.poison = set(poison)
        self.broken = broken
        self.calls = 0

    async def arrange(self, messages, pending):
        self.calls += 1
        if self.broken:
            raise KeyError("labels")  # e.g. a Drakkar-only task field: every window fails
        bad = [m.payload.id for m in messages if m.payload.id in self.poison]
        if bad:
            raise ValueError(f"cannot plan request {bad[0]}")
        return await super().arrange(messages, pending)


async def test_arrange_failing_on_one_message_dead_letters_that_message_only(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": i} for i in range(8)])
    cfg = kafka_config(kafka_bootstrap, src, out_topic=out, executor={"window_linger_ms": 500})
    async with running(Worker(cfg, PoisonAware(poison={5}))):
        await wait_until(committed(kafka_bootstrap, cfg, {0: 8}), what="all eight committed")
        [record] = dlq_records(kafka_bootstrap, cfg, 1)
    assert (record["sink_name"], record["offsets"]) == ("arrange", [5])
    assert "cannot plan request 5" in record["error"]
    assert sorted(m.json()["id"] for m in consume_all(kafka_bootstrap, out)) == [0, 1, 2, 3, 4, 6, 7]


async def test_arrange_failing_on_every_message_stalls_the_partition_and_resumes_once_fixed(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": i} for i in range(4)])
    cfg = kafka_config(kafka_bootstrap, src, out_topic=out, executor={"window_linger_ms": 300})
    handler = PoisonAware(broken=True)
    worker = Worker(cfg, handler)
    async with running(worker):
        await wait_until(lambda: not worker._readiness()[0], 30, "readiness to report the stall")
        reason = worker._readiness()[1]
        assert "partition 0 stalled: arrange() fails on every message" in reason and "labels" in reason
        calls = handler.calls
        await wait_until(lambda: handler.calls > calls, 10, "a retry of the stalled window")
        assert committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, src) == {}
        assert consume_all(kafka_bootstrap, cfg.dlq_topic, timeout=1) == []
        handler.broken = False  # the fix is deployed (a Secret/config change, a dependency back)
        await wait_until(committed(kafka_bootstrap, cfg, {0: 4}), 60, "the partition to resume by itself")
        assert worker._readiness()[0]
    assert consume_all(kafka_bootstrap, cfg.dlq_topic, timeout=1) == []
    assert sorted(m.json()["id"] for m in consume_all(kafka_bootstrap, out)) == [0, 1, 2, 3]


async def test_raising_task_priority_message_label_and_deserialize_fall_back_to_their_defaults(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 0}, {"id": 1}])

    class Clumsy(Echo):
        def task_priority(self, task):
            return task.metadata["missing"]  # KeyError on every task

        def message_label(self, msg):
            raise RuntimeError("no label")

        def deserialize_message(self, msg):
            if msg.offset == 1:
                raise ValueError("odd offset")
            super().deserialize_message(msg)

    cfg = kafka_config(kafka_bootstrap, src, out_topic=out)
    worker = Worker(cfg, Clumsy())
    async with running(worker):
        await wait_until(committed(kafka_bootstrap, cfg, {0: 2}), what="both committed")
    assert worker.exit_code == 0
    assert [m.json()["id"] for m in consume_all(kafka_bootstrap, out)] == [0]  # offset 1 arrived unparsed


@pytest.mark.parametrize("executor", [{}, {"persistent": {"command": BEHAVE_PERSISTENT}}], ids=["spawned", "persistent"])
async def test_a_payload_naming_a_sink_that_is_not_configured_stops_the_worker_before_committing(kafka_bootstrap, executor):
    # A handler bug, not a bad message: nothing of it is committed, so the fixed handler sees the messages again.
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 0}, {"id": 1}])

    class Misaddressed(Echo):
        async def on_task_complete(self, result):
            return knarr.CollectResult(kafka=[knarr.KafkaPayload(data={"id": 0}, sink="results")])

    cfg = kafka_config(kafka_bootstrap, src, out_topic=out, executor=executor)
    worker = Worker(cfg, Misaddressed())
    code = await asyncio.wait_for(worker.run(), 60)  # it stops by itself

    assert code == ExitCode.FATAL
    assert "names sink 'results'" in str(worker.fatal) and "sinks.kafka.results" in str(worker.fatal)
    assert committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, src) == {}
    assert consume_all(kafka_bootstrap, out, timeout=2) == []
