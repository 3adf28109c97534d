"""The handler's ``@periodic`` methods: one loop each, sleeping, running, never overlapping itself.

The next interval starts when a run returns, so a run slower than its interval delays the next
one instead of running beside it. A run that raises is counted (``knarr_periodic_runs_total``
with outcome ``error``, and ``knarr_hook_errors_total{hook="periodic:<name>"}``) and logged, at
most once a minute per method with how many failures went unlogged; ``on_error='stop'`` ends
the loop after it. The worker cancels every loop when it shuts down, a run in progress included.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from knarr.api.handler import PeriodicSpec
from knarr.observability import metrics
from knarr.observability.ratelimit import Deduplicator

ERROR_LOG_SECONDS = 60.0


async def run_periodic(name: str, spec: PeriodicSpec, fn: Callable[[], Awaitable[Any]], log: Any) -> None:
    ok = metrics.periodic_runs.labels(name, "ok")
    failed = metrics.periodic_runs.labels(name, "error")
    errors = Deduplicator(window_seconds=ERROR_LOG_SECONDS)
    while True:
        await asyncio.sleep(spec.seconds)
        try:
            await fn()
        except Exception:
            failed.inc()
            metrics.hook_errors.labels(f"periodic:{name}").inc()
            emit, unlogged = errors.seen(name, time.monotonic())
            if emit or spec.on_error == "stop":
                log.exception("periodic task raised", task=name, on_error=spec.on_error,
                              **({"unlogged_failures": unlogged} if unlogged else {}))
            if spec.on_error == "stop":
                log.warning("periodic task stopped after an error (on_error='stop')", task=name)
                return
        else:
            ok.inc()
