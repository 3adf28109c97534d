"""The local Kafka broker (hack/kafka/kafka.sh) and the tests.services.kafka helpers."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer
from knarr.kafka import settings
from knarr.kafka.clients import shared_admin

from tests.services.kafka import (
    REPO_ROOT,
    committed_offsets,
    consume_all,
    create_topic,
    end_offsets,
    ensure_kafka,
    produce_json,
    unique_name,
)

pytestmark = pytest.mark.kafka

STATE_DIR = REPO_ROOT / ".cache" / "kafka"


def test_broker_answers_metadata(kafka_bootstrap: str) -> None:
    host, _, port = kafka_bootstrap.rpartition(":")
    assert host == "127.0.0.1" and port.isdigit()
    assert (STATE_DIR / "bootstrap").read_text().strip() == kafka_bootstrap

    md = shared_admin(settings.connection(kafka_bootstrap)).list_topics(timeout=10)
    assert [b.id for b in md.brokers.values()] == [1]
    assert md.controller_id == 1


def test_up_twice_reuses_the_running_broker(kafka_bootstrap: str) -> None:
    pid_before = (STATE_DIR / "broker.pid").read_text().strip()

    assert ensure_kafka() == kafka_bootstrap
    assert ensure_kafka() == kafka_bootstrap

    assert (STATE_DIR / "broker.pid").read_text().strip() == pid_before


def test_three_partition_topic_round_trip(kafka_bootstrap: str) -> None:
    topic = unique_name("svc-roundtrip")
    create_topic(kafka_bootstrap, topic, partitions=3)

    md = shared_admin(settings.connection(kafka_bootstrap)).list_topics(topic=topic, timeout=10)
    parts = md.topics[topic].partitions
    assert sorted(parts) == [0, 1, 2]
    assert all(p.leader == 1 for p in parts.values())
    assert create_topic(kafka_bootstrap, topic, partitions=3) is None  # idempotent
    with pytest.raises(ValueError, match="already exists with 3 partitions"):
        create_topic(kafka_bootstrap, topic, partitions=2)

    records = [{"id": i, "user": f"u{i % 5}"} for i in range(30)]
    placed = produce_json(kafka_bootstrap, topic, records, key_fn=lambda r: r["user"])
    for p in range(3):  # one pinned record per partition, so none is empty
        placed += produce_json(kafka_bootstrap, topic, [{"id": 30 + p, "user": "pinned"}], partition=p)

    # The same key always lands on the same partition, and offsets are dense.
    by_user: dict[str, set[int]] = {}
    for record, (partition, _) in zip(records, placed, strict=False):
        by_user.setdefault(record["user"], set()).add(partition)
    assert all(len(ps) == 1 for ps in by_user.values())
    assert [partition for partition, _ in placed[-3:]] == [0, 1, 2]
    expected_ends = {p: sum(1 for q, _ in placed if q == p) for p in range(3)}
    assert end_offsets(kafka_bootstrap, topic) == expected_ends

    got = consume_all(kafka_bootstrap, topic, expected=33, timeout=30)
    assert sorted(m.json()["id"] for m in got) == list(range(33))
    assert {(m.partition, m.offset) for m in got} == set(placed)
    for m in got:
        record = m.json()
        assert m.key == record["user"].encode() or record["user"] == "pinned"
        assert m.value == json.dumps(record, separators=(",", ":")).encode()
    # Without `expected`, it reads up to the current end and returns.
    assert len(consume_all(kafka_bootstrap, topic)) == 33

    # A real consumer group commits what it consumed.
    group = unique_name("svc-group")
    assert committed_offsets(kafka_bootstrap, group, topic) == {}
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        # consume() waits for the full batch or the timeout, so poll in short
        # slices against an overall deadline.
        seen, deadline = 0, time.monotonic() + 30
        while seen < 33 and time.monotonic() < deadline:
            batch = consumer.consume(num_messages=100, timeout=0.2)
            assert all(m.error() is None for m in batch)
            seen += len(batch)
        assert seen == 33, f"group consumer saw {seen}/33 messages in 30s"
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert committed_offsets(kafka_bootstrap, group, topic) == expected_ends
