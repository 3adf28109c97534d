"""Cancels that get lost, and the worker's answers to them.

A cancel can be lost on its way: a library that catches it, or Python 3.11's asyncio.wait_for,
which returns its inner result when a cancel arrives in the same loop iteration (redis-py sends
every command through it). The task's cancel count stays raised, so a client's next
asyncio.timeout takes its own expiry for the only cancel and raises TimeoutError instead.

- cancel_and_wait: whatever still runs RECANCEL_SECONDS after its cancel is cancelled again,
  with one warning per round naming where each such task waits.
- cancel_requested: a retry loop asks it before trying again, so an error a client made of the
  cancel is not retried for ever (a frozen server would hold the worker's stop).
- wait_event: the worker's own waits on an Event, without wait_for's hole.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

RECANCEL_SECONDS = 1.0

_ASYNCIO = asyncio.__file__.rsplit("/", 1)[0] + "/"


async def cancel_and_wait(tasks: Iterable[asyncio.Task], log: Any) -> None:
    """Cancel ``tasks`` and return once every one has ended (their exceptions are collected)."""
    tasks = [t for t in tasks if not t.done()]
    for task in tasks:
        task.cancel()
    pending = set(tasks)
    while pending:
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_SECONDS)
        if pending:
            log.warning("still running after being cancelled; cancelling again", count=len(pending),
                        where=sorted({where(t) for t in pending}))
            for task in pending:
                task.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


def where(task: asyncio.Task) -> str:
    """The innermost coroutine frame a task waits in, outside asyncio itself, as "file:line function"."""
    found, awaited = repr(task.get_coro()), task.get_coro()
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None)
        if frame is not None and not frame.f_code.co_filename.startswith(_ASYNCIO):
            found = f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} {frame.f_code.co_name}"
        awaited = getattr(awaited, "cr_await", None)
    return found


def cancel_requested() -> bool:
    """Whether the running task has been cancelled, even if the cancel never reached it as CancelledError."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set (True) or ``seconds`` have passed (False); a cancel arriving as the
    event is set still ends the wait (asyncio.wait_for would drop it on Python 3.11)."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True
