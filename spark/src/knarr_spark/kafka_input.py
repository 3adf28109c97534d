"""Reading the backfill's slice of the source topic with confluent-kafka (driver and tasks).

The driver asks the broker for the log's extent and resolves timestamps
(``offsets_for_times``); each Spark task then reads exactly its chunk: assign the partition
at the chunk's start, consume to its end. No consumer group takes part, so nothing is
committed and the streaming workers' group is left alone. Why not Spark's own Kafka source:
see spark/README.md ("Reading Kafka").
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from knarr.api.messages import SourceMessage
from knarr.config.models import KafkaConfig
from knarr.errors import UnavailableError
from knarr.kafka import settings
from knarr.kafka.clients import close_consumer, open_consumer
from knarr.observability.kafka_logs import ClientLog
from knarr_spark.planning import Chunk

METADATA_TIMEOUT_SECONDS = 15.0
# A chunk's read fails (and Spark retries the task) if no message arrives for this long.
STALL_TIMEOUT_SECONDS = 60.0


class KafkaReadError(UnavailableError, ConnectionError):
    pass


def _consumer(kafka: KafkaConfig) -> Consumer:
    log = ClientLog("backfill-reader")
    consumer = open_consumer(settings.range_reader(kafka), log)
    try:
        consumer.list_topics(timeout=METADATA_TIMEOUT_SECONDS)
    except KafkaException as exc:
        close_consumer(consumer)
        raise KafkaReadError(f"cannot reach Kafka at {kafka.brokers!r}: {log.last_error or exc}; "
                             "check kafka.brokers in the config") from None
    return consumer


def watermarks(kafka: KafkaConfig) -> dict[int, tuple[int, int]]:
    """``{partition: (low, high)}`` of the source topic: the offsets that exist right now."""
    consumer = _consumer(kafka)
    try:
        topic = kafka.source_topic
        meta = consumer.list_topics(topic, timeout=METADATA_TIMEOUT_SECONDS).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise KafkaReadError(f"topic {topic!r} does not exist on {kafka.brokers!r} "
                                 f"({meta.error if meta else 'no metadata'}); check kafka.source_topic")
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=METADATA_TIMEOUT_SECONDS)
                for p in sorted(meta.partitions)}
    finally:
        close_consumer(consumer)


def offsets_for_time(kafka: KafkaConfig, partitions: list[int], millis: int) -> dict[int, int]:
    """Per partition, the first offset whose timestamp is >= ``millis`` (-1: none yet)."""
    consumer = _consumer(kafka)
    try:
        asked = [TopicPartition(kafka.source_topic, p, millis) for p in partitions]
        answered = consumer.offsets_for_times(asked, timeout=METADATA_TIMEOUT_SECONDS)
        out = {}
        for tp in answered:
            if tp.error is not None:
                raise KafkaReadError(f"offsets_for_times on partition {tp.partition} failed: {tp.error}")
            out[tp.partition] = tp.offset
        return out
    finally:
        close_consumer(consumer)


def read_chunk(kafka: KafkaConfig, chunk: Chunk) -> list[SourceMessage]:
    """Every message of ``chunk``, in offset order. Offsets missing from the log (compaction,
    transaction markers) are simply absent; the read ends at the chunk's end or the log's."""
    if chunk.size == 0:
        return []
    topic = kafka.source_topic
    consumer = _consumer(kafka)
    out: list[SourceMessage] = []
    try:
        consumer.assign([TopicPartition(topic, chunk.partition, chunk.start)])
        last_progress = time.monotonic()
        while True:
            # consume() returns when the batch is full or the timeout passes: ask for no more
            # than the chunk still holds, so its last batch does not wait out the timeout.
            next_offset = out[-1].offset + 1 if out else chunk.start
            batch = consumer.consume(num_messages=max(1, min(1000, chunk.end - next_offset)), timeout=0.5)
            for m in batch:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if m.offset() >= chunk.end or _position(consumer, topic, chunk.partition) >= chunk.end:
                            return out
                        continue
                    raise KafkaReadError(f"reading {chunk.label} of {topic!r}: {err}")
                if m.offset() >= chunk.end:
                    return out
                out.append(_message(m))
                if m.offset() == chunk.end - 1:
                    return out
            if batch:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > STALL_TIMEOUT_SECONDS:
                raise KafkaReadError(f"reading {chunk.label} of {topic!r}: no progress for {STALL_TIMEOUT_SECONDS:.0f}s "
                                     f"(read {len(out)} of up to {chunk.size} messages)")
    finally:
        close_consumer(consumer)


def _position(consumer: Consumer, topic: str, partition: int) -> int:
    return consumer.position([TopicPartition(topic, partition)])[0].offset


def _message(m: Any) -> SourceMessage:
    ts_type, ts = m.timestamp()
    return SourceMessage(topic=m.topic(), partition=m.partition(), offset=m.offset(), value=m.value() or b"",
                         key=m.key(), timestamp=ts if ts_type != 0 else None)


def resolve_times(kafka: KafkaConfig, marks: Mapping[int, tuple[int, int]], start_ms: int,
                  end_ms: int | None) -> tuple[dict[int, int], dict[int, int | None]]:
    """The broker's answer for both ends of a time range (None for an open end)."""
    partitions = sorted(marks)
    start = offsets_for_time(kafka, partitions, start_ms)
    end: dict[int, int | None] = dict.fromkeys(partitions) if end_ms is None else dict(offsets_for_time(kafka, partitions, end_ms))
    return start, end
