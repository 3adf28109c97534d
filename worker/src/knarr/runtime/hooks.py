"""The one door every user hook goes through: timed, counted, and an exception turned into its documented consequence.

A hook that raises never stops the worker. What happens instead is fixed per hook and
listed in ``CONSEQUENCES`` (the README's handler table says the same): the door logs the
exception once, with that consequence, counts it in ``knarr_handler_errors_total{hook}``, and
hands the caller the exception so it can carry the consequence out.

A hook the handler leaves as BaseHandler has it (``defines`` says False) does nothing worth a
call per message: the engine skips it and uses its default answer (None, priority 0, the
default label), so an unused hook costs nothing and is not timed.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass
from types import CoroutineType
from typing import Any

from knarr.api.handler import BaseHandler
from knarr.observability import metrics

CONSEQUENCES = {
    "arrange": "the window is split to find the messages it fails on, and only those are dead-lettered; "
               "when it fails on every message the partition stalls and retries instead",
    "on_task_complete": "the task counts as failed (reason 'hook')",
    "on_message_complete": "the message is dead-lettered with its offset, then its offset completes",
    "on_window_complete": "the window's messages are dead-lettered with their offsets",
    "on_error": "the task is skipped",
    "on_delivery_error": "the payloads are dead-lettered",
    "on_assign": "logged; the partitions are consumed as usual",
    "on_revoke": "logged; the partitions are released as usual",
    "deserialize_message": "the message goes to arrange() with payload=None and parse_error set",
    "message_label": "the default label is used",
    "task_priority": "the default priority (0) is used",
}


_NO_CONTEXT: dict[str, Any] = {}  # (never changed: _failed and the log line only read it)

# Each hook's knarr_handler_duration_seconds child, looked up once (a hook's calls are timed on every task).
_durations = {name: metrics.handler_duration.labels(name) for name in CONSEQUENCES}


def defines(handler: Any, name: str) -> bool:
    """Whether the handler's class has its own ``name`` hook rather than BaseHandler's."""
    return getattr(type(handler), name, None) is not getattr(BaseHandler, name)


@dataclass(slots=True)
class Called:
    """What a hook call came to: its value, or the exception it raised (value is then None)."""

    value: Any = None
    error: Exception | None = None

    @property
    def raised(self) -> bool:
        return self.error is not None


def _failed(name: str, exc: Exception, log: Any, context: dict[str, Any], quiet: bool = False) -> Called:
    metrics.hook_errors.labels(name).inc()
    if quiet:  # the caller logs once for many calls (arrange() while a window is split)
        return Called(error=exc)
    log.error(f"{name} raised; {CONSEQUENCES.get(name, 'logged')}", hook=name,
              error=f"{type(exc).__name__}: {exc}", exc_info=exc, **context)
    return Called(error=exc)


async def call_hook(name: str, fn: Callable[..., Awaitable[Any]], *args: Any, log: Any, quiet: bool = False,
                    **context: Any) -> Called:
    """Await the async hook ``fn(*args)``."""
    called = start_hook(name, fn, *args, log=log, quiet=quiet, context=context)
    return called if isinstance(called, Called) else await called


def start_hook(name: str, fn: Callable[..., Awaitable[Any]], *args: Any, log: Any, quiet: bool = False,
               context: dict[str, Any] = _NO_CONTEXT) -> Called | Coroutine[Any, Any, Called]:
    """The hook, run at once as far as it goes without waiting: its Called when it returns (or raises)
    in that first step, as most hooks do, else a coroutine to await for the rest. Either way it is
    timed, counted and its exception turned into a Called, without a coroutine of the engine's own
    around the hook's when it never waits (direct.py's path; call_hook awaits the rest). ``context``
    names what the hook was called for in its log line (call_hook's keyword arguments; a dict here,
    so a call on every task builds no keyword dict of its own)."""
    started = time.monotonic()
    waits = False
    try:
        coro = fn(*args)
        if type(coro) is CoroutineType or isinstance(coro, Coroutine):  # (an async def's, without the ABC's check)
            try:
                waiting_on = coro.send(None)
            except StopIteration as returned:
                return Called(returned.value)
            rest: Any = _Resumed(coro, waiting_on)
        else:  # another awaitable is awaited as it is, and `await` says what is wrong with what is none
            rest = coro
        waits = True
        return _rest(name, started, rest, log, quiet, context)
    except Exception as exc:
        return _failed(name, exc, log, context, quiet)
    finally:
        if not waits:
            duration = _durations.get(name) or metrics.labelled(metrics.handler_duration, name)
            duration.observe(time.monotonic() - started)


async def _rest(name: str, started: float, rest: Any, log: Any, quiet: bool, context: dict[str, Any]) -> Called:
    try:
        return Called(await rest)
    except Exception as exc:
        return _failed(name, exc, log, context, quiet)
    finally:
        duration = _durations.get(name) or metrics.labelled(metrics.handler_duration, name)
        duration.observe(time.monotonic() - started)


class _Resumed:
    """A coroutine that has begun and is waiting on ``waiting_on``: awaiting this goes on where it stopped."""

    __slots__ = ("coro", "waiting_on")

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting_on: Any) -> None:
        self.coro, self.waiting_on = coro, waiting_on

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, pending = self.coro, self.waiting_on
        while True:
            try:
                sent = yield pending
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancelled, or an awaited future's error: the hook's to handle
                try:
                    pending = coro.throw(exc)
                except StopIteration as returned:
                    return returned.value
            else:
                try:
                    pending = coro.send(sent)
                except StopIteration as returned:
                    return returned.value


def call_sync_hook(name: str, fn: Callable[..., Any], *args: Any, log: Any, default: Any = None, **context: Any) -> Called:
    """Call a synchronous hook (deserialize_message, message_label, task_priority); ``default`` if it raises."""
    try:
        return Called(fn(*args))
    except Exception as exc:
        called = _failed(name, exc, log, context)
        called.value = default
        return called
