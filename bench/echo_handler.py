"""The tiny-task workload's handler: one echo task per message, its stdout the message's output.

Its own module, so a `knarr run` the benches start as a command (bench/processes.py) loads it as
``bench/echo_handler.py:EchoHandler``, the same class bench/persistent.py runs in its own process.
"""

from __future__ import annotations

import knarr


class EchoHandler(knarr.BaseHandler[None, None]):
    """One echo task per message; its stdout is the message's output."""

    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=[f"{m.partition}:{m.offset}"], source_offsets=[m.offset]) for m in messages]

    async def on_task_complete(self, result):
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(data={"echo": result.stdout})])
