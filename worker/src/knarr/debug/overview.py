"""The live overview of a worker: partitions, pool slots, backpressure, throughput.

Read from the worker's objects on the event loop (no I/O), for ``GET /api/overview`` and the
recorder's periodic ``worker_state`` snapshots.
"""

from __future__ import annotations

import time
from typing import Any

THROUGHPUT_WINDOW_SECONDS = 10.0


class Throughput:
    """Messages and tasks per second over roughly the last THROUGHPUT_WINDOW_SECONDS."""

    def __init__(self) -> None:
        self._samples: list[tuple[float, int, int]] = []

    def rates(self, messages: int, tasks: int) -> dict[str, float]:
        now = time.monotonic()
        self._samples.append((now, messages, tasks))
        while len(self._samples) > 2 and now - self._samples[1][0] >= THROUGHPUT_WINDOW_SECONDS:
            self._samples.pop(0)
        then, m0, t0 = self._samples[0]
        seconds = now - then
        if seconds <= 0:
            return {"messages_per_second": 0.0, "tasks_per_second": 0.0}
        return {"messages_per_second": round((messages - m0) / seconds, 3),
                "tasks_per_second": round((tasks - t0) / seconds, 3)}


def overview(worker: Any, throughput: Throughput) -> dict[str, Any]:
    """The overview of a running ``knarr.engine.worker.Worker`` (the JSON API's shape)."""
    cfg = worker.config
    source = worker.source
    highs: dict[int, int] = dict(getattr(source, "high_watermarks", {}) or {})
    committed_by = getattr(source, "committed_offsets", {}) or {}
    partitions = []
    for partition, proc in sorted(worker.processors.items()):
        committed = committed_by.get(partition)
        high = highs.get(partition)
        partitions.append({
            "partition": partition,
            "committed": committed,
            "watermark": proc.watermark.committable(),
            "high_watermark": high,
            "lag": max(0, high - committed) if high is not None and committed is not None and committed >= 0 else None,
            "queued": len(proc._queue),
            "in_flight": proc.inflight_tasks,
            "delivering": proc.delivering,  # of those, the tasks awaiting a sink's confirmation
            "stall": proc.stall or proc.failure,
        })
    recorder = worker.recorder
    scheduler = getattr(worker, "scheduler", None)
    flow = worker._flow
    return {
        "worker": worker.worker_id,
        "cluster": worker.cluster,
        "consumer_group": cfg.kafka.consumer_group,
        "topic": getattr(source, "topic", None),
        "uptime_seconds": round(time.monotonic() - worker.started_at, 3),
        "partitions": partitions,
        "pool": {
            "max": cfg.executor.max_executors,
            "in_use": scheduler.in_use if scheduler is not None else 0,
            "waiting": scheduler.waiting_count if scheduler is not None else 0,
            "running": sorted(recorder.running.values(), key=lambda r: r["slot"]) if recorder is not None else [],
        },
        "backpressure": {"paused": flow.hold, "partitions": sorted(flow.isolated | worker._client_paused),
                         "load": sum(worker._loads().values()),
                         "high": cfg.executor.backpressure_high,
                         "delivering": worker._delivering(),
                         "delivery_high": cfg.executor.delivery_high},
        "throughput": throughput.rates(worker.stats.messages, worker.stats.tasks),
        "stats": worker.stats.as_dict(),
        "recorder": recorder.describe() if recorder is not None else None,
    }
