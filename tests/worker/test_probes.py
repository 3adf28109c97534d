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

