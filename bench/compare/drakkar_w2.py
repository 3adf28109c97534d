"""W2 on Drakkar: ten `grep -c` per message (fan-out), one aggregate per message to Kafka.

executor.binary_path is grep; the message text goes to each grep on stdin.
"""

from pydantic import BaseModel

import drakkar as dk

PATTERNS = [f"key{k}" for k in range(10)]


class Document(BaseModel):
    i: int
    text: str


class Counted(BaseModel):
    i: int
    tasks: int
    matches: int


class GrepHandler(dk.BaseDrakkarHandler[Document, Counted]):
    async def arrange(self, messages, pending):
        return [dk.ExecutorTask(task_id=dk.make_task_id("w2"), args=["-c", "-e", pattern],
                                stdin=msg.payload.text, source_offsets=[msg.offset])
                for msg in messages for pattern in PATTERNS]

    async def on_message_complete(self, group):
        out = Counted(i=group.source_message.payload.i, tasks=group.succeeded,
                      matches=sum(int(result.stdout) for result in group.results))
        return dk.CollectResult(kafka=[dk.KafkaPayload(data=out, key=str(out.i).encode())])

    async def on_error(self, task, error):
        return dk.ErrorAction.SKIP  # counted out of `tasks`: the harness fails the run
