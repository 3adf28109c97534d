"""``knarr demo --kafka HOST:PORT``: the same fan-out example on a real broker."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import NewTopic

from knarr.config.loading import config_from_dict
from knarr.kafka import settings
from knarr.kafka.clients import close_consumer, close_producer, open_consumer, open_producer, shared_admin
from knarr.demo.handler import SearchHandler
from knarr.engine import event_loop
from knarr.engine.worker import Worker


def _ensure_topics(bootstrap: str, names: dict[str, int]) -> None:
    admin = shared_admin(settings.connection(bootstrap))
    existing = set(admin.list_topics(timeout=10).topics)
    new = [NewTopic(n, num_partitions=p, replication_factor=1) for n, p in names.items() if n not in existing]
    for fut in admin.create_topics(new).values() if new else []:
        fut.result(30)


def _produce(bootstrap: str, topic: str, lines: list[bytes]) -> None:
    producer = open_producer(settings.connection(bootstrap))
    for i, line in enumerate(lines):
        producer.produce(topic, line, key=str(i).encode())
    if close_producer(producer, flush_timeout=30):
        raise RuntimeError(f"could not produce the demo requests to {topic!r}")


def _read(bootstrap: str, topic: str, expected: int, timeout: float) -> list[dict]:
    consumer = open_consumer({**settings.connection(bootstrap), "group.id": f"knarr-demo-reader-{uuid.uuid4().hex[:6]}",
                              "auto.offset.reset": "earliest", "enable.auto.commit": False})
    rows: list[dict] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(rows) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                rows.append(json.loads(msg.value()))
    finally:
        close_consumer(consumer)
    return rows


def run_on_kafka(base: Path, requests: Path, bootstrap: str, grep: str) -> int:
    run_id = uuid.uuid4().hex[:6]
    source, matches, summaries = f"search-requests-{run_id}", f"search-matches-{run_id}", f"search-summaries-{run_id}"
    _ensure_topics(bootstrap, {source: 3, matches: 1, summaries: 1})
    lines = [line for line in requests.read_bytes().splitlines() if line.strip()]
    _produce(bootstrap, source, lines)
    config = config_from_dict({
        "kafka": {"brokers": bootstrap, "source_topic": source, "consumer_group": f"knarr-demo-{run_id}"},
        "executor": {"binary_path": grep, "max_executors": 4, "window_size": 10, "task_timeout_seconds": 30},
        "sinks": {"kafka": {"matches": {"topic": matches}, "summaries": {"topic": summaries}}},
        "metrics": {"enabled": False},
        "logging": {"level": "WARNING", "format": "console"},
    })
    worker = Worker(config, SearchHandler())

    async def main() -> int:
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 120
        while worker.stats.messages < len(lines) and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.2)
        worker.stop()
        return await task

    code = event_loop.run(main(), config.event_loop, config.gc_threshold)
    rows = _read(bootstrap, summaries, len(lines), 30)
    print(f"knarr demo on Kafka {bootstrap}: {len(lines)} requests on {source!r} -> {len(rows)} summaries on {summaries!r}")
    for row in rows[:5]:
        print("  " + json.dumps(row))
    print(f"per-task matches are on {matches!r}; offsets committed for group 'knarr-demo-{run_id}'")
    return code if len(rows) >= len(lines) else 1
