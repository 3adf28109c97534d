"""The event loop's lag: measured by a periodic probe, exported as a histogram, a stall logged as a warning."""

from __future__ import annotations

import asyncio
import json
import time

import knarr
import structlog
from knarr.engine.worker import Worker
from knarr.observability.loop_lag import STALL_WARNING_SECONDS, LoopLagProbe
from knarr.sources.memory import MemorySource
from prometheus_client import REGISTRY

from tests.worker.harness import BEHAVE, local_config


def _lag(sample: str) -> float:
    return REGISTRY.get_sample_value(f"knarr_event_loop_lag_seconds_{sample}") or 0.0


async def test_a_blocked_loop_shows_in_the_lag_histogram():
    probe = LoopLagProbe(interval=0.01, stall_seconds=10)
    probe.samples = []
    count, total, over_100ms = _lag("count"), _lag("sum"), _lag("count") - (
        REGISTRY.get_sample_value("knarr_event_loop_lag_seconds_bucket", {"le": "0.1"}) or 0.0)
    watching = asyncio.create_task(probe.run())
    await asyncio.sleep(0.05)
    time.sleep(0.3)  # block the loop, as a synchronous call in a hook would
    await asyncio.sleep(0.05)
    watching.cancel()
    assert _lag("count") > count + 3
    assert _lag("sum") - total >= 0.25
    assert max(probe.samples) >= 0.25
    over_now = _lag("count") - REGISTRY.get_sample_value("knarr_event_loop_lag_seconds_bucket", {"le": "0.1"})
    assert over_now >= over_100ms + 1  # the probe due during the block ran more than 100 ms late


async def test_an_idle_loop_lags_by_little():
    probe = LoopLagProbe(interval=0.01, stall_seconds=10)
    probe.samples = []
    watching = asyncio.create_task(probe.run())
    await asyncio.sleep(0.3)
    watching.cancel()
    assert len(probe.samples) >= 5
    assert sorted(probe.samples)[len(probe.samples) // 2] < 0.1  # generous: the test machine is shared


class BlockingArrange(knarr.BaseHandler[None, None]):
    """arrange() blocks the event loop with a synchronous sleep on its first window."""

    def __init__(self) -> None:
        self.blocked = False

    async def arrange(self, messages, pending):
        if not self.blocked:
            self.blocked = True
            time.sleep(0.6)
        return [knarr.ExecutorTask(args=["out=ok"], source_offsets=[m.offset]) for m in messages]


async def test_a_hook_that_blocks_the_loop_is_reported_once_as_a_stall_naming_the_lag(tmp_path, capsys):
    config = local_config(tmp_path, log_format="json", binary_path=BEHAVE, max_executors=2, window_size=5)
    handler = BlockingArrange()
    messages = [knarr.SourceMessage(topic="t", partition=0, offset=o, value=b"{}") for o in range(20)]
    worker = Worker(config, handler, source=MemorySource(messages))
    worker.loop_lag.interval = 0.02
    saved = structlog.get_config()  # the worker logs to this test's captured stderr: later tests must not
    try:
        assert await asyncio.wait_for(worker.run(), 60) == 0
    finally:
        structlog.configure(**saved)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    stalls = [line for line in lines if line["event"].startswith("event loop stalled")]
    assert len(stalls) == 1, stalls
    stall = stalls[0]
    assert stall["level"] == "warning"
    assert 0.5 <= stall["lag_seconds"] < 5 and stall["threshold_seconds"] == STALL_WARNING_SECONDS
    assert f"stalled for {stall['lag_seconds']:.3f}s" in stall["event"]
    assert "asyncio.to_thread" in stall["event"]


def test_stall_warnings_are_rate_limited_and_count_what_they_held_back():
    import logging

    from structlog.testing import capture_logs

    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
                        cache_logger_on_first_use=False)  # whatever an earlier test left
    try:
        probe = LoopLagProbe(stall_seconds=0.25, warn_every=0.2)
        with capture_logs() as logged:
            for lag in (0.3, 0.01, 0.4, 0.5):
                probe.observe(lag)
        assert [e["lag_seconds"] for e in logged] == [0.3]
        time.sleep(0.25)  # the next window
        with capture_logs() as logged:
            probe.observe(0.7)
        assert [(e["lag_seconds"], e["more_stalls_suppressed"]) for e in logged] == [(0.7, 2)]
    finally:
        structlog.configure(**saved)


def test_a_blocked_uvloop_shows_the_same_lag():
    """uvloop's loop.time() moves in whole milliseconds once per turn; the probe reads the monotonic clock."""
    import uvloop

    async def blocked() -> list[float]:
        probe = LoopLagProbe(interval=0.01, stall_seconds=10)
        probe.samples = []
        watching = asyncio.create_task(probe.run())
        await asyncio.sleep(0.05)
        time.sleep(0.3)
        await asyncio.sleep(0.05)
        watching.cancel()
        return probe.samples

    samples = uvloop.run(blocked())
    assert 0.25 <= max(samples) < 0.4
    assert sorted(samples)[len(samples) // 2] < 0.005  # unblocked turns: on time
