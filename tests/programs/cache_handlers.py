"""A handler that memoises its task's output in the handler cache: `--handler tests/programs/cache_handlers.py:Memoising`.

One message ``{"request_id", "key", "sleep"}`` -> one run of tests/programs/behave printing
``value-of-<key>``, unless the cache holds the key: then the task is precomputed from it. Every
result goes to the Kafka sink ``out`` with its pid (None: it came from the cache) and the
worker's name, and is kept in ``results`` for tests that run the worker in-process.
``CACHE_TEST_SCOPE`` (local, cluster, global) is the scope results are stored with.
"""

from __future__ import annotations

import os

from pydantic import BaseModel

import knarr


class Lookup(BaseModel):
    request_id: str
    key: str
    sleep: float = 0.0


class Memoising(knarr.BaseHandler[Lookup, None]):
    def __init__(self, scope: str | None = None) -> None:
        self.scope = scope or os.environ.get("CACHE_TEST_SCOPE", "local")
        self.worker = os.environ.get("WORKER_ID", "")
        self.results: list[knarr.ExecutorResult] = []

    async def arrange(self, messages, pending):
        tasks = []
        for msg in messages:
            lookup = msg.payload
            if lookup is None:
                continue
            args = [f"out=value-of-{lookup.key}"] + ([f"sleep={lookup.sleep}"] if lookup.sleep else [])
            tasks.append(knarr.ExecutorTask(
                args=args, source_offsets=[msg.offset], metadata={"request_id": lookup.request_id, "key": lookup.key},
                precomputed=await self.cache.precomputed(lookup.key),
            ))
        return tasks

    async def on_task_complete(self, result):
        self.results.append(result)
        meta = result.task.metadata
        if result.pid is not None:  # a precomputed result came from the cache: nothing new to store
            self.cache.set(meta["key"], result.stdout, scope=self.scope)
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(
            sink="out", key=meta["request_id"].encode(),
            data={**meta, "stdout": result.stdout.strip(), "pid": result.pid, "worker": self.worker},
        )])
