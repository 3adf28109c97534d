"""W1 on knarr: one /bin/echo per message, its output to Kafka (executor.binary_path is echo).

In persistent mode the same handler runs unchanged: executor.persistent.command names a
program (echo_task.py) that answers every task the way /bin/echo would.
"""

from pydantic import BaseModel

import knarr


class Line(BaseModel):
    i: int
    text: str


class Echoed(BaseModel):
    i: int
    out: str


class EchoHandler(knarr.BaseHandler[Line, Echoed]):
    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(task_id=knarr.make_task_id("w1"), args=[msg.payload.text],
                                   source_offsets=[msg.offset], metadata={"i": msg.payload.i})
                for msg in messages]

    async def on_task_complete(self, result):
        out = Echoed(i=result.task.metadata["i"], out=result.stdout.rstrip("\n"))
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(data=out, key=str(out.i).encode())])

    async def on_error(self, task, error):
        return knarr.ErrorAction.SKIP  # a failed task leaves its message without output: the harness fails the run
