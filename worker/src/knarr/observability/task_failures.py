"""One WARNING line per failed task attempt, with what a person needs to find the cause.

The line names the task, the partition and source offsets it works for, the exit code (or
why there is none), the tail of its stderr and what happens next (retry, skip, replaced).
Under a storm — every task failing — the first lines of each window are logged and the
rest counted; a "N more task failures not logged" line follows once the window closes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from knarr.observability.logging import get_logger
from knarr.observability.ratelimit import RateLimiter

STDERR_TAIL_LINES = 5
STDERR_TAIL_CHARS = 600


def stderr_tail(text: str, lines: int = STDERR_TAIL_LINES, chars: int = STDERR_TAIL_CHARS) -> str:
    """The last ``lines`` non-empty lines of ``text``, at most ``chars`` characters (pure)."""
    kept = [line for line in (text or "").splitlines() if line.strip()][-lines:]
    tail = "\n".join(kept)
    return tail if len(tail) <= chars else "…" + tail[-(chars - 1):]


class TaskFailureLog:
    def __init__(self, limiter: RateLimiter | None = None, log: Any = None) -> None:
        self.limiter = limiter or RateLimiter(burst=10, per_seconds=10.0)
        self.log = log or get_logger(component="executor")
        self._flush_loop: asyncio.AbstractEventLoop | None = None  # where a flush is scheduled

    def failed(self, task: Any, error: Any, partition: int, action: str) -> None:
        """Log one failed attempt of ``task`` (an ExecutorTask) with ``error`` (an ExecutorError)."""
        now = time.monotonic()
        allowed, suppressed = self.limiter.allow(now)
        if suppressed:
            self._report_suppressed(suppressed)
        if not allowed:
            self._schedule_flush(now)
            return
        fields: dict[str, Any] = {
            "task_id": task.task_id, "partition": partition, "source_offsets": list(task.source_offsets),
            "reason": error.reason, "exit_code": error.exit_code, "attempt": error.attempt, "action": action,
        }
        if error.reason != "failed" and error.exception:
            fields["error"] = str(error.exception)[:STDERR_TAIL_CHARS]
        tail = stderr_tail(error.stderr)
        if tail:
            fields["stderr"] = tail
        self.log.warning("task failed", **fields)

    def flush(self, now: float) -> None:
        """Report failures held back in a window that has closed (called on a timer)."""
        self._flush_loop = None
        suppressed = self.limiter.drain(now)
        if suppressed:
            self._report_suppressed(suppressed)

    def _report_suppressed(self, count: int) -> None:
        self.log.warning(f"{count} more task failures not logged", suppressed=count,
                         window_seconds=self.limiter.per_seconds,
                         hint="every failure is counted in knarr_tasks_total{status=\"failed\"}")

    def _schedule_flush(self, now: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop: the next line let through reports the count
        if self._flush_loop is loop:
            return  # (a flush left on a loop that has closed since never runs: schedule anew)
        ends = self.limiter.window_ends() or now
        self._flush_loop = loop
        loop.call_later(max(0.0, ends - now), lambda: self.flush(time.monotonic()))


task_failures = TaskFailureLog()
