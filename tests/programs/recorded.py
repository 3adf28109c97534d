"""A fan-out handler with replacement chains, for the flight recorder tests.

Each ``Job`` fans out to ``fanout`` runs of the behave program; the tasks whose index is in
``fail`` exit 3, and on_error replaces each by a successor, ``depth`` times over (the last one
succeeds), so a message's group holds replaced originals, their chain and the successes.
on_message_complete writes the group exactly as it saw it to the JSON Lines file named by
$RECORDED_GROUPS (one line per group), so a test can compare it with the recorder's trace.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel

import knarr

GROUPS_ENV = "RECORDED_GROUPS"


class Job(BaseModel):
    job: str
    fanout: int = 3
    fail: list[int] = []
    depth: int = 1  # replacements in a row of a failing task; the last one succeeds
    sleep: float = 0.0


class FanoutHandler(knarr.BaseHandler[Job, None]):
    async def arrange(self, messages, pending):
        tasks = []
        for msg in messages:
            job = msg.payload
            if job is None:
                continue
            for index in range(job.fanout):
                failing = index in job.fail
                tasks.append(knarr.ExecutorTask(
                    args=self._args(job, f"{job.job}:{index}", failing), source_offsets=[msg.offset],
                    metadata={"index": index, "generation": 0, "depth": job.depth if failing else 0,
                              "job": job.job, "sleep": job.sleep},
                ))
        return tasks

    @staticmethod
    def _args(job_or_sleep, line: str, failing: bool) -> list[str]:
        sleep = job_or_sleep.sleep if isinstance(job_or_sleep, Job) else job_or_sleep
        args = [f"out={line}"] + ([f"sleep={sleep}"] if sleep else [])
        return args + (["err=failing on purpose", "exit=3"] if failing else [])

    async def on_error(self, task, error):
        meta = task.metadata
        generation = meta["generation"] + 1
        if generation > meta["depth"]:
            return knarr.ErrorAction.SKIP
        failing = generation < meta["depth"]
        line = f"{meta['job']}:{meta['index']}:r{generation}"
        return [knarr.ExecutorTask(args=self._args(meta["sleep"], line, failing), source_offsets=task.source_offsets,
                                   metadata={**meta, "generation": generation})]

    async def on_message_complete(self, group):
        msg = group.source_message
        seen = {
            "partition": msg.partition, "offset": msg.offset,
            "job": msg.payload.job if msg.payload is not None else None,
            "tasks": [{"task_id": t.task_id, "parent_task_id": t.parent_task_id, "args": t.args} for t in group.tasks],
            "results": [{"task_id": r.task.task_id, "exit_code": r.exit_code, "stdout": r.stdout} for r in group.results],
            "errors": [{"task_id": e.task.task_id, "exit_code": e.exit_code} for e in group.errors],
            "total": group.total, "succeeded": group.succeeded, "failed": group.failed, "replaced": group.replaced,
        }
        path = os.environ.get(GROUPS_ENV)
        if path:
            with Path(path).open("a") as f:
                f.write(json.dumps(seen) + "\n")
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(data={"job": seen["job"], "total": group.total})])
