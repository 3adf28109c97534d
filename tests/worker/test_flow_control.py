"""Flow on the real broker: a partition flooded by fan-out is paused alone, the others flow; outputs
waiting on a slow sink do not leave the pool idle, and what waits on a stalled one is bounded apart
from the work; a backlog is worked on every partition at once.

The worker holds (takes no messages) when its load reaches the high watermark. A partition
whose own load is beyond what polling alone could bring — here one message fanning out to
hundreds of tasks — is paused at the Kafka client and left out of the hold, so messages on
the other partitions are still consumed and run beside the flood.

Behind a backlog the client's fetches decide the order: the worker takes messages in the order
they were fetched, so a fetch that brings a lot of one partition holds every other one back
until it has been worked through (knarr.kafka.settings).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

import knarr
from knarr.engine.worker import Worker
from knarr.sinks import producer as producing

from tests.programs.handlers import TaggedHandler
from tests.services.kafka import committed_offsets, consume_all, produce_json, produce_values
from tests.worker.harness import kafka_config, running, topics, wait_until

pytestmark = pytest.mark.kafka

FLOOD_TASKS = 240
TASK_SECONDS = 0.05  # 240 tasks x 50 ms on 2 slots: about 6 s of flood


def outputs(bootstrap: str, topic: str) -> list[dict]:
    return [m.json() for m in consume_all(bootstrap, topic, timeout=5)]


async def test_a_partition_flooded_by_fan_out_does_not_hold_back_the_others(kafka_bootstrap: str) -> None:
    src, out = topics(kafka_bootstrap, partitions=2)
    config = kafka_config(kafka_bootstrap, src, out_topic=out,
                          executor={"max_executors": 2, "backpressure_high_multiplier": 4,
                                    "backpressure_low_multiplier": 1})
    config.kafka.max_poll_records = 10  # flooded at high (8) + one batch (10)
    async with running(Worker(config, TaggedHandler())):
        produce_json(kafka_bootstrap, src, [{"request_id": "flood", "fanout": FLOOD_TASKS, "sleep": TASK_SECONDS}],
                     partition=0)
        await wait_until(lambda: any(o.get("request_id") == "flood" for o in outputs(kafka_bootstrap, out)),
                         30, "the flood's first task outputs")
        await wait_until(lambda: REGISTRY.get_sample_value("knarr_partitions_paused") == 1, 10,
                         "the flooded partition to be paused at the client")
        assert REGISTRY.get_sample_value("knarr_backpressure_active") == 1

        produce_json(kafka_bootstrap, src, [{"request_id": f"trickle-{i}"} for i in range(3)], partition=1)
        seen = await wait_until(
            lambda: (o := outputs(kafka_bootstrap, out))
            and {x["request_id"] for x in o if x["kind"] == "message"} >= {"trickle-0", "trickle-1", "trickle-2"}
            and o,
            30, "the other partition's messages to complete",
        )
        flood_tasks_done = sum(1 for x in seen if x["kind"] == "task" and x["request_id"] == "flood")
        flood_summary = [x for x in seen if x["kind"] == "message" and x["request_id"] == "flood"]
        assert not flood_summary and flood_tasks_done < FLOOD_TASKS, (
            f"the trickle finished only after the flood ({flood_tasks_done} of {FLOOD_TASKS} flood tasks done)")

        await wait_until(lambda: any(x["kind"] == "message" and x["request_id"] == "flood"
                                     for x in outputs(kafka_bootstrap, out)), 60, "the flood to finish")
        await wait_until(lambda: REGISTRY.get_sample_value("knarr_partitions_paused") == 0, 10,
                         "the drained partition to be resumed")
        await wait_until(lambda: REGISTRY.get_sample_value("knarr_backpressure_active") == 0, 10,
                         "backpressure to switch off")


SINK_HANG_SECONDS = 10


class OutputPerTask(knarr.BaseHandler):
    """One behave task per message; its output, to the http sink, names the message (its JSON text)."""

    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=["out=done"], metadata={"name": json.loads(m.value)}, source_offsets=[m.offset])
                for m in messages]

    async def on_task_complete(self, result):
        return knarr.CollectResult(http=[knarr.HttpPayload(data={"name": result.task.metadata["name"]})])


async def test_outputs_waiting_on_a_slow_sink_leave_the_pool_no_idle_slot(kafka_bootstrap: str,
                                                                           http_server) -> None:
    # High watermark 8, low 2, four messages a poll; at most 6 tasks awaiting the sinks, resuming
    # at 3. The first four messages' outputs hang in the sink; the worker takes eight messages and
    # holds. Once the other four are done, the work is done and four tasks await the sink, above
    # their low watermark, with the pool idle: the hold ends there, not when the sink answers.
    src, _ = topics(kafka_bootstrap)
    http_server.fail(200, -1, match="slow", hang=SINK_HANG_SECONDS)
    config = kafka_config(kafka_bootstrap, src, sinks={"http": {"out": {"url": http_server.url(), "timeout_seconds": 60}}},
                          executor={"max_executors": 1, "backpressure_high_multiplier": 8,
                                    "backpressure_low_multiplier": 2, "backpressure_delivery_multiplier": 6})
    config.kafka.max_poll_records = 4
    async with running(Worker(config, OutputPerTask())):
        started = time.monotonic()
        produce_json(kafka_bootstrap, src, [f"slow-{i}" for i in range(4)] + [f"fast-{i}" for i in range(20)])

        def names() -> list[str]:
            return [body["name"] for body in http_server.accepted()]

        await wait_until(lambda: sum(name.startswith("fast") for name in names()) == 20, SINK_HANG_SECONDS - 2,
                         "every fast message's output while the slow ones' wait on the sink")
        assert not any(name.startswith("slow") for name in names())
        assert time.monotonic() - started < SINK_HANG_SECONDS
        await wait_until(lambda: len(names()) == 24, 30, "the slow outputs once the sink answers")


STALLED_MESSAGES = 40


class OutputPerMessage(OutputPerTask):
    """OutputPerTask's output made by on_message_complete instead: its task has none of its own."""

    async def on_task_complete(self, result):
        return None

    async def on_message_complete(self, group):
        return knarr.CollectResult(http=[knarr.HttpPayload(data={"name": json.loads(group.source_message.value)})])


