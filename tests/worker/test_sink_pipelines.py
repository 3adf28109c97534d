"""Kafka in, a real MongoDB-wire server (FerretDB) or HTTP server out: what arrives, what is
dead-lettered, and that every offset is committed. Each test runs a real worker in-process."""

from __future__ import annotations

import pytest
from pymongo import MongoClient

from knarr.engine.worker import Worker
from tests.services.kafka import committed_offsets, consume_all, create_topic, end_offsets, produce_json, unique_name
from tests.services.mongo import documents
from tests.sinks.document_handlers import ToHttp, ToMongo
from tests.worker.harness import kafka_config, running, wait_until

pytestmark = pytest.mark.kafka


def source(bootstrap: str, records: list[dict], partitions: int = 2) -> tuple[str, dict[int, int]]:
    topic = unique_name("sink-in")
    create_topic(bootstrap, topic, partitions)
    produce_json(bootstrap, topic, records, key_fn=lambda r: str(r["id"]))
    return topic, end_offsets(bootstrap, topic)


def all_committed(bootstrap: str, cfg, ends: dict[int, int]):
    return lambda: committed_offsets(bootstrap, cfg.kafka.consumer_group, cfg.kafka.source_topic) == ends


def mongo_sink(uri: str, database: str, **extra) -> dict:
    return {"mongo": {"docs": {"uri": uri, "database": database, "timeout_seconds": 5, **extra}}}


def http_sink(url: str, **extra) -> dict:
    return {"http": {"hook": {"url": url, "timeout_seconds": 5, **extra}}}


async def test_every_message_becomes_exactly_one_document_and_every_offset_is_committed(
    kafka_bootstrap, mongo_uri, mongo_database
):
    topic, ends = source(kafka_bootstrap, [{"id": i} for i in range(60)])
    cfg = kafka_config(kafka_bootstrap, topic, sinks=mongo_sink(mongo_uri, mongo_database))
    worker = Worker(cfg, ToMongo())
    async with running(worker):
        await wait_until(all_committed(kafka_bootstrap, cfg, ends), 60, "every offset committed")

    docs = documents(mongo_uri, mongo_database, "results")
    assert sorted((d["id"], d["out"]) for d in docs) == [(i, f"task-{i}") for i in range(60)]
    assert worker.sinks.dead_lettered == 0 and worker.exit_code == 0


async def test_upserted_outputs_replace_their_document_instead_of_duplicating_it(
    kafka_bootstrap, mongo_uri, mongo_database
):
    words = ["a", "b", "a", "c", "a", "b"]
    # Outputs of one key can be delivered side by side (tasks complete concurrently): the unique
    # index on the upsert key is what keeps two racing upserts from inserting twice.
    with MongoClient(mongo_uri) as client:
        client[mongo_database].results.create_index("word", unique=True)
    topic, ends = source(kafka_bootstrap, [{"id": i, "word": w} for i, w in enumerate(words)])
    cfg = kafka_config(kafka_bootstrap, topic, sinks=mongo_sink(mongo_uri, mongo_database))
    async with running(Worker(cfg, ToMongo())):
        await wait_until(all_committed(kafka_bootstrap, cfg, ends), 60, "every offset committed")

    docs = documents(mongo_uri, mongo_database, "results")
    assert sorted(d["word"] for d in docs) == ["a", "b", "c"]
    assert all(words[d["id"]] == d["word"] and d["out"] == f"task-{d['id']}" for d in docs)


async def test_documents_the_server_refuses_and_bad_collection_names_are_dead_lettered_and_the_rest_written(
    kafka_bootstrap, mongo_uri, mongo_database
):
    records = [{"id": 0}, {"id": 1, "collection": "bad$name"}, {"id": 2},
               {"id": 3, "document": {"$inc": {"n": 1}}}, {"id": 4}]
    topic, ends = source(kafka_bootstrap, records, partitions=1)
    cfg = kafka_config(kafka_bootstrap, topic, sinks=mongo_sink(mongo_uri, mongo_database))
    worker = Worker(cfg, ToMongo())
    async with running(worker):
        await wait_until(all_committed(kafka_bootstrap, cfg, ends), 60, "every offset committed")
        dead = [m.json() for m in consume_all(kafka_bootstrap, cfg.dlq_topic, expected=2, timeout=15)]

    assert sorted(d["id"] for d in documents(mongo_uri, mongo_database, "results")) == [0, 2, 4]
    by_offset = {r["offsets"][0]: r for r in dead}
    assert sorted(by_offset) == [1, 3]
    assert by_offset[1]["original_payloads"] == ['{"id":1,"out":"task-1"}']
    assert "collection 'bad$name': a collection name must not contain '$'" in by_offset[1]["error"]
    assert by_offset[3]["original_payloads"] == ['{"$inc":{"n":1}}']
    assert "collection 'results': invalid key: \"$inc\"" in by_offset[3]["error"]
    assert all(r["sink_type"] == "mongo" and r["sink_name"] == "docs" for r in dead)
    assert worker.sinks.dead_lettered == 2


async def test_every_message_becomes_exactly_one_request_and_every_offset_is_committed(kafka_bootstrap, http_server):
    topic, ends = source(kafka_bootstrap, [{"id": i} for i in range(60)])
    cfg = kafka_config(kafka_bootstrap, topic, sinks=http_sink(http_server.url(), headers={"X-Run": "e2e"}))
    worker = Worker(cfg, ToHttp())
    async with running(worker):
        await wait_until(all_committed(kafka_bootstrap, cfg, ends), 60, "every offset committed")

    requests = http_server.requests()
    assert sorted((b["id"], b["out"]) for b in http_server.accepted()) == [(i, f"task-{i}") for i in range(60)]
    assert len(requests) == 60 and {r["headers"]["X-Run"] for r in requests} == {"e2e"}
    assert worker.sinks.dead_lettered == 0 and worker.exit_code == 0


async def test_payloads_the_http_server_refuses_are_dead_lettered_with_the_status_and_reason(
    kafka_bootstrap, http_server
):
    http_server.fail(400, -1, match='"bad":true', body='{"error": "bad is not allowed"}')
    topic, ends = source(kafka_bootstrap, [{"id": i, "bad": i in (2, 5)} for i in range(8)], partitions=1)
    cfg = kafka_config(kafka_bootstrap, topic, sinks=http_sink(http_server.url()))
    worker = Worker(cfg, ToHttp())
    async with running(worker):
        await wait_until(all_committed(kafka_bootstrap, cfg, ends), 60, "every offset committed")
        dead = [m.json() for m in consume_all(kafka_bootstrap, cfg.dlq_topic, expected=2, timeout=15)]

    assert sorted(b["id"] for b in http_server.accepted()) == [0, 1, 3, 4, 6, 7]
    assert sorted(r["offsets"][0] for r in dead) == [2, 5]
    for record in dead:
        assert record["sink_type"] == "http" and record["sink_name"] == "hook"
        assert "HTTP 400 Bad Request: {\"error\": \"bad is not allowed\"}" in record["error"]
        assert record["original_payloads"] == [f'{{"id":{record["offsets"][0]},"out":"task-{record["offsets"][0]}","bad":true}}']
    assert worker.sinks.dead_lettered == 2
