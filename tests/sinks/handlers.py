"""Handlers that turn each message into one task and each task's stdout into a sink payload."""

from __future__ import annotations

from pydantic import BaseModel

import knarr


class Item(BaseModel):
    id: int
    text: str = ""
    column: str = "body"  # where the row puts the task's output (a column that does not exist: a refusal)


def one_task_each(messages) -> list[knarr.ExecutorTask]:
    return [knarr.ExecutorTask(args=[f"out={m.payload.text or f'row-{m.payload.id}'}"], source_offsets=[m.offset],
                               metadata={"id": m.payload.id, "column": m.payload.column})
            for m in messages if m.payload is not None]


class ToPostgres(knarr.BaseHandler[Item, None]):
    """One row per message: ``{id, <column>: the task's stdout}``; an upsert on ``id`` when asked."""

    def __init__(self, table: str, upsert: bool = False, create: str = "") -> None:
        self.table = table
        self.upsert = upsert
        self.create = create  # SQL that on_ready runs through the sink's pool
        self.ready_answer = None

    async def on_ready(self, config, pool) -> None:
        if self.create:
            await pool.execute(self.create)
        self.ready_answer = await pool.fetchval("SELECT 40 + 2")

    async def arrange(self, messages, pending):
        return one_task_each(messages)

    async def on_task_complete(self, result):
        meta = result.task.metadata
        return knarr.CollectResult(postgres=[knarr.PostgresPayload(
            table=self.table, data={"id": meta["id"], meta["column"]: result.stdout.strip()},
            on_conflict=["id"] if self.upsert else [],
        )])


class ToRedis(knarr.BaseHandler[Item, None]):
    """One key per message, ``item:<id>`` = ``{id, body}``; even ids expire after ``ttl`` seconds."""

    def __init__(self, ttl: int = 600) -> None:
        self.ttl = ttl

    async def arrange(self, messages, pending):
        return one_task_each(messages)

    async def on_task_complete(self, result):
        item = result.task.metadata["id"]
        return knarr.CollectResult(redis=[knarr.RedisPayload(
            key=f"item:{item}", data={"id": item, "body": result.stdout.strip()},
            ttl=self.ttl if item % 2 == 0 else None,
        )])