@pytest.mark.parametrize("handler", [OutputPerTask, OutputPerMessage], ids=["task outputs", "message outputs"])
async def test_what_waits_on_a_stalled_sink_is_bounded_apart_from_the_work(kafka_bootstrap: str, http_server,
                                                                           handler) -> None:
    # The sink's process is stopped (SIGSTOP): it takes connections and answers nothing. The work's
    # watermark (8, one slot) alone would let the worker take every message, a few at a time, as
    # their tasks end and their outputs pile up waiting on the sink; what awaits the sink has a
    # bound of its own (2), and there the worker holds, its pool idle, until the sink answers
    # again. At most: the work in flight when the bound is reached (8 + one poll of 2), and the 2
    # awaiting the sink. The same whether the outputs are a task's or its message's.
    src, _ = topics(kafka_bootstrap)
    config = kafka_config(kafka_bootstrap, src, sinks={"http": {"out": {"url": http_server.url(), "timeout_seconds": 60}}},
                          executor={"max_executors": 1, "backpressure_high_multiplier": 8,
                                    "backpressure_low_multiplier": 4, "backpressure_delivery_multiplier": 2})
    config.kafka.max_poll_records = 2
    async with running(Worker(config, handler())) as worker:
        await wait_until(lambda: worker.processors, 30, "the partition's assignment")
        http_server.pause()
        try:
            produce_json(kafka_bootstrap, src, [f"m{i}" for i in range(STALLED_MESSAGES)])
            await wait_until(lambda: worker._delivering() >= 2, 30, "two tasks awaiting the stalled sink")
            await asyncio.sleep(3)  # long enough for every task to run, were nothing holding the messages back
            # none has completed: the taken are queued, in flight, or closing with their outputs at the sink
            taken = sum(p.queued + p.ledger.in_flight + p._closing_deliveries for p in worker.processors.values())
            assert worker._flow.hold and REGISTRY.get_sample_value("knarr_backpressure_active") == 1
            assert REGISTRY.get_sample_value("knarr_tasks_delivering") == worker._delivering() == taken
            assert taken <= 12, f"took {taken} of {STALLED_MESSAGES} messages while their outputs could not leave"
        finally:
            http_server.resume()
        await wait_until(lambda: len(http_server.accepted()) == STALLED_MESSAGES, 60,
                         "every output once the sink answers again")


