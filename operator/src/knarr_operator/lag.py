"""Consumer lag, read from Kafka: the group's committed offsets against the topic's end offsets."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

_log = logging.getLogger("knarr_operator.kafka")

# Connection settings an admin client shares with the worker's consumer; the rest
# of kafka.extra (fetch sizes, …) would be rejected by an admin client.
_SHARED_PREFIXES = ("security.", "sasl.", "ssl.", "client.")


class KafkaUnreachable(Exception):
    """Lag could not be read; the message says what failed and where."""


@dataclass(frozen=True)
class Lag:
    total: int
    partitions: int


def consumer_lag(brokers: str, group: str, topic: str, extra: Mapping[str, object] | None = None, timeout: float = 5.0) -> Lag:
    conf = {"bootstrap.servers": brokers, "socket.timeout.ms": int(timeout * 1000)}
    conf.update({k: str(v) for k, v in (extra or {}).items() if k.startswith(_SHARED_PREFIXES)})
    # librdkafka would print every failed connection attempt; route it to logging instead.
    admin = AdminClient(conf, logger=_log)
    try:
        metadata = admin.list_topics(topic, timeout=timeout)
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            raise KafkaUnreachable(f"source topic {topic!r} does not exist on {brokers}; create it or fix kafka.sourceTopic")
        partitions = [TopicPartition(topic, p) for p in sorted(info.partitions)]
        committed = _committed(admin, group, partitions, timeout)
        ends = _offsets(admin, partitions, OffsetSpec.latest(), timeout)
        starts = _offsets(admin, partitions, OffsetSpec.earliest(), timeout)
    except KafkaException as exc:
        raise KafkaUnreachable(f"cannot read the lag of group {group!r} on {topic!r} from {brokers}: {exc.args[0]}") from None
    total = 0
    for tp in committed.topic_partitions:
        # No commit yet: the group would start from the beginning of the partition.
        position = tp.offset if tp.offset >= 0 else starts[tp.partition]
        total += max(0, ends[tp.partition] - position)
    return Lag(total=total, partitions=len(partitions))


def _committed(admin: AdminClient, group: str, partitions: list[TopicPartition], timeout: float):
    """The group's committed offsets; retriable broker states (a coordinator still loading) are waited out."""
    deadline = time.monotonic() + timeout
    delay = 0.1
    while True:
        request = [ConsumerGroupTopicPartitions(group, partitions)]
        try:
            return admin.list_consumer_group_offsets(request, request_timeout=timeout)[group].result(timeout)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            retriable = getattr(err, "retriable", lambda: False)()
            if not retriable or time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def _offsets(admin: AdminClient, partitions: list[TopicPartition], spec: OffsetSpec, timeout: float) -> dict[int, int]:
    futures = admin.list_offsets({tp: spec for tp in partitions}, request_timeout=timeout)
    return {tp.partition: future.result(timeout).offset for tp, future in futures.items()}
