"""Two handlers with the bugs Drakkar users meet after a deploy: one fails on every message,
one on a single message of a window."""

from pydantic import BaseModel

import drakkar as dk


class Job(BaseModel):
    job_id: str
    kind: str
    copies: str = "1"


class EveryMessageFails(dk.BaseDrakkarHandler[Job, None]):
    """arrange() looks the job kind up in a table on_ready() loads; an empty table (a bad
    deploy, a missing Secret) makes every message raise KeyError until it is filled."""

    async def on_ready(self, config):
        self.programs = {}

    async def arrange(self, messages, pending):
        return [dk.ExecutorTask(task_id=dk.make_stable_task_id("job", m.payload.job_id),
                                args=[f"out={self.programs[m.payload.kind]}"],
                                source_offsets=[m.offset], metadata={"job_id": m.payload.job_id})
                for m in messages]

    async def on_task_complete(self, result):
        return dk.CollectResult(kafka=[dk.KafkaPayload(data={"job_id": result.task.metadata["job_id"],
                                                             "out": result.stdout.strip()})])


class OneMessageFails(EveryMessageFails):
    """``copies`` arrives as text; one job says "two"."""

    async def on_ready(self, config):
        self.programs = {"copy": "copied"}

    async def arrange(self, messages, pending):
        return [dk.ExecutorTask(task_id=dk.make_stable_task_id("job", m.payload.job_id),
                                args=[f"out={self.programs[m.payload.kind]}x{int(m.payload.copies)}"],
                                source_offsets=[m.offset], metadata={"job_id": m.payload.job_id})
                for m in messages]
