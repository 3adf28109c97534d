"""Kubernetes probes and metrics on the worker's port."""

from __future__ import annotations

import httpx
import pytest

import knarr
from knarr.engine.worker import Worker
from tests.services.kafka import committed_offsets, produce_json
from tests.worker.harness import kafka_config, running, topics, wait_until

pytestmark = pytest.mark.kafka


class One(knarr.BaseHandler):
    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=["out=x"], source_offsets=[m.offset]) for m in messages]


async def test_healthz_readyz_and_metrics_answer_while_the_worker_consumes(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"n": i} for i in range(10)])
    cfg = kafka_config(kafka_bootstrap, src, out_topic=out, metrics={"enabled": True, "port": 0})
    worker = Worker(cfg, One())
    async with running(worker):
        await wait_until(lambda: committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, src) == {0: 10})
        base = f"http://127.0.0.1:{worker.health.port}"
        async with httpx.AsyncClient() as client:
            health = await client.get(f"{base}/healthz")
            ready = await client.get(f"{base}/readyz")
            scraped = (await client.get(f"{base}/metrics")).text
            missing = await client.get(f"{base}/nope")
    assert health.status_code == 200 and health.json()["alive"] is True
    assert ready.status_code == 200 and ready.json()["ready"] is True
    assert 'knarr_messages_consumed_total{partition="0"}' in scraped
    assert "knarr_tasks_total" in scraped and "knarr_committed_offset" in scraped
    assert missing.status_code == 404 and "/healthz" in missing.json()["error"]



class Slow(knarr.BaseHandler):
    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=["sleep=1.5"], source_offsets=[m.offset]) for m in messages]


def _sample(scraped: str, name: str) -> float:
    return float(next(line.split()[-1] for line in scraped.splitlines() if line.startswith(name + " ")))


async def test_the_in_flight_and_pool_gauges_read_the_engine_at_scrape_time(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"n": i} for i in range(3)])
    cfg = kafka_config(kafka_bootstrap, src, out_topic=out, executor={"max_executors": 2},
                       metrics={"enabled": True, "port": 0})
    worker = Worker(cfg, Slow())
    async with running(worker), httpx.AsyncClient() as client:
        url = f"http://127.0.0.1:{worker.health.port}/metrics"
        await wait_until(lambda: worker.scheduler.in_use == 2)
        busy = (await client.get(url)).text
        await wait_until(lambda: committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, src) == {0: 3})
        idle = (await client.get(url)).text
    # Three tasks arranged, two slots: all three in flight, two of them holding a slot.
    assert _sample(busy, "knarr_tasks_in_flight") == 3 and _sample(busy, "knarr_pool_active") == 2
    assert _sample(idle, "knarr_tasks_in_flight") == 0 and _sample(idle, "knarr_pool_active") == 0
