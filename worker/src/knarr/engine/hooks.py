"""Calling a handler hook the same way everywhere: timed, and an exception logged and counted."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from knarr.observability import metrics


async def call_hook(
    name: str, fn: Callable[..., Awaitable[Any]], *args: Any, log: Any, on_raise: str, **context: Any
) -> tuple[Any, Exception | None]:
    """Await ``fn(*args)``; returns ``(value, None)``, or ``(None, exc)`` after logging ``on_raise``."""
    started = time.monotonic()
    try:
        return await fn(*args), None
    except Exception as exc:
        metrics.hook_errors.labels(name).inc()
        log.exception(on_raise, hook=name, **context)
        return None, exc
    finally:
        metrics.labelled(metrics.handler_duration, name).observe(time.monotonic() - started)
