"""Handlers for the message probe's tests: `knarr probe --handler tests/programs/probe_handlers.py:FanOut`.

A ``Job`` fans out into ``fanout`` runs of the behave program; the tasks listed in ``fail`` exit 3
and ``on_error`` replaces each by one that succeeds (or retries them, with ``retry``). Every
finished task goes to the Kafka sink ``out``, every message's aggregate to the PostgreSQL sink's
table ``$PROBE_TABLE``. The handler keeps what it was given, and writes it to ``$PROBE_SEEN_FILE``
(JSON) when set, so a test can hold the probe's report against what the handler saw.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel

import knarr

BEHAVE = str(Path(__file__).resolve().parent / "behave")


class Job(BaseModel):
    id: str
    fanout: int = 3
    fail: list[int] = []  # indices of the tasks that exit 3
    sleep: dict[int, float] = {}  # index -> seconds that task sleeps
    task_timeout: float | None = None  # each task's own timeout_seconds
    retry: bool = False  # failed tasks are retried (two attempts) instead of replaced


class FanOut(knarr.BaseHandler[Job, None]):
    def __init__(self) -> None:
        self.table = os.environ.get("PROBE_TABLE", "results")
        self.seen_file = os.environ.get("PROBE_SEEN_FILE", "")
        self.completed: list[knarr.ExecutorResult] = []  # what on_task_complete was given
        self.failures: list[knarr.ExecutorError] = []  # what on_error was given
        self.groups: list[knarr.MessageGroup] = []  # what on_message_complete was given

    async def arrange(self, messages, pending):
        tasks = []
        for msg in messages:
            job = msg.payload
            for index in range(job.fanout):
                args = [f"out={job.id}:{index}"]
                if index in job.sleep:
                    args.append(f"sleep={job.sleep[index]}")
                if index in job.fail:
                    args += [f"err=task {index} failed", "exit=3"]
                tasks.append(knarr.ExecutorTask(
                    args=args, binary_path=BEHAVE, source_offsets=[msg.offset], metadata={"id": job.id, "index": index},
                    timeout_seconds=job.task_timeout, max_attempts=2 if job.retry else None,
                ))
        return tasks

    async def on_error(self, task, error):
        self.failures.append(error)
        if error.reason != "failed":  # a timeout: give up on the task
            return knarr.ErrorAction.SKIP
        if task.max_attempts == 2:  # Job.retry
            return knarr.ErrorAction.RETRY
        if task.parent_task_id is None:  # one arrange() made: replace it by one that succeeds
            return [knarr.ExecutorTask(args=[f"out={task.metadata['id']}:{task.metadata['index']}:again"], binary_path=BEHAVE,
                                       source_offsets=task.source_offsets, metadata=task.metadata)]
        return knarr.ErrorAction.SKIP

    async def on_task_complete(self, result):
        self.completed.append(result)
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(
            sink="out", key=result.task.metadata["id"].encode(),
            data={"task_id": result.task.task_id, "out": result.stdout.strip()})])

    async def on_message_complete(self, group):
        self.groups.append(group)
        if self.seen_file:
            Path(self.seen_file).write_text(json.dumps({
                "total": group.total, "succeeded": group.succeeded, "failed": group.failed, "replaced": group.replaced,
                "results": {r.task.task_id: r.stdout for r in group.results},
                "errors": {e.task.task_id: e.reason for e in group.errors},
                "tasks": [t.task_id for t in group.tasks],
            }))
        job = group.source_message.payload
        return knarr.CollectResult(postgres=[knarr.PostgresPayload(
            table=self.table, data={"id": job.id, "total": group.total, "succeeded": group.succeeded})])
