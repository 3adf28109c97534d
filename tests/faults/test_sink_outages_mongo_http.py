"""A sink server that goes away mid-run: the worker waits for it, says so, and resumes by itself.

Real faults on real servers: FerretDB (this session's private instance) killed and started again
on the same port and data after ~20 s, or SIGSTOPped for ~10 s; the HTTP server process killed
for ~20 s, or answering 503 / 429 with Retry-After for a while. Each time: nothing is lost,
nothing is dead-lettered, readiness and knarr_sink_waiting name the sink while it is away, and
every offset is committed once it is back.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter

import pytest
from prometheus_client import REGISTRY

from knarr.engine.worker import Worker
from tests.services.http_server import HttpSinkServer
from tests.services.kafka import committed_offsets, create_topic, end_offsets, produce_json, unique_name
from tests.services.mongo import PrivateMongo, documents
from tests.sinks.document_handlers import ToHttp, ToMongo
from tests.worker.harness import kafka_config, running, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

MESSAGES = 300
TASK_SECONDS = 0.05  # 4 executors: the run takes ~4 s without the outage


def source(bootstrap: str) -> tuple[str, dict[int, int]]:
    topic = unique_name("outage-in")
    create_topic(bootstrap, topic, 2)
    produce_json(bootstrap, topic, [{"id": i, "sleep": TASK_SECONDS} for i in range(MESSAGES)],
                 key_fn=lambda r: str(r["id"]))
    return topic, end_offsets(bootstrap, topic)


def waiting_gauge(sink: str, sink_type: str) -> float:
    return REGISTRY.get_sample_value("knarr_sink_waiting", {"sink": sink, "type": sink_type}) or 0.0


async def outage(worker: Worker, sink: str, sink_type: str, seconds: float) -> str:
    """Wait out ``seconds`` of an outage that just began; returns what readiness said meanwhile."""
    started = time.monotonic()
    reason = await wait_until(lambda: (not worker._readiness()[0]) and worker._readiness()[1], 30,
                              f"readiness to report the {sink_type} sink waiting")
    assert waiting_gauge(sink, sink_type) >= 1
    await asyncio.sleep(max(0.0, seconds - (time.monotonic() - started)))
    assert not worker._readiness()[0] and waiting_gauge(sink, sink_type) >= 1, "the wait ended while the server was away"
    return reason


async def until_done(worker: Worker, bootstrap: str, cfg, ends: dict[int, int], sink: str, sink_type: str) -> float:
    back = time.monotonic()
    await wait_until(lambda: committed_offsets(bootstrap, cfg.kafka.consumer_group, cfg.kafka.source_topic) == ends,
                     120, "every offset committed after the server came back")
    await wait_until(lambda: worker._readiness()[0], 30, "readiness to recover")
    assert waiting_gauge(sink, sink_type) == 0
    return time.monotonic() - back


def mongo_config(bootstrap: str, topic: str, sink: str, uri: str, database: str):
    return kafka_config(bootstrap, topic, sinks={"mongo": {sink: {"uri": uri, "database": database, "timeout_seconds": 2}}})


def assert_each_document_once(uri: str, database: str) -> None:
    ids = Counter(d["id"] for d in documents(uri, database, "results"))
    assert sorted(ids) == list(range(MESSAGES)), f"lost: {sorted(set(range(MESSAGES)) - set(ids))}"
    assert [i for i, n in ids.items() if n > 1] == [], "a retried write was stored twice"


@pytest.mark.parametrize("fault", ["killed for 20 s", "stopped (SIGSTOP) for 10 s"])
async def test_a_mongo_server_that_goes_away_mid_run_is_waited_for_and_nothing_is_lost_or_dead_lettered(
    kafka_bootstrap, private_mongo: PrivateMongo, fault
):
    sink, database = f"docs_{secrets.token_hex(3)}", f"outage_{secrets.token_hex(4)}"
    topic, ends = source(kafka_bootstrap)
    cfg = mongo_config(kafka_bootstrap, topic, sink, private_mongo.uri, database)
    worker = Worker(cfg, ToMongo())
    async with running(worker):
        await wait_until(lambda: len(documents(private_mongo.uri, database, "results")) >= 30, 60, "a first documents")
        if fault.startswith("killed"):
            private_mongo.kill()
            try:
                reason = await outage(worker, sink, "mongo", 20)
            finally:
                private_mongo.start()  # same port, same data
        else:
            private_mongo.pause()
            try:
                reason = await outage(worker, sink, "mongo", 10)
            finally:
                private_mongo.resume()
        took = await until_done(worker, kafka_bootstrap, cfg, ends, sink, "mongo")
        print(f"mongo {fault}: readiness said {reason!r}; caught up {took:.1f}s after it was back")

    assert f"mongo sink '{sink}' is unavailable" in reason
    assert_each_document_once(private_mongo.uri, database)
    assert worker.sinks.dead_lettered == 0 and worker.exit_code == 0


def http_config(bootstrap: str, topic: str, sink: str, url: str):
    # The delivery's wait for a sink honours Retry-After up to executor.retry_backoff_max_seconds.
    return kafka_config(bootstrap, topic, sinks={"http": {sink: {"url": url, "timeout_seconds": 2, "max_retries": 2}}},
                        executor={"retry_backoff_max_seconds": 5})


def assert_each_request_arrived(server: HttpSinkServer) -> Counter:
    ids = Counter(b["id"] for b in server.accepted())
    assert sorted(ids) == list(range(MESSAGES)), f"lost: {sorted(set(range(MESSAGES)) - set(ids))}"
    return ids


async def test_an_http_server_that_is_down_for_20_s_is_waited_for_and_nothing_is_lost_or_dead_lettered(
    kafka_bootstrap, http_server: HttpSinkServer
):
    sink = f"hook_{secrets.token_hex(3)}"
    topic, ends = source(kafka_bootstrap)
    cfg = http_config(kafka_bootstrap, topic, sink, http_server.url())
    worker = Worker(cfg, ToHttp())
    async with running(worker):
        await wait_until(lambda: len(http_server.accepted()) >= 30, 60, "a first requests")
        http_server.stop()
        try:
            reason = await outage(worker, sink, "http", 20)
        finally:
            http_server.start()  # same port
        took = await until_done(worker, kafka_bootstrap, cfg, ends, sink, "http")
        print(f"http down 20 s: readiness said {reason!r}; caught up {took:.1f}s after it was back")

    assert f"http sink '{sink}' is unavailable" in reason and "ConnectError" in reason
    ids = assert_each_request_arrived(http_server)
    # At least once: a request the server took just before it died may be sent again.
    print(f"requests taken twice: {sum(n - 1 for n in ids.values())}")
    assert worker.sinks.dead_lettered == 0 and worker.exit_code == 0


@pytest.mark.parametrize(("status", "retry_after"), [(503, 2), (429, 1)])
async def test_an_http_server_answering_status_with_retry_after_for_a_while_is_waited_for(
    kafka_bootstrap, http_server: HttpSinkServer, status, retry_after
):
    sink = f"hook_{secrets.token_hex(3)}"
    topic, ends = source(kafka_bootstrap)
    cfg = http_config(kafka_bootstrap, topic, sink, http_server.url())
    worker = Worker(cfg, ToHttp())
    async with running(worker):
        await wait_until(lambda: len(http_server.accepted()) >= 30, 60, "a first requests")
        http_server.fail(status, -1, retry_after=retry_after)
        try:
            reason = await outage(worker, sink, "http", 8)
        finally:
            http_server.reset()
        took = await until_done(worker, kafka_bootstrap, cfg, ends, sink, "http")
        print(f"http {status} for 8 s: readiness said {reason!r}; caught up {took:.1f}s after")

    assert f"http sink '{sink}' is unavailable" in reason and f"HTTP {status}" in reason
    refused = [r for r in http_server.requests() if r["status"] == status]
    # Retry-After was honoured: no two refused retries of one payload closer than it says.
    by_body: dict[str, list[float]] = {}
    for r in refused:
        by_body.setdefault(r["body"], []).append(r["received"])
    gaps = [b - a for times in by_body.values() for a, b in zip(times, times[1:])]
    assert gaps and min(gaps) >= retry_after * 0.9
    ids = assert_each_request_arrived(http_server)
    assert sum(ids.values()) == MESSAGES  # a refused request was not taken: nothing twice
    assert worker.sinks.dead_lettered == 0 and worker.exit_code == 0
