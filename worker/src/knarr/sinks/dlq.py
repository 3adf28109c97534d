"""The dead-letter queue: failed deliveries (and unprocessable windows) as JSON envelopes on a topic."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from pydantic import BaseModel

from knarr.api.payloads import DeliveryError
from knarr.sinks.base import SinkConnectError
from knarr.sinks.producer import AsyncProducer


def envelope(error: DeliveryError, partition: int | None, source_topic: str = "") -> dict[str, Any]:
    """The DLQ record: what failed, where, why, and the original payloads (so nothing is lost)."""
    return {
        "original_payloads": [_payload_json(p) for p in error.payloads],
        "sink_name": error.sink_name,
        "sink_type": error.sink_type,
        "error": error.error,
        "timestamp": time.time(),
        "partition": partition,
        "attempt_count": error.attempt,
        "source_topic": source_topic,
    }


def _payload_json(payload: Any) -> str:
    try:
        if hasattr(payload, "data_json"):
            return payload.data_json()
        if isinstance(payload, BaseModel):
            return payload.model_dump_json()
        if isinstance(payload, (bytes, bytearray)):
            return payload.decode("utf-8", errors="replace")
        return json.dumps(payload, default=str)
    except Exception:
        return str(payload)


class DeadLetterQueue:
    def __init__(self, topic: str, brokers: str, source_topic: str, startup_timeout: float = 30.0) -> None:
        self.topic = topic
        self.startup_timeout = startup_timeout
        self.brokers = brokers
        self.source_topic = source_topic
        self._producer = AsyncProducer({"bootstrap.servers": brokers})

    async def connect(self) -> None:
        try:
            await asyncio.to_thread(self._producer.connect, self.startup_timeout)
        except ConnectionError as exc:
            raise SinkConnectError(f"dead-letter queue (topic {self.topic!r}): {exc}") from None

    async def send(self, error: DeliveryError, partition: int | None) -> None:
        record = json.dumps(envelope(error, partition, self.source_topic)).encode()
        await self._producer.produce(self.topic, record, key=str(partition).encode() if partition is not None else None)

    async def close(self) -> None:
        await asyncio.to_thread(self._producer.close)


class FileDeadLetterQueue:
    """Dead letters appended to a JSONL file: for the embedded (Kafka-less) mode."""

    def __init__(self, path: str, source_topic: str) -> None:
        from pathlib import Path

        self.path = Path(path)
        self.topic = str(self.path)
        self.source_topic = source_topic

    async def connect(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()
        except OSError as exc:
            raise SinkConnectError(f"dead-letter file {str(self.path)!r} is not writable ({exc.strerror})") from None

    async def send(self, error: DeliveryError, partition: int | None) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(envelope(error, partition, self.source_topic)) + "\n")

    async def close(self) -> None:
        return None
