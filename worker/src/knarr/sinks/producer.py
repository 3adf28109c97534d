"""An asyncio face on confluent-kafka's Producer: produce() returns a future resolved on delivery."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer


class AsyncProducer:
    """One librdkafka producer plus a thread serving its delivery callbacks.

    librdkafka batches messages from concurrent produce() calls on its own (linger.ms), so
    many tasks delivering at once share network round trips.
    """

    def __init__(self, conf: dict[str, Any]) -> None:
        self._conf = {"linger.ms": 5, "enable.idempotence": True, "acks": "all", **conf}
        self._producer: Producer | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def connect(self, check_timeout: float = 10.0) -> None:
        errors: list[str] = []
        conf = {**self._conf, "error_cb": lambda err: errors.append(str(err))}
        self._producer = Producer(conf)
        try:
            self._producer.list_topics(timeout=check_timeout)
        except KafkaException as exc:
            detail = errors[-1] if errors else str(exc)
            raise ConnectionError(f"cannot reach Kafka at {self._conf.get('bootstrap.servers')!r}: {detail}") from None
        self._thread = threading.Thread(target=self._serve, name="knarr-producer", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        assert self._producer is not None
        while not self._stop.is_set():
            self._producer.poll(0.05)

    def produce(self, topic: str, value: bytes, key: bytes | None = None, headers: dict[str, str] | None = None) -> asyncio.Future:
        assert self._producer is not None, "connect() first"
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            loop.call_soon_threadsafe(_settle, fut, err, msg)

        while True:
            try:
                self._producer.produce(
                    topic, value=value, key=key, headers=list(headers.items()) if headers else None, on_delivery=on_delivery
                )
                return fut
            except BufferError:
                self._producer.poll(0.1)  # local queue full: let deliveries drain, then try again

    def close(self, timeout: float = 10.0) -> int:
        """Flush and stop; returns how many messages were still undelivered."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        remaining = self._producer.flush(timeout) if self._producer is not None else 0
        self._producer = None
        return remaining


def _settle(fut: asyncio.Future, err: KafkaError | None, msg: Any) -> None:
    if fut.done():
        return
    if err is not None:
        fut.set_exception(KafkaException(err))
    else:
        fut.set_result(msg)
