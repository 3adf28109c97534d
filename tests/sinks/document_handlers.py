"""Handlers of the mongo and http sink tests: one task per message, its output delivered to a mongo or http sink."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import knarr


class Item(BaseModel):
    id: int
    collection: str = "results"
    word: str | None = None  # set: the document is upserted by word
    document: dict[str, Any] | None = None  # sent as is instead of {"id", "out"}
    bad: bool = False  # the HTTP test server is told to refuse bodies with "bad": true
    sleep: float = 0  # seconds the task takes (paces a run so a fault lands in its middle)


class _OneTaskEach(knarr.BaseHandler[Item, None]):
    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=[f"out=task-{m.payload.id}", f"sleep={m.payload.sleep}"], source_offsets=[m.offset],
                                   metadata={"item": m.payload.model_dump()})
                for m in messages if m.payload is not None]


class ToMongo(_OneTaskEach):
    async def on_task_complete(self, result):
        item = Item(**result.task.metadata["item"])
        data = item.document if item.document is not None else {"id": item.id, "out": result.stdout.strip()}
        if item.word is not None:
            data["word"] = item.word
        return knarr.CollectResult(mongo=[knarr.MongoPayload(collection=item.collection, data=data,
                                                             upsert_keys=["word"] if item.word else [])])


class ToHttp(_OneTaskEach):
    async def on_task_complete(self, result):
        item = Item(**result.task.metadata["item"])
        data: dict[str, Any] = {"id": item.id, "out": result.stdout.strip()}
        if item.bad:
            data["bad"] = True
        return knarr.CollectResult(http=[knarr.HttpPayload(data=data)])
