"""The demo handler: one search request -> patterns x files grep tasks -> one summary per request."""

from __future__ import annotations

from pydantic import BaseModel, Field

import knarr


class SearchRequest(BaseModel):
    request_id: str
    patterns: list[str] = Field(min_length=1)
    file_paths: list[str] = Field(min_length=1)


class MatchCount(BaseModel):
    request_id: str
    pattern: str
    file_path: str
    match_count: int


class RequestSummary(BaseModel):
    request_id: str
    total_tasks: int
    succeeded: int
    failed: int
    replaced: int
    total_matches: int


def _count(stdout: str) -> int:
    text = stdout.strip()
    return int(text) if text.isdigit() else 0


class SearchHandler(knarr.BaseHandler[SearchRequest, MatchCount]):
    """Fan-out: every (pattern, file) pair is one `grep -c` run; the request's summary is the aggregate."""

    async def arrange(self, messages, pending):
        tasks = []
        for msg in messages:
            req = msg.payload
            if req is None:
                continue  # unparseable: its group is empty and on_message_complete reports it
            for pattern in req.patterns:
                for path in req.file_paths:
                    tasks.append(
                        knarr.ExecutorTask(
                            task_id=knarr.make_task_id("grep"),
                            args=["-c", "-e", pattern, "--", path],
                            metadata={"request_id": req.request_id, "pattern": pattern, "file_path": path},
                            source_offsets=[msg.offset],
                        )
                    )
        return tasks

    async def on_task_complete(self, result):
        meta = result.task.metadata
        row = MatchCount(request_id=meta["request_id"], pattern=meta["pattern"], file_path=meta["file_path"],
                         match_count=_count(result.stdout))
        return knarr.CollectResult(
            kafka=[knarr.KafkaPayload(data=row, key=row.request_id.encode(), sink="matches")] if self.kafka_sinks else [],
            files=[] if self.kafka_sinks else [knarr.FilePayload(data=row, path="matches.jsonl", sink="results")],
        )

    async def on_error(self, task, error):
        # grep exits 1 when nothing matches: not a failure, so answer it with a precomputed zero.
        if error.exit_code == 1 and not error.stderr.strip():
            return [task.model_copy(update={"task_id": knarr.make_task_id("nomatch"), "parent_task_id": None,
                                            "precomputed": knarr.PrecomputedResult(stdout="0")})]
        return knarr.ErrorAction.SKIP

    async def on_message_complete(self, group):
        req = group.source_message.payload
        if req is None:
            request_id = f"unparseable@{group.source_message.offset}"
        else:
            request_id = req.request_id
        summary = RequestSummary(
            request_id=request_id, total_tasks=group.total, succeeded=group.succeeded, failed=group.failed,
            replaced=group.replaced, total_matches=sum(_count(r.stdout) for r in group.results),
        )
        if self.kafka_sinks:
            return knarr.CollectResult(kafka=[knarr.KafkaPayload(data=summary, key=request_id.encode(), sink="summaries")])
        return knarr.CollectResult(files=[knarr.FilePayload(data=summary, path="summaries.jsonl", sink="results")])

    kafka_sinks = False

    async def on_startup(self, config):
        self.kafka_sinks = bool(config.sinks.kafka)
        return config
