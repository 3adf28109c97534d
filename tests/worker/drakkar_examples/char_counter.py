"""Count the characters of the file each request names: one result per request, one summary per window.

Drakkar API as its fast-worker example uses it: typed payloads, labels, message_label, two
named Kafka sinks, on_window_complete aggregates, on_error skips.
"""

import json
import os

from pydantic import BaseModel

import drakkar as dk


class FileRequest(BaseModel):
    request_id: str
    file_path: str


class CharCount(BaseModel):
    request_id: str
    file_path: str
    chars: int


class WindowStats(BaseModel):
    worker: str
    window: int
    files: int
    total_chars: int
    largest: int
    request_ids: list[str]


class CharCounter(dk.BaseDrakkarHandler[FileRequest, CharCount]):
    def __init__(self) -> None:
        super().__init__()
        self.windows = 0

    def message_label(self, msg: dk.SourceMessage) -> str:
        req = msg.payload
        return f"{msg.partition}:{msg.offset} {req.request_id}" if req else f"{msg.partition}:{msg.offset}"

    async def arrange(self, messages: list[dk.SourceMessage], pending: dk.PendingContext) -> list[dk.ExecutorTask]:
        out = []
        for msg in messages:
            if msg.payload is None:
                continue
            out.append(dk.ExecutorTask(
                task_id=dk.make_task_id("chars"),
                args=[msg.payload.file_path],
                metadata={"request_id": msg.payload.request_id, "file_path": msg.payload.file_path},
                labels={"request_id": msg.payload.request_id},
                source_offsets=[msg.offset],
            ))
        return out

    @staticmethod
    def chars_in(stdout: str) -> int:
        try:
            return int(json.loads(stdout)["chars"])
        except (ValueError, KeyError):
            return 0

    async def on_task_complete(self, result: dk.ExecutorResult) -> dk.CollectResult | None:
        meta = result.task.metadata
        count = CharCount(request_id=meta["request_id"], file_path=meta["file_path"], chars=self.chars_in(result.stdout))
        return dk.CollectResult(kafka=[dk.KafkaPayload(sink="counts", key=count.request_id.encode(), data=count)])

    async def on_window_complete(self, results: list[dk.ExecutorResult],
                                 source_messages: list[dk.SourceMessage]) -> dk.CollectResult | None:
        ok = [r for r in results if r.exit_code == 0]
        if not ok:
            return None
        self.windows += 1
        sizes = [self.chars_in(r.stdout) for r in ok]
        stats = WindowStats(worker=os.environ.get("WORKER_ID", "local"), window=self.windows, files=len(ok),
                            total_chars=sum(sizes), largest=max(sizes),
                            request_ids=[r.task.metadata["request_id"] for r in ok])
        return dk.CollectResult(kafka=[dk.KafkaPayload(sink="windows", data=stats)])

    async def on_error(self, task: dk.ExecutorTask, error: dk.ExecutorError) -> dk.ErrorAction:
        return dk.ErrorAction.SKIP
