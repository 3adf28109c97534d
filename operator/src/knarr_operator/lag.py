"""Consumer lag, read from Kafka: the group's committed offsets against the topic's end offsets.

One long-lived reader per Pipeline (see knarr.kafka.clients for why clients are never made
per call): a consumer that never subscribes, so it reads the group's committed offsets
without joining the group. kopf's handler threads share the readers; each reader serves one
call at a time, and the operator closes them when a Pipeline goes and when it shuts down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from knarr.kafka import settings
from knarr.kafka.clients import close_consumer, open_consumer
from knarr.observability.kafka_logs import ClientLog


class KafkaUnreachable(Exception):
    """Lag could not be read; the message says what failed and where."""


@dataclass(frozen=True)
class Lag:
    total: int
    partitions: int


def lag_from_offsets(committed: Mapping[int, int], extents: Mapping[int, tuple[int, int]]) -> Lag:
    """Messages the group has yet to commit: a partition without a commit counts from its earliest offset."""
    total = 0
    for partition, (low, high) in extents.items():
        position = committed.get(partition, -1)
        total += max(0, high - (position if position >= 0 else low))
    return Lag(total=total, partitions=len(extents))


class _Reader:
    def __init__(self, conf: settings.Settings) -> None:
        self.conf = conf
        self.log = ClientLog("lag-reader")
        self.consumer: Consumer | None = open_consumer(conf, self.log)
        self.lock = threading.Lock()

    def lag(self, topic: str, timeout: float) -> Lag:
        brokers, group = self.conf["bootstrap.servers"], self.conf["group.id"]
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(0.05, deadline - time.monotonic())

        with self.lock:
            consumer = self.consumer
            if consumer is None:
                raise KafkaUnreachable("the lag reader was closed (the operator is shutting down)")
            try:
                info = consumer.list_topics(topic, timeout=left()).topics.get(topic)
                if info is None or info.error is not None or not info.partitions:
                    raise KafkaUnreachable(f"source topic {topic!r} does not exist on {brokers}; create it or fix kafka.sourceTopic")
                partitions = [TopicPartition(topic, p) for p in sorted(info.partitions)]
                committed = {tp.partition: tp.offset for tp in consumer.committed(partitions, timeout=left())}
                extents = {tp.partition: consumer.get_watermark_offsets(tp, timeout=left()) for tp in partitions}
            except KafkaException as exc:
                detail = exc.args[0] if exc.args else exc
                raise KafkaUnreachable(
                    f"cannot read the lag of group {group!r} on {topic!r} from {brokers}: {detail} "
                    f"(last client error: {self.log.last_error or 'none'})"
                ) from None
            finally:
                consumer.poll(0)  # serve queued log lines and error callbacks
        return lag_from_offsets(committed, extents)

    def close(self) -> None:
        with self.lock:
            consumer, self.consumer = self.consumer, None
        close_consumer(consumer)


class LagReaders:
    """The readers of every Pipeline this operator watches, by Pipeline uid."""

    def __init__(self) -> None:
        self._readers: dict[str, _Reader] = {}
        self._guard = threading.Lock()

    def lag(self, owner: str, brokers: str, group: str, topic: str,
            extra: Mapping[str, object] | None = None, timeout: float = 5.0) -> Lag:
        conf = settings.offsets_reader(brokers, group, extra)
        with self._guard:
            reader = self._readers.get(owner)
            stale = reader if reader is not None and reader.conf != conf else None
            if reader is None or stale is not None:
                reader = self._readers[owner] = _Reader(conf)
        if stale is not None:
            stale.close()  # the Pipeline now names another cluster or group
        return reader.lag(topic, timeout)

    def forget(self, owner: str) -> None:
        with self._guard:
            reader = self._readers.pop(owner, None)
        if reader is not None:
            reader.close()

    def close(self) -> None:
        with self._guard:
            readers, self._readers = list(self._readers.values()), {}
        for reader in readers:
            reader.close()
