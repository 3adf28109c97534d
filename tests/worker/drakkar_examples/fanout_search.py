"""One request names several patterns and files: a task per (pattern, file), one summary per request.

Drakkar API as its fan-out guide and its integration worker use it: make_stable_task_id with
PendingContext dedup, labels, on_ready(config, db_pool), task_priority from metadata,
on_error branching on error.kind, on_message_complete aggregating the MessageGroup.
"""

from pydantic import BaseModel, Field

import drakkar as dk


class SearchRequest(BaseModel):
    request_id: str
    tier: str = "standard"
    patterns: list[str] = Field(min_length=1)
    files: list[str] = Field(min_length=1)


class Matches(BaseModel):
    request_id: str
    task_id: str
    pattern: str
    file: str
    lines: int


class Summary(BaseModel):
    request_id: str
    total: int
    succeeded: int
    failed: int
    lines: int
    failure_kinds: list[str]


class FanoutSearch(dk.BaseDrakkarHandler[SearchRequest, Matches]):
    ready_with: tuple = ()
    timeouts_seen = 0

    async def on_ready(self, config: dk.DrakkarConfig, db_pool: object) -> None:
        self.ready_with = (config.executor.max_executors, db_pool)

    def task_priority(self, task: dk.ExecutorTask):
        return (0 if task.metadata["tier"] == "gold" else 1, min(task.source_offsets))

    async def arrange(self, messages: list[dk.SourceMessage], pending: dk.PendingContext) -> list[dk.ExecutorTask]:
        tasks = []
        for msg in messages:
            req = msg.payload
            for pattern in req.patterns:
                for path in req.files:
                    task_id = dk.make_stable_task_id("search", req.request_id, pattern, path)
                    if task_id in pending.pending_task_ids:
                        continue
                    tasks.append(dk.ExecutorTask(
                        task_id=task_id,
                        args=[pattern, path],
                        metadata={"request_id": req.request_id, "pattern": pattern, "file": path, "tier": req.tier},
                        labels={"request_id": req.request_id, "tier": req.tier},
                        source_offsets=[msg.offset],
                    ))
        return tasks

    async def on_task_complete(self, result: dk.ExecutorResult) -> dk.CollectResult | None:
        meta = result.task.metadata
        found = Matches(request_id=meta["request_id"], task_id=result.task.task_id, pattern=meta["pattern"],
                        file=meta["file"], lines=len([line for line in result.stdout.splitlines() if line]))
        return dk.CollectResult(kafka=[dk.KafkaPayload(sink="matches", key=found.request_id.encode(), data=found)])

    async def on_message_complete(self, group: dk.MessageGroup) -> dk.CollectResult | None:
        req = group.source_message.payload
        if req is None or group.is_empty:
            return None
        summary = Summary(
            request_id=req.request_id, total=group.total, succeeded=group.succeeded, failed=group.failed,
            lines=sum(len([line for line in r.stdout.splitlines() if line]) for r in group.results),
            failure_kinds=sorted(e.kind for e in group.errors),
        )
        return dk.CollectResult(kafka=[dk.KafkaPayload(sink="summaries", key=req.request_id.encode(), data=summary)])

    async def on_error(self, task: dk.ExecutorTask, error: dk.ExecutorError):
        if error.kind == "timeout" and self.timeouts_seen == 0:
            self.timeouts_seen += 1
            return dk.ErrorAction.RETRY  # a slow disk: once more
        return dk.ErrorAction.SKIP
