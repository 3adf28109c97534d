"""W2 on knarr: ten `grep -c` per message (fan-out), one aggregate per message to Kafka.

executor.binary_path is grep; the message text goes to each grep on stdin.
"""

from pydantic import BaseModel

import knarr

PATTERNS = [f"key{k}" for k in range(10)]


class Document(BaseModel):
    i: int
    text: str


class Counted(BaseModel):
    i: int
    tasks: int
    matches: int


class GrepHandler(knarr.BaseHandler[Document, Counted]):
    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(task_id=knarr.make_task_id("w2"), args=["-c", "-e", pattern],
                                   stdin=msg.payload.text, source_offsets=[msg.offset])
                for msg in messages for pattern in PATTERNS]

    async def on_message_complete(self, group):
        out = Counted(i=group.source_message.payload.i, tasks=group.succeeded,
                      matches=sum(int(result.stdout) for result in group.results))
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(data=out, key=str(out.i).encode())])

    async def on_error(self, task, error):
        return knarr.ErrorAction.SKIP  # counted out of `tasks`: the harness fails the run
