"""Shutdown and dead-lettering while a broker does not answer (this session's private broker, SIGSTOPped).

- SIGTERM while the source broker is stopped ends the worker within drain_timeout_seconds plus
  the shutdown grace, commits nothing it cannot confirm, and says so in its exit code; what it
  left is processed after a restart.
- A DLQ that refuses records stalls only the offsets waiting for it (readiness says why), and
  the partition resumes by itself once the DLQ answers again.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from knarr.engine.worker import SHUTDOWN_GRACE_SECONDS, SHUTDOWN_STEP_SECONDS, Worker
from knarr.errors import ExitCode
from tests.services.kafka import (
    PrivateBroker,
    committed_offsets,
    consume_all,
    create_topic,
    end_offsets,
    produce_json,
    unique_name,
)
from tests.worker.harness import kafka_config, running, wait_until
from tests.worker.procs import WorkerFleet, WorkerSpec, caught_up, outputs_by_kind, wait_until as wait_until_sync
from tests.worker.test_hardening import Echo

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

DRAIN_TIMEOUT = 5.0


def test_sigterm_with_the_broker_stopped_exits_within_the_drain_timeout_and_loses_nothing(
    private_kafka: PrivateBroker, tmp_path: Path
) -> None:
    bootstrap = private_kafka.bootstrap
    topic, output = unique_name("down-in"), unique_name("down-out")
    create_topic(bootstrap, topic, partitions=2)
    create_topic(bootstrap, output, partitions=1)
    requests = [{"request_id": f"r{i}", "sleep": 0.05} for i in range(400)]
    produce_json(bootstrap, topic, requests, key_fn=lambda r: r["request_id"])
    ends = end_offsets(bootstrap, topic)
    spec = WorkerSpec(bootstrap, topic, unique_name("down-group"), output, max_executors=2, window_size=5,
                      max_poll_records=20, drain_timeout_seconds=DRAIN_TIMEOUT,
                      session_timeout_ms=30_000, heartbeat_interval_ms=3_000)

    with WorkerFleet(spec, tmp_path, unique_name("knarrdown")) as fleet:
        first = fleet.start("w1")
        first.wait_consuming()
        wait_until_sync(lambda: committed_offsets(bootstrap, spec.group, topic), 60, "a first commit")
        private_kafka.pause()
        try:
            started = time.monotonic()
            code = first.terminate(timeout=DRAIN_TIMEOUT + SHUTDOWN_GRACE_SECONDS + 20)
            took = time.monotonic() - started
        finally:
            private_kafka.resume()
        print(f"SIGTERM to exit with the broker stopped: {took:.1f}s (exit {code})")
        # drain, then closing the sinks and the consumer side by side; the final commit is skipped
        assert took <= DRAIN_TIMEOUT + 2 * SHUTDOWN_STEP_SECONDS + 2, first.log_tail()
        assert code == ExitCode.DRAIN_INCOMPLETE, first.log_tail()

        second = fleet.start("w2")
        wait_until_sync(lambda: caught_up(committed_offsets(bootstrap, spec.group, topic), ends), 120,
                        "the restarted worker to commit everything")
        assert second.terminate() == 0

    summaries = outputs_by_kind(consume_all(bootstrap, output), "message")
    assert {s["request_id"] for s in summaries} == {r["request_id"] for r in requests}


async def test_a_dlq_that_refuses_records_stalls_the_partition_until_it_answers_again(
    private_kafka: PrivateBroker, kafka_bootstrap: str
) -> None:
    source, out = unique_name("stall-in"), unique_name("stall-out")
    create_topic(kafka_bootstrap, source, 1)
    create_topic(kafka_bootstrap, out, 1)
    dlq_topic = unique_name("stall-dlq")
    create_topic(private_kafka.bootstrap, dlq_topic, 1)
    cfg = kafka_config(kafka_bootstrap, source, out_topic=out, dlq={
        "brokers": private_kafka.bootstrap, "topic": dlq_topic, "on_send_failure": "stall",
        "extra": {"message.timeout.ms": 1500, "socket.timeout.ms": 1000},
    })
    worker = Worker(cfg, Echo())
    async with running(worker):
        produce_json(kafka_bootstrap, source, [{"id": 0}])
        await wait_until(lambda: committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, source) == {0: 1})
        private_kafka.pause()
        try:
            # Offset 1 needs the DLQ (its output is too large for the sink); offset 2 is fine.
            produce_json(kafka_bootstrap, source, [{"id": 1, "size": 3_000_000}, {"id": 2}])
            await wait_until(lambda: not worker._readiness()[0], 60, "readiness to report the stall")
            assert "stalled: partition 0: DLQ" in worker._readiness()[1]
            await wait_until(lambda: sorted(m.json()["id"] for m in consume_all(kafka_bootstrap, out, timeout=1)) == [0, 2],
                             30, "offset 2 processed meanwhile")
            assert committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, source) == {0: 1}
        finally:
            private_kafka.resume()
        await wait_until(lambda: committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, source) == {0: 3}, 60,
                         "the partition to resume once the DLQ answers")
        assert worker._readiness()[0]
    # A send that timed out while the broker was stopped may still land when it continues: the DLQ
    # is at-least-once too, so the record can be there more than once.
    records = [m.json() for m in consume_all(private_kafka.bootstrap, dlq_topic)]
    assert records and all(r["offsets"] == [1] and r["truncated"] is True for r in records)
    assert worker.exit_code == 0