REPORT_TIMER_SECONDS = 2.0
CONFIRMED_MESSAGES = 24


class KafkaOutputPerTask(OutputPerTask):
    """OutputPerTask's output to the Kafka sink: a task stays in flight until the broker confirms it."""

    async def on_task_complete(self, result):
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(data={"name": result.task.metadata["name"]})])


async def test_a_hold_that_waits_only_on_the_brokers_confirmations_hears_of_them_without_the_timer(
        kafka_bootstrap: str, monkeypatch) -> None:
    # High watermark 4, low 1, one slot, at most 4 tasks awaiting the sinks: the worker takes four
    # messages and holds. Their tasks end in milliseconds; then the four wait for the broker to confirm
    # their outputs, with the pool idle and the tasks awaiting the sinks at their high watermark, so
    # the hold can end only when those confirmations are heard of.
    # The producer serves its reports from a timer when nothing is produced, stretched to 2 s here:
    # heard of by that timer, 24 messages would take six holds of about 2 s each.
    monkeypatch.setattr(producing, "REPORT_WAIT_SECONDS", REPORT_TIMER_SECONDS)
    src, out = topics(kafka_bootstrap)
    config = kafka_config(kafka_bootstrap, src, out_topic=out,
                          executor={"max_executors": 1, "backpressure_high_multiplier": 4,
                                    "backpressure_low_multiplier": 1, "backpressure_delivery_multiplier": 4})
    config.kafka.max_poll_records = 4
    async with running(Worker(config, KafkaOutputPerTask())) as worker:
        await wait_until(lambda: worker.processors, 30, "the partition's assignment")
        started = time.monotonic()
        produce_json(kafka_bootstrap, src, [f"m{i}" for i in range(CONFIRMED_MESSAGES)])
        seen = await asyncio.to_thread(consume_all, kafka_bootstrap, out, CONFIRMED_MESSAGES, 60)
        took = time.monotonic() - started
    assert len(seen) == CONFIRMED_MESSAGES
    assert took < REPORT_TIMER_SECONDS * 2, f"{CONFIRMED_MESSAGES} messages took {took:.1f}s: holds waited for the timer"


BACKLOG_PARTITIONS = 8
BACKLOG_PER_PARTITION = 15_000  # some 20 bytes each on the log: about 300 KB a partition
BACKLOG_LOOK = 30_000  # committed messages after which every partition must be under way


class NoTasks(knarr.BaseHandler):
    """Every message completes at once, without a task: the client's fetches are all that paces it."""

    async def arrange(self, messages, pending):
        return []


def fill_backlog(bootstrap: str, topic: str) -> None:
    """Each partition's messages in small producer batches, as many producers over time would write them."""
    produce_values(bootstrap, topic, ((partition, json.dumps({"i": i}).encode())
                                      for partition in range(BACKLOG_PARTITIONS) for i in range(BACKLOG_PER_PARTITION)),
                   {"linger.ms": 5, "batch.num.messages": 200})


async def test_a_backlog_is_worked_on_every_partition_at_once_not_one_after_another(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    # With librdkafka's own fetch sizes (1 MiB of each partition) this backlog comes in whole
    # partitions, one after another in the client's queue: after 30,000 messages three of the eight
    # had been touched. knarr fetches 64 KiB of each partition at a time.
    src, _ = topics(kafka_bootstrap, partitions=BACKLOG_PARTITIONS)
    fill_backlog(kafka_bootstrap, src)
    config = kafka_config(kafka_bootstrap, src, tmp_path=tmp_path)
    async with running(Worker(config, NoTasks())):
        committed = await wait_until(
            lambda: (c := committed_offsets(kafka_bootstrap, config.kafka.consumer_group, src))
            and sum(c.values()) >= BACKLOG_LOOK and c,
            60, f"{BACKLOG_LOOK} messages committed")
    untouched = sorted(set(range(BACKLOG_PARTITIONS)) - {p for p, offset in committed.items() if offset > 0})
    assert not untouched, f"partitions {untouched} had not been started after {sum(committed.values())} messages: {committed}"
