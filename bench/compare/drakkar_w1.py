"""W1 on Drakkar: one /bin/echo per message, its output to Kafka (executor.binary_path is echo)."""

from pydantic import BaseModel

import drakkar as dk


class Line(BaseModel):
    i: int
    text: str


class Echoed(BaseModel):
    i: int
    out: str


class EchoHandler(dk.BaseDrakkarHandler[Line, Echoed]):
    async def arrange(self, messages, pending):
        return [dk.ExecutorTask(task_id=dk.make_task_id("w1"), args=[msg.payload.text],
                                source_offsets=[msg.offset], metadata={"i": msg.payload.i})
                for msg in messages]

    async def on_task_complete(self, result):
        out = Echoed(i=result.task.metadata["i"], out=result.stdout.rstrip("\n"))
        return dk.CollectResult(kafka=[dk.KafkaPayload(data=out, key=str(out.i).encode())])

    async def on_error(self, task, error):
        return dk.ErrorAction.SKIP  # a failed task leaves its message without output: the harness fails the run
