"""Stopping a partition ends everything it runs, even work that lost its first cancel on the way; the
worker's own waits keep a cancel that arrives as what they wait for does."""

from __future__ import annotations

import asyncio
import logging
import sys

import structlog
from structlog.testing import capture_logs

from knarr import BaseHandler
from knarr.config.models import ExecutorConfig
from knarr.engine.processor import PartitionProcessor


def _processor() -> PartitionProcessor:
    return PartitionProcessor("in", 0, BaseHandler(), executor=None, sinks=None, config=ExecutorConfig(),
                              on_fatal=lambda exc: None)


async def _waits_for_a_server_that_does_not_answer(seen: list[str]) -> None:
    """What a client library can do: take the first cancel for a timeout of its own and wait on."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        seen.append("first cancel swallowed")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        seen.append("second cancel taken")
        raise


async def test_a_child_that_swallows_its_cancel_is_cancelled_again_and_the_stop_says_where_it_was():
    processor = _processor()
    seen: list[str] = []
    processor.spawn(_waits_for_a_server_that_does_not_answer(seen))
    processor.spawn(asyncio.sleep(3600))  # an ordinary child ends at the first cancel
    await asyncio.sleep(0)

    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        with capture_logs() as logged:
            await asyncio.wait_for(processor.stop(), 10)
    finally:
        structlog.configure(**saved)

    assert seen == ["first cancel swallowed", "second cancel taken"]
    assert not processor._children
    warnings = [e for e in logged if e["event"].startswith("still running after being cancelled")]
    assert len(warnings) == 1 and warnings[0]["count"] == 1
    [where] = warnings[0]["where"]  # file:line function of the second sleep
    assert where.startswith("test_processor_stop.py:") and where.endswith(" _waits_for_a_server_that_does_not_answer")


async def test_a_stop_whose_children_all_end_at_once_says_nothing():
    processor = _processor()
    for _ in range(3):
        processor.spawn(asyncio.sleep(3600))
    await asyncio.sleep(0)
    with capture_logs() as logged:
        await asyncio.wait_for(processor.stop(), 10)
    assert not processor._children and logged == []


async def test_a_wait_for_an_event_keeps_a_cancel_that_arrives_as_the_event_is_set():
    from knarr.runtime.stopping import wait_event

    async def waiting(how) -> str:
        event = asyncio.Event()
        waiter = asyncio.create_task(how(event))
        await asyncio.sleep(0)
        event.set()
        waiter.cancel()  # in the same iteration: the stop of a loop that was just woken
        await asyncio.wait([waiter], timeout=1)
        outcome = "cancelled" if waiter.cancelled() else "went on"
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        return outcome

    async def with_wait_event(event):
        await wait_event(event, 5)
        await asyncio.sleep(3600)  # a loop going on after its stop

    async def with_wait_for(event):
        await asyncio.wait_for(event.wait(), 5)
        await asyncio.sleep(3600)

    assert await waiting(with_wait_event) == "cancelled"
    if sys.version_info < (3, 12):  # what wait_event is for: wait_for drops that cancel here
        assert await waiting(with_wait_for) == "went on"
