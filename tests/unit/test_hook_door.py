"""The hook door times every call of a hook under the hook's own name, whether it returns at once or waits."""

from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY

from knarr.observability.logging import get_logger
from knarr.runtime.hooks import call_hook, start_hook

log = get_logger(component="test")


def timed(hook: str) -> float:
    return REGISTRY.get_sample_value("knarr_handler_duration_seconds_count", {"hook": hook}) or 0.0


async def test_each_call_is_timed_under_its_hooks_name_at_once_or_after_it_waited():
    async def at_once() -> str:
        return "now"

    async def waits() -> str:
        await asyncio.sleep(0.01)
        return "later"

    before = {hook: timed(hook) for hook in ("on_task_complete", "on_window_complete", "a_hook_of_its_own")}
    assert start_hook("on_task_complete", at_once, log=log).value == "now"
    assert (await call_hook("on_window_complete", waits, log=log)).value == "later"
    assert (await call_hook("a_hook_of_its_own", at_once, log=log)).value == "now"
    assert {hook: timed(hook) - count for hook, count in before.items()} == {
        "on_task_complete": 1, "on_window_complete": 1, "a_hook_of_its_own": 1}


async def test_a_hook_that_raises_is_timed_too_and_its_error_handed_back():
    async def raises() -> None:
        raise ValueError("its own bug")

    before = timed("on_error")
    called = await call_hook("on_error", raises, log=log)
    assert isinstance(called.error, ValueError) and timed("on_error") == before + 1
