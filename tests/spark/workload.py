"""The backfill tests' workload: demo search requests, configs, and running the streaming worker."""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

from knarr.api.messages import SourceMessage
from knarr.config.loading import config_from_dict
from knarr.config.root import KnarrConfig
from knarr.demo.data import PATTERNS
from knarr.demo.handler import SearchHandler
from knarr.engine.worker import Worker
from knarr.sources.memory import MemorySource

DEMO_HANDLER = "knarr.demo.handler:SearchHandler"
HANDLERS_FILE = Path(__file__).with_name("handlers.py")


def requests(corpus: list[Path], count: int, prefix: str = "req", seed: int = 3) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"request_id": f"{prefix}-{i:04d}", "patterns": rng.sample(PATTERNS, k=rng.randint(1, 3)),
         "file_paths": [str(p) for p in rng.sample(corpus, k=rng.randint(1, 2))]}
        for i in range(count)
    ]


def config_dict(out: Path, grep: str, *, brokers: str = "127.0.0.1:1", topic: str = "search-requests",
                group: str = "backfill-tests", env: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "kafka": {"brokers": brokers, "source_topic": topic, "consumer_group": group},
        "executor": {"binary_path": grep, "max_executors": 2, "window_size": 5, "task_timeout_seconds": 30,
                     "env": env or {}},
        "sinks": {"filesystem": {"results": {"base_path": str(out)}}},
        "dlq": {"path": str(out / "dlq.jsonl")},
        "metrics": {"enabled": False},
        "logging": {"level": "WARNING", "format": "console"},
    }


def write_config(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data))  # JSON is YAML
    return path


def rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def by_request(path: Path) -> dict[str, dict[str, Any]]:
    """Summaries keyed by request id; asserts none is written twice."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows(path):
        assert row["request_id"] not in out, f"summary of {row['request_id']} written twice"
        out[row["request_id"]] = row
    return out


def matches(path: Path) -> list[tuple[str, str, str, int]]:
    return sorted((r["request_id"], r["pattern"], r["file_path"], r["match_count"]) for r in rows(path))


def run_in_memory(config: KnarrConfig, messages: list[SourceMessage]) -> int:
    """The streaming engine over a fixed list of messages (what a backfill chunk does, unsplit)."""
    return asyncio.run(Worker(config, SearchHandler(), source=MemorySource(messages)).run())


async def run_streaming_until(config_data: dict[str, Any], summaries: Path, expected: int, timeout: float = 120) -> None:
    """Run the streaming worker on Kafka until ``expected`` summaries arrived, then stop it."""
    worker = Worker(config_from_dict(config_data), SearchHandler())
    running = asyncio.create_task(worker.run())
    deadline = time.monotonic() + timeout
    try:
        while len(rows(summaries)) < expected:
            assert not running.done(), f"the streaming worker stopped early (exit {running.result()})"
            assert time.monotonic() < deadline, f"only {len(rows(summaries))} of {expected} summaries after {timeout}s"
            await asyncio.sleep(0.1)  # polling the output file, bounded by the deadline
    finally:
        worker.stop()
        code = await asyncio.wait_for(running, 60)
    assert code == 0


def produce_at(bootstrap: str, topic: str, records: list[dict[str, Any]], timestamp_ms: int) -> None:
    """Produce ``records`` keyed by request id, all stamped with ``timestamp_ms`` (CreateTime)."""
    from knarr.kafka.clients import close_producer, open_producer

    producer = open_producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[str] = []
    for record in records:
        producer.produce(topic, json.dumps(record).encode(), key=str(record.get("request_id", "")).encode(),
                         timestamp=timestamp_ms, on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
    assert close_producer(producer, flush_timeout=30) == 0, "records not delivered within 30s"
    assert not errors, errors
