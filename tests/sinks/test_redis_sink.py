"""The Redis sink end to end: a real worker in-process, the real broker, the real server."""

from __future__ import annotations

import json

import pytest

from knarr.engine.worker import Worker
from tests.services.kafka import committed_offsets, create_topic, end_offsets, produce_json, unique_name
from tests.services.redis import fresh_prefix, read_keys
from tests.sinks.handlers import ToRedis
from tests.worker.harness import kafka_config, running, wait_until

pytestmark = pytest.mark.kafka


async def test_every_message_becomes_exactly_one_key_with_its_ttl_and_every_offset_is_committed(kafka_bootstrap, redis_url):
    topic = unique_name("redis-in")
    create_topic(kafka_bootstrap, topic, 3)
    produce_json(kafka_bootstrap, topic, [{"id": i} for i in range(200)], key_fn=lambda r: str(r["id"]))
    prefix = fresh_prefix()
    cfg = kafka_config(kafka_bootstrap, topic, sinks={"redis": {"cache": {"url": redis_url, "key_prefix": prefix}}})
    worker = Worker(cfg, ToRedis(ttl=600))
    async with running(worker):
        await wait_until(lambda: committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, topic) == end_offsets(kafka_bootstrap, topic),
                         60, "every offset committed")

    keys = read_keys(redis_url, prefix)
    assert sorted(keys) == sorted(f"{prefix}item:{i}" for i in range(200))
    for i in range(200):
        value, ttl = keys[f"{prefix}item:{i}"]
        assert json.loads(value) == {"id": i, "body": f"row-{i}"}
        assert (0 < ttl <= 600) if i % 2 == 0 else ttl == -1, (i, ttl)
    assert worker.sinks.dead_lettered == 0 and worker.exit_code == 0
