"""Cancelling the worker's own asyncio tasks and waiting until they have ended; waiting without losing a cancel.

A cancel can be lost on its way: a library that catches it, or Python 3.11's asyncio.wait_for,
which returns its inner result when a cancel arrives in the same loop iteration (redis-py sends
every command through it). So whatever still runs RECANCEL_SECONDS after its cancel is cancelled
again, with one warning per round naming where each such task waits.
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


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set (True) or ``seconds`` have passed (False).

    The worker's loops wait so rather than through asyncio.wait_for, which on Python 3.11 drops a
    cancel that arrives in the iteration the event is set: the loop would go on after its stop.
    """
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True
