"""One settings model for every Kafka client: the cluster's connection settings reach all of them."""

from __future__ import annotations

import pytest

from knarr.config.librdkafka import check_consumer_settings
from knarr.config.models import KafkaConfig
from knarr.kafka import settings
from knarr_operator.lag import lag_from_offsets

SASL = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanisms": "SCRAM-SHA-512",
    "sasl.username": "knarr",
    "sasl.password": "s3cret",
    "ssl.ca.location": "/etc/kafka/ca.pem",
}
KAFKA = KafkaConfig(brokers="kafka-0:9093", extra={**SASL, "fetch.min.bytes": 1024})


def test_the_sasl_and_tls_settings_of_kafka_extra_reach_sink_and_dlq_producers():
    producer = settings.producer(KAFKA)
    assert producer["bootstrap.servers"] == "kafka-0:9093"
    assert {k: producer[k] for k in SASL} == SASL


def test_consumer_tuning_in_kafka_extra_stays_with_the_consumer():
    assert "fetch.min.bytes" not in settings.producer(KAFKA)
    assert settings.source_consumer(KAFKA, "w1")["fetch.min.bytes"] == 1024


def test_a_sinks_own_brokers_and_extra_are_applied_after_the_connection_settings():
    producer = settings.producer(KAFKA, brokers="other:9092", extra={"linger.ms": 20, "sasl.username": "sink-user"})
    assert producer["bootstrap.servers"] == "other:9092"
    assert producer["linger.ms"] == 20
    assert producer["sasl.username"] == "sink-user"
    assert producer["sasl.password"] == "s3cret"


def test_the_lag_reader_gets_the_connection_settings_and_the_workers_group():
    reader = settings.offsets_reader(KAFKA.brokers, "knarr-workers", KAFKA.extra)
    assert {k: reader[k] for k in SASL} == SASL
    assert reader["group.id"] == "knarr-workers"
    assert reader["enable.auto.commit"] is False
    assert "fetch.min.bytes" not in reader


def test_a_backfill_reader_never_commits_whatever_kafka_extra_says():
    # The config refuses these keys; built past validation, the reader still overrides them.
    kafka = KafkaConfig.model_construct(brokers="k:9092", consumer_group="knarr-workers",
                                        extra={**SASL, "enable.auto.commit": True, "group.id": "workers"})
    reader = settings.range_reader(kafka)
    assert reader["enable.auto.commit"] is False
    assert reader["group.id"] == "knarr-workers-backfill"
    assert reader["sasl.password"] == "s3cret"


def test_the_source_consumer_stores_and_commits_offsets_only_by_the_watermark():
    consumer = settings.source_consumer(KafkaConfig(), "w1")
    assert consumer["enable.auto.commit"] is False
    assert consumer["enable.auto.offset.store"] is False
    assert consumer["client.id"] == "w1"


def test_the_source_consumer_fetches_ahead_only_what_the_worker_can_use():
    consumer = settings.source_consumer(KafkaConfig(), "w1")
    assert consumer["queued.min.messages"] == 2_000  # librdkafka's own: 100,000 a partition
    assert consumer["queued.max.messages.kbytes"] == 16 * 1024  # 64 MiB
    assert consumer["fetch.message.max.bytes"] == 64 * 1024  # 1 MiB of each partition a fetch
    assert consumer["fetch.max.bytes"] == 2 * 1024 * 1024  # 50 MiB a fetch
    assert consumer["fetch.queue.backoff.ms"] == 20  # 1 s


def test_a_poll_batch_bigger_than_the_read_ahead_raises_it():
    assert settings.source_consumer(KafkaConfig(max_poll_records=5_000), "w1")["queued.min.messages"] == 5_000


def test_kafka_extra_overrides_the_read_ahead():
    extra = {"queued.min.messages": 50_000, "queued.max.messages.kbytes": 65_536, "fetch.message.max.bytes": 1_048_576,
             "fetch.max.bytes": 52_428_800, "fetch.queue.backoff.ms": 500}
    consumer = settings.source_consumer(KafkaConfig(extra=extra), "w1")
    assert {key: consumer[key] for key in extra} == extra


def test_a_bigger_message_max_bytes_raises_the_fetch_size_with_it():
    consumer = settings.source_consumer(KafkaConfig(extra={"message.max.bytes": 5_000_000}), "w1")
    assert consumer["fetch.max.bytes"] == 5_000_000  # librdkafka wants fetch.max.bytes >= message.max.bytes


@pytest.mark.parametrize("extra", [{}, {"message.max.bytes": 5_000_000}, {"queued.max.messages.kbytes": 1024}])
def test_librdkafka_accepts_the_read_ahead_settings(extra):
    check_consumer_settings(settings.source_consumer(KafkaConfig(extra=extra), "w1"), 100)


def test_lag_counts_a_partition_without_a_commit_from_its_earliest_offset():
    lag = lag_from_offsets({0: 40, 1: -1001}, {0: (0, 100), 1: (25, 75), 2: (0, 0)})
    assert (lag.total, lag.partitions) == (60 + 50, 3)


def test_lag_is_never_negative_when_a_commit_is_past_the_end():
    assert lag_from_offsets({0: 120}, {0: (0, 100)}).total == 0
