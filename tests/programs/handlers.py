"""Handlers for the process tests: `knarr run --handler tests/programs/handlers.py:TaggedHandler`.

Every input is a ``Request``; every output names the partition, offset and request id it came
from, so a test can tell which inputs produced output and how often (duplicates).
"""

from __future__ import annotations

import os

from pydantic import BaseModel

import knarr

# The test's unique marker: added to every task's argv, so a test can find stray subprocesses.
MARKER_ENV = "HANDLER_TEST_MARKER"


class Request(BaseModel):
    request_id: str
    fanout: int = 1  # tasks for this message
    sleep: float = 0.0  # seconds each task sleeps (tests/programs/behave sleep=S)
    precomputed: bool = False  # answer without a subprocess (PrecomputedResult)


class TaggedHandler(knarr.BaseHandler[Request, None]):
    """One request -> ``fanout`` runs of the behave program -> one summary per request.

    Each task prints ``partition:offset:request_id:index``. The summary of a request goes to
    the Kafka sink when its last task finishes; fan-out requests also get one output per task.
    """

    def __init__(self) -> None:
        self.marker = os.environ.get(MARKER_ENV, "")
        self.pid = os.getpid()

    async def arrange(self, messages, pending):
        tasks = []
        for msg in messages:
            req = msg.payload
            if req is None:
                continue
            for index in range(req.fanout):
                line = f"{msg.partition}:{msg.offset}:{req.request_id}:{index}"
                meta = {"partition": msg.partition, "offset": msg.offset, "request_id": req.request_id,
                        "task": index, "fanout": req.fanout}
                if req.precomputed:
                    tasks.append(knarr.ExecutorTask(
                        args=[], metadata=meta, source_offsets=[msg.offset],
                        precomputed=knarr.PrecomputedResult(stdout=line + "\n"),
                    ))
                    continue
                args = [f"out={line}"]
                if req.sleep:
                    args.append(f"sleep={req.sleep}")
                if self.marker:
                    args.append(f"tag={self.marker}")  # ignored by behave; visible in /proc/*/cmdline
                tasks.append(knarr.ExecutorTask(args=args, metadata=meta, source_offsets=[msg.offset]))
        return tasks

    async def on_task_complete(self, result):
        meta = result.task.metadata
        if meta["fanout"] > 1:
            return self._output({"kind": "task", **meta, "stdout": result.stdout.strip(), "worker": self.pid})
        return None

    async def on_message_complete(self, group):
        msg = group.source_message
        req = msg.payload
        return self._output({
            "kind": "message", "partition": msg.partition, "offset": msg.offset,
            "request_id": req.request_id if req is not None else None,
            "tasks": group.total, "succeeded": group.succeeded, "worker": self.pid,
            "stdout": sorted(r.stdout.strip() for r in group.results),
        })

    @staticmethod
    def _output(data: dict) -> knarr.CollectResult:
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(data=data, key=str(data.get("request_id")).encode())])


class Script(BaseModel):
    request_id: str
    script: str  # run as `/bin/sh -c SCRIPT`
    crash: bool = False  # once the task is done, end the worker process abruptly (no cleanup at all)


class ScriptHandler(knarr.BaseHandler[Script, None]):
    """One message -> one `/bin/sh -c SCRIPT` task -> one small summary (exit code, output sizes, truncation).

    The summary never carries the output itself, so a task may print far more than a Kafka record holds.
    """

    async def arrange(self, messages, pending):
        return [
            knarr.ExecutorTask(binary_path="/bin/sh", args=["-c", msg.payload.script], source_offsets=[msg.offset],
                               metadata={"request_id": msg.payload.request_id})
            for msg in messages if msg.payload is not None
        ]

    async def on_message_complete(self, group):
        if group.source_message.payload and group.source_message.payload.crash:
            os._exit(70)
        results = [*group.results, *(e.result for e in group.errors if e.result is not None)]
        return TaggedHandler._output({
            "kind": "message", "offset": group.source_message.offset,
            "request_id": group.source_message.payload.request_id if group.source_message.payload else None,
            "exit_codes": [r.exit_code for r in results], "stdout_bytes": [len(r.stdout) for r in results],
            "stdout_truncated": [r.stdout_truncated for r in results],
        })
