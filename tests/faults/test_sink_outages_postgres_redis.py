"""A sink server that goes away mid-run: stopped for real (~20 s) or frozen with SIGSTOP (~10 s).

Each test runs a real worker in-process against the shared broker and a private PostgreSQL or
Redis server of its own. Half the messages are delivered, the server goes away, the other half
arrives while it is away: readiness and knarr_sink_waiting say which sink the worker waits for,
nothing is dead-lettered, nothing is committed past the waiting deliveries. Then the server comes
back and the worker resumes by itself: every row / key is there and every offset is committed.

Stopping the worker while the server is frozen ends within the drain timeout (plus the bounded
shutdown steps) and commits nothing unconfirmed; a second worker delivers the rest.

A delivery cut off at its commit may have been applied after all (its answer was lost), so it
can land twice after the outage: the tables here have no unique key and the checks count the
distinct ids (the count of duplicates is printed); upserts make such replays harmless.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import pytest
from prometheus_client import REGISTRY

from knarr.engine.worker import SHUTDOWN_STEP_SECONDS, Worker
from knarr.errors import ExitCode
from tests.services.kafka import committed_offsets, consume_all, create_topic, end_offsets, produce_json, unique_name
from tests.services.postgres import PostgresServer, fresh_table, query
from tests.services.redis import RedisServer, fresh_prefix, read_keys
from tests.services.servers import ScriptedServer
from tests.sinks.handlers import ToPostgres, ToRedis
from tests.worker.harness import kafka_config, running, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

HALF = 150
STOPPED_SECONDS = 20.0
FROZEN_SECONDS = 10.0
DRAIN_TIMEOUT = 3.0


@contextmanager
def stopped(server: ScriptedServer) -> Iterator[None]:
    """The server stopped for real, then started again on the same address."""
    address = server.address
    server.stop()
    try:
        yield
    finally:
        assert server.start() == address, "the restarted server must keep its address"


@dataclass
class Outage:
    """What one outage run saw."""

    readiness: str = ""
    waiting_metric: float = 0.0
    away_seconds: float = 0.0
    recovered_seconds: float = 0.0


async def ride_out(kafka_bootstrap: str, worker: Worker, fault: Callable[[], AbstractContextManager[None]],
                   seconds: float, delivered: Callable[[], int], sink: tuple[str, str]) -> Outage:
    """Deliver half the messages (``delivered()`` counts them), take the server away for ``seconds``
    while the other half arrives, bring it back, and wait until everything is committed."""
    cfg = worker.config
    topic, group = cfg.kafka.source_topic, cfg.kafka.consumer_group
    seen = Outage()
    async with running(worker):
        produce_json(kafka_bootstrap, topic, [{"id": i} for i in range(HALF)], key_fn=lambda r: str(r["id"]))
        await wait_until(lambda: delivered() == HALF, 60, "the first half delivered")
        with fault():
            away = time.monotonic()
            produce_json(kafka_bootstrap, topic, [{"id": i} for i in range(HALF, 2 * HALF)], key_fn=lambda r: str(r["id"]))
            await wait_until(lambda: not worker._readiness()[0], 30, "readiness to report the wait")
            seen.readiness = worker._readiness()[1]
            seen.waiting_metric = REGISTRY.get_sample_value("knarr_sink_waiting", {"sink": sink[0], "type": sink[1]}) or 0.0
            assert committed_offsets(kafka_bootstrap, group, topic) != end_offsets(kafka_bootstrap, topic)
            await asyncio.sleep(max(0.0, seconds - (time.monotonic() - away)))
            assert worker.sinks.dead_lettered == 0
        back = time.monotonic()
        seen.away_seconds = back - away
        await wait_until(lambda: committed_offsets(kafka_bootstrap, group, topic) == end_offsets(kafka_bootstrap, topic), 120,
                         "every offset committed after the server came back")
        seen.recovered_seconds = time.monotonic() - back
        assert worker._readiness()[0], worker._readiness()[1]
    assert worker.exit_code == 0
    assert worker.sinks.dead_lettered == 0
    assert consume_all(kafka_bootstrap, cfg.dlq_topic, timeout=3) == []
    return seen


def sink_name() -> str:
    return f"s{secrets.token_hex(3)}"  # knarr_sink_waiting is process-wide: one series per test


def source(kafka_bootstrap: str) -> str:
    topic = unique_name("outage-in")
    create_topic(kafka_bootstrap, topic, 2)
    return topic


EXECUTOR = {"retry_backoff_base_seconds": 0.2, "retry_backoff_max_seconds": 1.0, "drain_timeout_seconds": DRAIN_TIMEOUT}


def pg_worker(kafka_bootstrap: str, server: PostgresServer, name: str) -> tuple[Worker, Callable[[], list[int]]]:
    table = fresh_table(server.address, "id bigint, body text")
    cfg = kafka_config(
        kafka_bootstrap, source(kafka_bootstrap), executor=EXECUTOR,
        sinks={"postgres": {name: {"dsn": server.address, "pool_min": 1, "pool_max": 4,
                                   "connect_timeout_seconds": 2, "command_timeout_seconds": 2}}},
    )
    ids = lambda: [r["id"] for r in query(server.address, f"SELECT id FROM {table}")]  # noqa: E731
    return Worker(cfg, ToPostgres(table)), ids


def redis_worker(kafka_bootstrap: str, server: RedisServer, name: str) -> tuple[Worker, Callable[[], dict]]:
    prefix = fresh_prefix()
    cfg = kafka_config(
        kafka_bootstrap, source(kafka_bootstrap), executor=EXECUTOR,
        sinks={"redis": {name: {"url": server.address, "key_prefix": prefix, "socket_timeout_seconds": 1}}},
    )

    return Worker(cfg, ToRedis(ttl=3600)), lambda: read_keys(server.address, prefix)


def check_postgres(ids: list[int], seen: Outage, name: str, how: str) -> None:
    print(f"postgres {how} {seen.away_seconds:.1f}s: {len(ids)} rows, {len(set(ids))} distinct of {2 * HALF}, "
          f"{len(ids) - len(set(ids))} duplicates, 0 dead-lettered, all offsets committed "
          f"{seen.recovered_seconds:.1f}s after it came back; readiness while away: {seen.readiness!r}")
    assert sorted(set(ids)) == list(range(2 * HALF))
    assert f"postgres sink {name!r} is unavailable" in seen.readiness
    assert seen.waiting_metric >= 1


def check_redis(keys: dict, seen: Outage, name: str, how: str) -> None:
    print(f"redis {how} {seen.away_seconds:.1f}s: {len(keys)} keys of {2 * HALF}, 0 dead-lettered, all offsets committed "
          f"{seen.recovered_seconds:.1f}s after it came back; readiness while away: {seen.readiness!r}")
    assert sorted(json.loads(value)["id"] for value, _ttl in keys.values()) == list(range(2 * HALF))
    assert all((0 < ttl <= 3600) if json.loads(value)["id"] % 2 == 0 else ttl == -1 for value, ttl in keys.values())
    assert f"redis sink {name!r} is unavailable" in seen.readiness
    assert seen.waiting_metric >= 1


async def test_postgres_stopped_for_20s_mid_run_loses_nothing_and_the_worker_resumes_by_itself(kafka_bootstrap, private_postgres):
    name = sink_name()
    worker, ids = pg_worker(kafka_bootstrap, private_postgres, name)
    seen = await ride_out(kafka_bootstrap, worker, lambda: stopped(private_postgres), STOPPED_SECONDS,
                          lambda: len(set(ids())), (name, "postgres"))
    check_postgres(ids(), seen, name, "stopped")


async def test_postgres_frozen_for_10s_mid_run_loses_nothing_and_the_worker_resumes_by_itself(kafka_bootstrap, private_postgres):
    name = sink_name()
    worker, ids = pg_worker(kafka_bootstrap, private_postgres, name)
    seen = await ride_out(kafka_bootstrap, worker, private_postgres.frozen, FROZEN_SECONDS,
                          lambda: len(set(ids())), (name, "postgres"))
    check_postgres(ids(), seen, name, "frozen")


async def test_redis_stopped_for_20s_mid_run_loses_nothing_and_the_worker_resumes_by_itself(kafka_bootstrap, private_redis):
    name = sink_name()
    worker, keys = redis_worker(kafka_bootstrap, private_redis, name)
    seen = await ride_out(kafka_bootstrap, worker, lambda: stopped(private_redis), STOPPED_SECONDS,
                          lambda: len(keys()), (name, "redis"))
    check_redis(keys(), seen, name, "stopped")


async def test_redis_frozen_for_10s_mid_run_loses_nothing_and_the_worker_resumes_by_itself(kafka_bootstrap, private_redis):
    name = sink_name()
    worker, keys = redis_worker(kafka_bootstrap, private_redis, name)
    seen = await ride_out(kafka_bootstrap, worker, private_redis.frozen, FROZEN_SECONDS,
                          lambda: len(keys()), (name, "redis"))
    check_redis(keys(), seen, name, "frozen")


async def stop_while_frozen(kafka_bootstrap: str, worker: Worker, server: ScriptedServer, delivered: Callable[[], int]) -> float:
    """Deliver half, freeze the server, let the other half wait for it, stop the worker; then thaw it and
    let a second worker in the same group deliver the rest. Returns how long the stop took."""
    cfg = worker.config
    topic, group = cfg.kafka.source_topic, cfg.kafka.consumer_group
    run = asyncio.create_task(worker.run())
    await wait_until(lambda: worker._ready or run.done(), 30, "the worker to start")
    produce_json(kafka_bootstrap, topic, [{"id": i} for i in range(HALF)], key_fn=lambda r: str(r["id"]))
    await wait_until(lambda: delivered() == HALF, 60, "the first half delivered")
    with server.frozen():
        produce_json(kafka_bootstrap, topic, [{"id": i} for i in range(HALF, 2 * HALF)], key_fn=lambda r: str(r["id"]))
        await wait_until(lambda: not worker._readiness()[0], 30, "readiness to report the wait")
        started = time.monotonic()
        worker.stop()
        code = await asyncio.wait_for(run, 60)
        took = time.monotonic() - started
        assert code == ExitCode.DRAIN_INCOMPLETE
        assert committed_offsets(kafka_bootstrap, group, topic) != end_offsets(kafka_bootstrap, topic)
    second = Worker(cfg, worker.handler)
    async with running(second):
        await wait_until(lambda: committed_offsets(kafka_bootstrap, group, topic) == end_offsets(kafka_bootstrap, topic), 120,
                         "the second worker to commit everything")
    assert worker.sinks.dead_lettered == 0 and second.sinks.dead_lettered == 0
    assert consume_all(kafka_bootstrap, cfg.dlq_topic, timeout=3) == []
    return took


async def test_stopping_the_worker_while_postgres_is_frozen_ends_in_time_and_a_restart_delivers_the_rest(
    kafka_bootstrap, private_postgres
):
    worker, ids = pg_worker(kafka_bootstrap, private_postgres, sink_name())
    took = await stop_while_frozen(kafka_bootstrap, worker, private_postgres, lambda: len(set(ids())))
    print(f"stop with PostgreSQL frozen: {took:.1f}s (drain timeout {DRAIN_TIMEOUT:g}s)")
    assert took <= DRAIN_TIMEOUT + 2 * SHUTDOWN_STEP_SECONDS + 2
    assert sorted(set(ids())) == list(range(2 * HALF))


async def test_stopping_the_worker_while_redis_is_frozen_ends_in_time_and_a_restart_delivers_the_rest(
    kafka_bootstrap, private_redis
):
    worker, keys = redis_worker(kafka_bootstrap, private_redis, sink_name())
    took = await stop_while_frozen(kafka_bootstrap, worker, private_redis, lambda: len(keys()))
    print(f"stop with Redis frozen: {took:.1f}s (drain timeout {DRAIN_TIMEOUT:g}s)")
    assert took <= DRAIN_TIMEOUT + 2 * SHUTDOWN_STEP_SECONDS + 2
    assert sorted(json.loads(value)["id"] for value, _ttl in keys().values()) == list(range(2 * HALF))
