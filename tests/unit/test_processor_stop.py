"""Stopping a partition ends everything it runs, even work that lost its first cancel on the way."""

from __future__ import annotations

import asyncio
import logging

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
    processor._spawn(_waits_for_a_server_that_does_not_answer(seen))
    processor._spawn(asyncio.sleep(3600))  # an ordinary child ends at the first cancel
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
    assert warnings[0]["where"] == [
        "test_processor_stop.py:28 _waits_for_a_server_that_does_not_answer"]


async def test_a_stop_whose_children_all_end_at_once_says_nothing():
    processor = _processor()
    for _ in range(3):
        processor._spawn(asyncio.sleep(3600))
    await asyncio.sleep(0)
    with capture_logs() as logged:
        await asyncio.wait_for(processor.stop(), 10)
    assert not processor._children and logged == []
