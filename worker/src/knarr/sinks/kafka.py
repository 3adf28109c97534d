"""Kafka sink: each payload becomes one record; delivery is confirmed by the broker before we return."""

from __future__ import annotations

import asyncio
from typing import Any

from knarr.api.payloads import KafkaPayload
from knarr.config.models import KafkaConfig, KafkaSinkConfig
from knarr.kafka import settings
from knarr.sinks.base import SinkConnectError
from knarr.sinks.producer import AsyncProducer


class KafkaSink:
    sink_type = "kafka"

    def __init__(self, name: str, config: KafkaSinkConfig, kafka: KafkaConfig) -> None:
        self.name = name
        self.config = config
        self.brokers = config.brokers or kafka.brokers
        self.startup_timeout = kafka.startup_timeout_seconds
        self._producer = AsyncProducer(settings.producer(kafka, config.brokers, config.extra))

    async def connect(self) -> None:
        try:
            await asyncio.to_thread(self._producer.connect, self.startup_timeout)
        except ConnectionError as exc:
            raise SinkConnectError(f"kafka sink {self.name!r} (topic {self.config.topic!r}): {exc}") from None

    async def deliver(self, payloads: list[Any]) -> None:
        records = [(p.data_json().encode(), p.key, p.headers or None) for p in payloads if isinstance(p, KafkaPayload)]
        await self._producer.produce_all(self.config.topic, records)

    async def close(self) -> None:
        await asyncio.to_thread(self._producer.close)
