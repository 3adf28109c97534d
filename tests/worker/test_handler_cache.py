"""The handler cache in a running worker, on the real broker and a real Redis.

A cache hit becomes a precomputed task that takes no pool slot and starts no process; a
restarted worker process finds its entries in its SQLite file; a second worker process hits
what the first stored in the shared tier; and a shared tier that stops answering (SIGSTOP)
leaves the pipeline running on the local tiers, with one log line and a counter.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from knarr.engine.worker import Worker
from tests.programs.cache_handlers import Memoising
from tests.services.kafka import committed_offsets, consume_all, create_topic, end_offsets, produce_json, unique_name
from tests.services.redis import fresh_prefix
from tests.worker.harness import kafka_config, running, wait_until
from tests.worker.procs import WorkerFleet, WorkerProcess, WorkerSpec
from tests.worker.procs import wait_until as wait_sync

pytestmark = [pytest.mark.kafka]

HANDLER = str(Path(__file__).resolve().parents[1] / "programs" / "cache_handlers.py") + ":Memoising"
KEYS = [f"k{i}" for i in range(8)]


def lookups(tag: str, keys: list[str], **extra) -> list[dict]:
    return [{"request_id": f"{tag}-{key}", "key": key, **extra} for key in keys]


def tasks_counted(status: str) -> float:
    return REGISTRY.get_sample_value("knarr_tasks_total", {"status": status}) or 0.0


async def test_a_cache_hit_becomes_a_precomputed_task_that_takes_no_slot_and_starts_no_process(kafka_bootstrap, tmp_path):
    topic = unique_name("cache-in")
    create_topic(kafka_bootstrap, topic, 1)
    handler = Memoising()
    # One pool slot: while a slow task holds it, only tasks that need no slot can finish.
    cfg = kafka_config(kafka_bootstrap, topic, tmp_path=tmp_path, executor={"max_executors": 1},
                       sinks={"kafka": {"out": {"topic": unique_name("cache-out")}}}, cache={"enabled": True})
    async with running(Worker(cfg, handler)) as worker:
        produce_json(kafka_bootstrap, topic, lookups("first", KEYS))
        await wait_until(lambda: len(handler.results) == len(KEYS), 60, "the first pass to run every task")
        assert all(r.pid is not None for r in handler.results)

        precomputed, completed = tasks_counted("precomputed"), tasks_counted("completed")
        produce_json(kafka_bootstrap, topic, lookups("slow", ["slow"], sleep=8) + lookups("again", KEYS))
        await wait_until(lambda: len(handler.results) == 2 * len(KEYS), 60, "the second pass to come from the cache")
        again = handler.results[len(KEYS):]
        assert not any(r.task.metadata["key"] == "slow" for r in again), "the slow task must still hold the only slot"
        assert [r.pid for r in again] == [None] * len(KEYS)
        assert sorted(r.stdout.strip() for r in again) == sorted(f"value-of-{k}" for k in KEYS)
        assert tasks_counted("precomputed") - precomputed == len(KEYS)
        assert tasks_counted("completed") == completed  # no process finished meanwhile
        assert worker.scheduler.in_use == 1  # the slow task's, all along
        await wait_until(lambda: len(handler.results) == 2 * len(KEYS) + 1, 60, "the slow task")
    assert worker.exit_code == 0


def cache_spec(kafka_bootstrap: str, topic: str, out: str, cache: dict, **fields) -> WorkerSpec:
    spec = WorkerSpec(brokers=kafka_bootstrap, topic=topic, group=unique_name("g"), output_topic=out,
                      log_level="INFO", **fields)
    base = spec.config

    def config(port: int) -> dict:
        return {**base(port), "cache": cache, "cluster_name": "blue"}

    spec.config = config  # type: ignore[method-assign]
    return spec


def start(fleet: WorkerFleet, name: str, spec: WorkerSpec, **env: str) -> WorkerProcess:
    worker = WorkerProcess(name, spec, fleet.workdir, fleet.marker, HANDLER)
    worker.env.update(env)
    fleet.workers.append(worker.start())
    worker.wait_consuming()
    return worker


def outputs(kafka_bootstrap: str, out: str, count: int, tag: str) -> list[dict]:
    """The outputs of the requests tagged ``tag``, once ``count`` of them arrived (a replay may add more)."""
    def enough() -> list[dict] | None:
        found = [m.json() for m in consume_all(kafka_bootstrap, out, timeout=10)]
        tagged = [o for o in found if o["request_id"].startswith(f"{tag}-")]
        return tagged if len(tagged) >= count else None

    return wait_sync(enough, 90, f"{count} '{tag}' outputs")


def topic_pair() -> tuple[str, str]:
    return unique_name("cache-in"), unique_name("cache-out")


def rows_in(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
    except sqlite3.Error:
        return 0  # not created yet


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_a_restarted_worker_process_finds_its_entries_in_its_sqlite_file(kafka_bootstrap, tmp_path, stop):
    topic, out = topic_pair()
    create_topic(kafka_bootstrap, topic, 1)
    create_topic(kafka_bootstrap, out, 1)
    spec = cache_spec(kafka_bootstrap, topic, out, {"enabled": True, "db_dir": str(tmp_path / "cache"),
                                                    "flush_interval_seconds": 0.2})
    with WorkerFleet(spec, tmp_path, f"cache-{secrets.token_hex(3)}") as fleet:
        first = start(fleet, "w", spec)
        db = tmp_path / "cache" / f"{fleet.marker}-w-cache.db"
        produce_json(kafka_bootstrap, topic, lookups("first", KEYS))
        ran = outputs(kafka_bootstrap, out, len(KEYS), "first")
        assert len(ran) == len(KEYS) and all(o["pid"] is not None for o in ran)
        if stop == "sigterm":
            assert first.terminate() == 0  # the shutdown flushes the cache
        else:  # no shutdown at all: what the interval flushes already wrote is what survives
            wait_sync(lambda: rows_in(db) == len(KEYS), 30, "the flush interval to write every entry")
            wait_sync(lambda: committed_offsets(kafka_bootstrap, spec.group, topic) == end_offsets(kafka_bootstrap, topic),
                      30, "the first pass committed (so nothing of it replays)")
            first.kill()

        again = start(fleet, "w", spec)  # the same worker name: the same <name>-cache.db
        produce_json(kafka_bootstrap, topic, lookups("again", KEYS))
        hits = outputs(kafka_bootstrap, out, len(KEYS), "again")
        assert sorted((o["key"], o["stdout"], o["pid"]) for o in hits) == [(k, f"value-of-{k}", None) for k in KEYS]
        assert again.metrics().get('knarr_tasks_total{status="precomputed"}') == len(KEYS)
        assert again.terminate() == 0
    assert sorted(p.name for p in (tmp_path / "cache").glob("*-cache.db")) == [db.name]


@pytest.mark.slow
def test_a_second_worker_process_hits_what_the_first_stored_in_the_shared_tier(kafka_bootstrap, redis_url, tmp_path):
    prefix = fresh_prefix("cache")
    shared = {"url": redis_url, "key_prefix": prefix}
    first_topic, out = topic_pair()
    second_topic = unique_name("cache-in")
    for name in (first_topic, second_topic, out):
        create_topic(kafka_bootstrap, name, 1)
    first_spec = cache_spec(kafka_bootstrap, first_topic, out, {"enabled": True, "shared": shared})
    second_spec = cache_spec(kafka_bootstrap, second_topic, out, {"enabled": True, "shared": shared})
    with WorkerFleet(first_spec, tmp_path, f"cache-{secrets.token_hex(3)}") as fleet:
        first = start(fleet, "first", first_spec, CACHE_TEST_SCOPE="cluster")
        produce_json(kafka_bootstrap, first_topic, lookups("first", KEYS))
        ran = outputs(kafka_bootstrap, out, len(KEYS), "first")
        assert all(o["pid"] is not None and o["worker"].endswith("-first") for o in ran)

        second = start(fleet, "second", second_spec, CACHE_TEST_SCOPE="cluster")
        # The first worker's writes reach Redis from its writer task, right after each set.
        produce_json(kafka_bootstrap, second_topic, lookups("second", KEYS))
        hits = outputs(kafka_bootstrap, out, len(KEYS), "second")
        assert sorted((o["key"], o["stdout"], o["pid"]) for o in hits) == [(k, f"value-of-{k}", None) for k in KEYS]
        assert all(o["worker"].endswith("-second") for o in hits)
        seen = second.metrics()
        assert seen.get('knarr_cache_hits_total{tier="shared"}') == len(KEYS)
        assert seen.get('knarr_tasks_total{status="precomputed"}') == len(KEYS)
        assert first.terminate() == 0
        assert second.terminate() == 0


@pytest.mark.slow
def test_a_frozen_shared_tier_leaves_the_pipeline_running_on_the_local_tiers(kafka_bootstrap, private_redis, tmp_path):
    topic, out = topic_pair()
    create_topic(kafka_bootstrap, topic, 1)
    create_topic(kafka_bootstrap, out, 1)
    shared = {"url": private_redis.address, "key_prefix": fresh_prefix("cache"), "socket_timeout_seconds": 0.5,
              "retry_after_seconds": 1.0}
    spec = cache_spec(kafka_bootstrap, topic, out, {"enabled": True, "shared": shared})
    with WorkerFleet(spec, tmp_path, f"cache-{secrets.token_hex(3)}") as fleet:
        worker = start(fleet, "w", spec, CACHE_TEST_SCOPE="cluster")
        produce_json(kafka_bootstrap, topic, lookups("before", KEYS[:4]))
        outputs(kafka_bootstrap, out, 4, "before")

        with private_redis.frozen():
            frozen_at = time.monotonic()
            produce_json(kafka_bootstrap, topic, lookups("during", KEYS))
            during = outputs(kafka_bootstrap, out, len(KEYS), "during")
            produce_json(kafka_bootstrap, topic, lookups("twice", KEYS))
            twice = outputs(kafka_bootstrap, out, len(KEYS), "twice")
            took = time.monotonic() - frozen_at
            seen = worker.metrics()
            assert worker.alive()
            wait_sync(lambda: committed_offsets(kafka_bootstrap, spec.group, topic) == end_offsets(kafka_bootstrap, topic),
                      60, "every offset committed during the outage")
        assert len(during) == len(twice) == len(KEYS)
        # What this worker stored before is still in its memory; the rest ran once, then hit memory.
        assert sorted(o["key"] for o in during if o["pid"] is None) == KEYS[:4]
        assert [o["pid"] for o in twice] == [None] * len(KEYS)
        assert seen.get("knarr_cache_shared_available") == 0
        assert seen.get("knarr_cache_shared_errors_total", 0) >= 1
        assert took < 60, f"the outage slowed the pipeline to {took:.1f}s"

        # Back: the first read that tries the tier again (retry_after_seconds later) closes the outage.
        deadline = time.monotonic() + 60
        while worker.metrics().get("knarr_cache_shared_available") != 1:
            assert time.monotonic() < deadline, "the shared tier never counted as available again"
            produce_json(kafka_bootstrap, topic, lookups("after", [f"new-{secrets.token_hex(3)}"]))
            time.sleep(1.5)  # pacing: one fresh key per retry_after_seconds, bounded by the deadline
        assert worker.terminate() == 0
        events = [e.get("event", "") for e in worker.log_events()]
    assert sum("shared cache tier unavailable" in e for e in events) == 1, events
    assert sum("shared cache tier answers again" in e for e in events) == 1, events
