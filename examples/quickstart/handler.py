"""Quick start: count the words of each message with `wc -w`, one subprocess per message."""

from pydantic import BaseModel

import knarr


class Document(BaseModel):
    id: str
    text: str


class WordCount(BaseModel):
    id: str
    words: int


class WordCounter(knarr.BaseHandler[Document, WordCount]):
    async def arrange(self, messages, pending):
        # One task per parseable message; the text goes to wc on stdin (no shell involved).
        return [
            knarr.ExecutorTask(args=["-w"], stdin=msg.payload.text, source_offsets=[msg.offset],
                               metadata={"id": msg.payload.id})
            for msg in messages
            if msg.payload is not None
        ]

    async def on_task_complete(self, result):
        row = WordCount(id=result.task.metadata["id"], words=int(result.stdout.split()[0]))
        return knarr.CollectResult(files=[knarr.FilePayload(path="word-counts.jsonl", data=row)])

    async def on_error(self, task, error):
        return knarr.ErrorAction.RETRY if error.reason == "timeout" else knarr.ErrorAction.SKIP
