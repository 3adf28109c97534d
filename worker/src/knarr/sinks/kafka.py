"""Kafka sink: each payload becomes one record; delivery is confirmed by the broker before we return."""

from __future__ import annotations

import asyncio
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from knarr.api.payloads import KafkaPayload
from knarr.config.models import KafkaConfig, KafkaSinkConfig
from knarr.config.root import KnarrConfig
from knarr.kafka import settings
from knarr.sinks.base import PermanentSinkError, SinkConnectError, TransientSinkError
from knarr.sinks.producer import AsyncProducer

# Errors that say the brokers are away, not that they refuse the records.
_TRANSIENT = frozenset({
    KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, KafkaError.REQUEST_TIMED_OUT,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
})


class KafkaSink:
    sink_type = "kafka"

    def __init__(self, name: str, config: KafkaSinkConfig, kafka: KafkaConfig) -> None:
        self.name = name
        self.config = config
        self.brokers = config.brokers or kafka.brokers
        self.startup_timeout = kafka.startup_timeout_seconds
        self._producer = AsyncProducer(settings.producer(kafka, config.brokers, config.extra))

    @classmethod
    def from_config(cls, name: str, config: KafkaSinkConfig, root: KnarrConfig) -> KafkaSink:
        return cls(name, config, root.kafka)

    async def connect(self) -> None:
        try:
            await asyncio.to_thread(self._producer.connect, self.startup_timeout)
        except ConnectionError as exc:
            raise SinkConnectError(f"kafka sink {self.name!r} (topic {self.config.topic!r}): {exc}") from None

    async def deliver(self, payloads: list[Any]) -> None:
        try:
            await self.begin(payloads)
        except KafkaException as exc:
            raise self.failure(exc) from None

    def begin(self, payloads: list[Any]) -> asyncio.Future:
        """Hand the payloads to the producer; the future settles when the broker has them all (or fails
        with the first KafkaException, which ``failure`` turns into the sink's error). Raises
        KafkaException for what the producer refuses at once."""
        records = [(p.data_json().encode(), p.key, p.headers or None) for p in payloads if isinstance(p, KafkaPayload)]
        return self._producer.produce_all(self.config.topic, records)

    def hurry(self) -> None:
        """The worker waits for this sink's confirmations: hear of them sooner (AsyncProducer.hurry)."""
        self._producer.hurry()

    def failure(self, exc: BaseException) -> BaseException:
        """A delivery's KafkaException as the sink's error: transient when the brokers are away, else
        permanent. Any other exception is what it is."""
        if not isinstance(exc, KafkaException):
            return exc
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if err is not None and (err.retriable() or err.code() in _TRANSIENT):
            return TransientSinkError(f"topic {self.config.topic!r}: {err.str()}")
        return PermanentSinkError(f"topic {self.config.topic!r}: {err.str() if err else exc}")

    async def close(self) -> None:
        await asyncio.to_thread(self._producer.close)
