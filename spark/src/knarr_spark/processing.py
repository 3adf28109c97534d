"""Inside one Spark task: the streaming worker's engine over one chunk of history.

The chunk's messages go through the very same ``Worker`` as in streaming — windows,
arrange(), the subprocess pool, every hook including on_message_complete, sinks and the
DLQ — fed by a bounded ``MemorySource`` instead of a consumer group, so nothing is committed
to Kafka. A chunk that cannot be finished raises, and Spark runs the task again: the chunk is
reprocessed as a whole (at least once, as in streaming).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from knarr.api.messages import SourceMessage
from knarr.config.loading import config_from_dict
from knarr.config.root import KnarrConfig, dump_config
from knarr.loader import load_handler_class
from knarr.engine.worker import Worker
from knarr.sources.memory import MemorySource
from knarr_spark.planning import Chunk
from knarr_spark.report import ChunkResult


class ChunkFailed(RuntimeError):
    """The chunk could not be processed; Spark retries the task."""


@dataclass(frozen=True)
class ChunkJob:
    """Everything a Spark task needs, as plain data (it is pickled to the executors)."""

    config: dict[str, Any]  # the worker's config, with metrics disabled (see task_config)
    handler: str  # "module:Class" or "file.py:Class", imported on the executor
    max_attempts: int  # Spark's task attempts; the last one reports a failure instead of raising


def task_config(config: KnarrConfig) -> dict[str, Any]:
    """The worker's config as plain data, with the metrics/probe server off: many in-task
    workers share an executor host and would fight over the port."""
    data = dump_config(config)
    data["metrics"] = {**data.get("metrics", {}), "enabled": False}
    return data


def run_chunk(chunk: Chunk, messages: list[SourceMessage], job: ChunkJob, attempt: int) -> ChunkResult:
    """Process ``messages`` (the chunk's, in offset order) with the handler; one result for the driver.

    Raises :class:`ChunkFailed` while Spark has attempts left, so the task is retried; on the
    last attempt the failure is returned instead, so the other chunks' results still arrive.
    """
    started = time.monotonic()
    result = ChunkResult(index=chunk.index, partition=chunk.partition, start=chunk.start, end=chunk.end, attempt=attempt)
    try:
        worker = Worker(config_from_dict(job.config), load_handler_class(job.handler)(), source=MemorySource(messages))
        code = asyncio.run(worker.run()) if messages else 0
        if code != 0:
            raise ChunkFailed(f"the worker stopped with exit code {code} (a fatal error; see the executor log)")
    except Exception as exc:
        if attempt < job.max_attempts:
            raise ChunkFailed(f"chunk {chunk.index}, {chunk.label}, attempt {attempt}: {type(exc).__name__}: {exc}") from exc
        result.ok = False
        result.error = f"{type(exc).__name__}: {exc}"
        result.duration_seconds = time.monotonic() - started
        return result
    if messages:
        for key, value in worker.stats.as_dict().items():
            setattr(result, key, value)
    result.duration_seconds = time.monotonic() - started
    return result
