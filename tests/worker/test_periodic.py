"""@periodic methods in a running worker on the real broker: never overlapping, cancelled on shutdown,
errors logged and counted without ending the loop (unless on_error='stop')."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from prometheus_client import REGISTRY

import knarr
from knarr.engine.worker import Worker
from knarr.errors import UnavailableError
from tests.services.kafka import create_topic, unique_name
from tests.worker.harness import kafka_config, running, wait_until

pytestmark = [pytest.mark.kafka]


class Recorder(knarr.BaseHandler):
    """Counts and times its periodic runs; arrange is never the point here."""

    run_seconds = 0.0
    failures = 0  # the first runs that raise

    def __init__(self) -> None:
        self.runs: list[tuple[float, float]] = []
        self.started = 0
        self.active = 0
        self.most_active = 0
        self.cancelled = 0

    async def arrange(self, messages, pending):
        return []

    async def run_once(self) -> None:
        self.started += 1
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        begin = time.monotonic()
        try:
            await asyncio.sleep(self.run_seconds)
            if self.started <= self.failures:
                raise ValueError(f"run {self.started} fails on purpose")
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.active -= 1
            self.runs.append((begin, time.monotonic()))


class Slow(Recorder):
    run_seconds = 0.3

    @knarr.periodic(seconds=0.05)
    async def tick(self) -> None:
        await self.run_once()


class Stuck(Recorder):
    run_seconds = 600.0

    @knarr.periodic(seconds=0.01)
    async def tick(self) -> None:
        await self.run_once()


class Failing(Recorder):
    failures = 3

    @knarr.periodic(seconds=0.05)
    async def flaky_tick(self) -> None:
        await self.run_once()


class Stopping(Recorder):
    failures = 1

    @knarr.periodic(seconds=0.02, on_error="stop")
    async def once_tick(self) -> None:
        await self.run_once()


class Quick(Recorder):
    @knarr.periodic(seconds=0.02)
    async def tick(self) -> None:
        await self.run_once()


def worker_for(kafka_bootstrap: str, tmp_path, handler: knarr.BaseHandler, **sections) -> Worker:
    topic = unique_name("periodic-in")
    create_topic(kafka_bootstrap, topic, 1)
    return Worker(kafka_config(kafka_bootstrap, topic, tmp_path=tmp_path, **sections), handler)


def periodic_runs(task: str, outcome: str) -> float:
    return REGISTRY.get_sample_value("knarr_periodic_runs_total", {"task": task, "outcome": outcome}) or 0.0


async def test_a_run_slower_than_its_interval_delays_the_next_instead_of_overlapping(kafka_bootstrap, tmp_path):
    handler = Slow()
    async with running(worker_for(kafka_bootstrap, tmp_path, handler)):
        await wait_until(lambda: len(handler.runs) >= 4, 30, "four periodic runs")
    assert handler.most_active == 1
    for (_, end), (begin, _) in zip(handler.runs, handler.runs[1:]):
        assert begin >= end + 0.05 - 0.005, "the next run starts a full interval after the previous one ended"


async def test_the_worker_cancels_a_run_in_progress_when_it_shuts_down(kafka_bootstrap, tmp_path):
    handler = Stuck()
    worker = worker_for(kafka_bootstrap, tmp_path, handler)
    stopped_in = 0.0
    async with running(worker):
        await wait_until(lambda: handler.active == 1, 30, "the periodic run to start")
        stopping = time.monotonic()
    stopped_in = time.monotonic() - stopping
    assert worker.exit_code == 0
    assert handler.cancelled == 1 and handler.active == 0
    assert stopped_in < worker.config.executor.drain_timeout_seconds, "the shutdown must not wait for the run"
    started = handler.started
    await asyncio.sleep(0.2)
    assert handler.started == started, "no run starts after the shutdown"


async def test_a_failing_run_is_logged_and_counted_and_the_loop_goes_on(kafka_bootstrap, tmp_path, capfd):
    handler = Failing()
    errors, oks = periodic_runs("flaky_tick", "error"), periodic_runs("flaky_tick", "ok")
    hook_errors = REGISTRY.get_sample_value("knarr_hook_errors_total", {"hook": "periodic:flaky_tick"}) or 0.0
    worker = worker_for(kafka_bootstrap, tmp_path, handler, logging={"level": "INFO", "format": "json"})
    async with running(worker):
        await wait_until(lambda: handler.started >= 5, 30, "runs after the failing ones")
    assert periodic_runs("flaky_tick", "error") - errors == 3
    assert periodic_runs("flaky_tick", "ok") - oks >= 2
    assert (REGISTRY.get_sample_value("knarr_hook_errors_total", {"hook": "periodic:flaky_tick"}) or 0) - hook_errors == 3
    logged = [json.loads(line) for line in capfd.readouterr().err.splitlines() if line.startswith("{")]
    raised = [e for e in logged if e.get("event") == "periodic task raised"]
    # Three failures within a minute: the first is logged with its traceback, the others counted.
    assert len(raised) == 1
    assert raised[0]["task"] == "flaky_tick" and "run 1 fails on purpose" in raised[0]["exception"]


async def test_on_error_stop_ends_the_loop_after_its_first_error(kafka_bootstrap, tmp_path):
    handler = Stopping()
    async with running(worker_for(kafka_bootstrap, tmp_path, handler)):
        await wait_until(lambda: handler.started == 1 and handler.active == 0, 30, "the failing run")
        await asyncio.sleep(0.3)  # ten intervals: a loop that went on would have run again
        assert handler.started == 1


async def test_a_startup_that_fails_after_the_periodic_tasks_started_cancels_them(tmp_path):
    handler = Quick()
    # Sinks and dead letters in files: everything connects but the broker, which never answers.
    cfg = kafka_config("127.0.0.1:1", "nowhere", tmp_path=tmp_path, dlq={"path": str(tmp_path / "dlq.jsonl")})
    cfg.kafka.startup_timeout_seconds = 1.5
    with pytest.raises(UnavailableError):
        await Worker(cfg, handler).run()
    assert handler.started > 0, "the periodic task ran while the broker was awaited"
    started = handler.started
    await asyncio.sleep(0.2)
    assert handler.started == started, "no run after the failed startup"
