"""Which event loop runs a worker process: uvloop by default, the standard library's on request.

Everything the worker does per task passes through the loop — the spawner's results, each
task's pidfd, its deadline timer, the sinks' deliveries — and asyncio's own loop is Python
code: each callback, timer and reader registration costs a few microseconds of it. uvloop
does the same in compiled code over libuv; on the W1 benchmark it takes 11–15 % off the
worker's CPU per task and runs 7–17 % more persistent-mode tasks per second (README,
Performance). ``event_loop: asyncio`` in the config is the way back, should a library a
handler uses not work on uvloop. One thing is slower on uvloop: a hook that starts processes
itself through ``asyncio.create_subprocess_exec`` (441 a second here, against 1,103 on
asyncio's loop). Tasks never take that path (spawner.py); work that does belongs in tasks.

Only the processes knarr starts itself (``knarr run``, ``knarr demo``) choose: a Worker
embedded in an application's own ``asyncio.run`` runs on whatever loop that gives it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], kind: str = "uvloop") -> T:
    """Run ``main`` to completion on a new loop of ``kind`` (the config's ``event_loop``), like asyncio.run."""
    if kind == "uvloop":
        import uvloop  # only here: an embedding application's loop is its own choice

        return uvloop.run(main)
    return asyncio.run(main)
