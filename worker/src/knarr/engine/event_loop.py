"""Which event loop runs a worker process: uvloop by default, the standard library's on request.

Everything the worker does per task passes through the loop — the spawner's results, each
task's pidfd, its deadline timer, the sinks' deliveries — and asyncio's own loop is Python
code: each callback, timer and reader registration costs a few microseconds of it. uvloop
does the same in compiled code over libuv; on the W1 benchmark it takes 11–15 % off the
worker's CPU per task and runs 7–17 % more persistent-mode tasks per second
(docs/performance.md). ``event_loop: asyncio`` in the config is the way back, should a
library a handler uses not work on uvloop. One thing is slower on uvloop: a hook that starts processes
itself through ``asyncio.create_subprocess_exec`` (441 a second here, against 1,103 on
asyncio's loop). Tasks never take that path (spawner.py); work that does belongs in tasks.

The same processes also set Python's cyclic garbage collector for a worker (``gc_threshold``).
What start-up made (imports, the config, the handler) is frozen out of every later collection,
so no collection walks it again. Every message allocates a few hundred objects (models,
futures, dicts), most of them freed by reference counting, but the young generation is
collected every ``gc_threshold`` allocations all the same. Until a finished window let go of
its groups, each window was a reference cycle (messages, tasks and results included) that only
the older generations' collections freed, and a threshold of 10,000 then raised the worker's
peak RSS from 99 to 138 MiB with 4,000 messages queued, so Python's 700 stayed the default.
Now reference counting frees a window as soon as it is done, and 10,000 leaves peak RSS as it
is (bench-compare's W1 rows: 62-63 and 87-88 MiB either way) while it takes 6-17 us off the
worker's CPU per task (docs/performance.md): at 700 the young generation was collected every
12 tasks or so, about 50 us each. So 10,000 is the default.

Only the processes knarr starts itself (``knarr run``, ``knarr demo``) choose: a Worker
embedded in an application's own ``asyncio.run`` runs on whatever loop and collector that
application set up.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

from knarr.config.root import GC_THRESHOLD

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], kind: str = "uvloop", gc_threshold: int = GC_THRESHOLD) -> T:
    """Run ``main`` to completion on a new loop of ``kind`` (the config's ``event_loop``), like asyncio.run.

    While it runs, the collector is set as the config's ``gc_threshold`` says; as it was again afterwards.
    """
    previous = gc.get_threshold()
    gc.collect()
    gc.freeze()  # start-up's objects live as long as the process: no collection need walk them again
    gc.set_threshold(gc_threshold, *previous[1:])
    try:
        if kind == "uvloop":
            import uvloop  # only here: an embedding application's loop is its own choice

            return uvloop.run(main)
        return asyncio.run(main)
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()
