"""Handlers that misbehave on purpose, for the backfill failure tests (loaded by file path on the executors)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

import knarr
from knarr.demo.handler import SearchHandler

CRASH_ID = "crash-me"


def _marked(messages) -> bool:
    return any(m.payload is not None and m.payload.request_id == CRASH_ID for m in messages)


class CrashOnceHandler(SearchHandler):
    """Kills its Spark task's Python worker the first time it sees the crash request.

    The marker file (path in executor.env CRASH_MARKER) makes it crash once only: the retry
    of the task finds the marker and processes the chunk normally.
    """

    async def on_startup(self, config):
        self.marker = Path(config.executor.env["CRASH_MARKER"])
        return await super().on_startup(config)

    async def arrange(self, messages, pending):
        if _marked(messages) and not self.marker.exists():
            self.marker.write_text(str(os.getpid()))
            os._exit(17)  # a hard crash: no cleanup, no exception for anyone to catch
        return await super().arrange(messages, pending)


class AlwaysFatalHandler(SearchHandler):
    """Answers the crash request with an output for a sink that does not exist: a fatal error, every time."""

    async def on_message_complete(self, group):
        if group.source_message.payload is not None and group.source_message.payload.request_id == CRASH_ID:
            return knarr.CollectResult(files=[knarr.FilePayload(data={"x": 1}, path="x.jsonl", sink="no-such-sink")])
        return await super().on_message_complete(group)


class CrashAlwaysHandler(SearchHandler):
    """Kills its Spark task's Python worker whenever it sees the crash request: no attempt can succeed."""

    async def arrange(self, messages, pending):
        if _marked(messages):
            os._exit(17)
        return await super().arrange(messages, pending)


class FailingTasksHandler(SearchHandler):
    """Every task runs grep with an option it does not know: each fails for good (exit 2), none crashes."""

    async def arrange(self, messages, pending):
        tasks = await super().arrange(messages, pending)
        return [t.model_copy(update={"args": ["--no-such-option", *t.args]}) for t in tasks]


class Numbered(BaseModel):
    id: int


class EverySink(knarr.BaseHandler[Numbered, None]):
    """One echo task per message ``{"id": n}``; its output goes to PostgreSQL, Redis, MongoDB and HTTP.

    Where each goes is read from ``executor.env`` (the table, key prefix, collection), so the
    class needs no arguments on the Spark executors.
    """

    async def on_startup(self, config):
        self.env = config.executor.env
        return config

    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=[str(m.payload.id)], source_offsets=[m.offset])
                for m in messages if m.payload is not None]

    async def on_task_complete(self, result):
        n = int(result.stdout.strip())
        row = {"id": n, "body": f"echo {n}"}
        return knarr.CollectResult(
            postgres=[knarr.PostgresPayload(table=self.env["PG_TABLE"], data=row, on_conflict=["id"])],
            redis=[knarr.RedisPayload(key=str(n), data=row)],
            mongo=[knarr.MongoPayload(collection=self.env["MONGO_COLLECTION"], data=row, upsert_keys=["id"])],
            http=[knarr.HttpPayload(data=row)],
        )
