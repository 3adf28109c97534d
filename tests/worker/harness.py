"""Running a Worker in-process against the real broker, and waiting for what it does."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from knarr.config.loading import config_from_dict
from knarr.config.root import KnarrConfig
from knarr.engine.worker import Worker
from tests.services.kafka import create_topic, unique_name

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"
BEHAVE = str(PROGRAMS / "behave")
BEHAVE_PERSISTENT = [sys.executable, str(PROGRAMS / "behave_persistent.py")]  # behave's arguments, as a persistent program


def local_config(tmp_path: Path, *, log_format: str = "console", **executor: Any) -> KnarrConfig:
    """A worker for a MemorySource: outputs and dead letters to files under tmp_path, no metrics server."""
    return config_from_dict({
        "executor": executor,
        "sinks": {"filesystem": {"out": {"base_path": str(tmp_path)}}},
        "dlq": {"path": str(tmp_path / "dlq.jsonl")},
        "metrics": {"enabled": False}, "logging": {"level": "WARNING", "format": log_format},
    })


def kafka_config(bootstrap: str, topic: str, *, out_topic: str | None = None, tmp_path: Path | None = None,
                 executor: dict | None = None, sinks: dict | None = None, **sections: Any) -> KnarrConfig:
    group = unique_name("g")
    if sinks is None:
        sinks = {"kafka": {"out": {"topic": out_topic}}} if out_topic else {"filesystem": {"out": {"base_path": str(tmp_path)}}}
    data = {
        "kafka": {"brokers": bootstrap, "source_topic": topic, "consumer_group": group,
                  "session_timeout_ms": 6000, "heartbeat_interval_ms": 500},
        "executor": {"binary_path": BEHAVE, "max_executors": 4, "task_timeout_seconds": 20,
                     "retry_backoff_base_seconds": 0.01, "retry_backoff_max_seconds": 0.05,
                     "drain_timeout_seconds": 10, **(executor or {})},
        "sinks": sinks,
        "metrics": {"enabled": False},
        "logging": {"level": "WARNING", "format": "console"},
        **sections,
    }
    return config_from_dict(data)


def topics(bootstrap: str, partitions: int = 1) -> tuple[str, str]:
    src, out = unique_name("in"), unique_name("out")
    create_topic(bootstrap, src, partitions)
    create_topic(bootstrap, out, 1)
    return src, out


async def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``predicate`` (sync) until truthy or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = await asyncio.to_thread(predicate)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def running(worker: Worker):
    """Run the worker for the duration of the block, then stop it gracefully and check its exit code."""
    task = asyncio.create_task(worker.run())
    try:
        await wait_until(lambda: worker._ready or task.done(), 30, "the worker to start")
        if task.done():
            task.result()
        yield worker
    finally:
        worker.stop()
        code = await asyncio.wait_for(task, 60)
        worker.exit_code = code
