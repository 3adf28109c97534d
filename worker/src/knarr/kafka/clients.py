"""Opening and closing librdkafka clients, the one way knarr does it.

librdkafka aborts the whole process (an assertion, or a segfault) when a client handle is
destroyed at the wrong moment, and Python decides that moment unless we do:

1. **Destroyed while one of its requests is still in flight inside librdkafka.** An
   AdminClient made per call and dropped once its futures resolved is exactly that: a
   request timeout resolves the future while the coordinator lookup behind
   ListConsumerGroupOffsets is still pending, and destroying the handle then trips
   `rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0'`. This is what killed
   the operator (and pytest, which ran it in-process) whenever the broker answered slowly.
2. **Destroyed on one of librdkafka's own threads**, which happens when a client sits in a
   reference cycle and the garbage collector frees it while Python code runs on such a
   thread (admin result callbacks do).

So every client lives as long as the component that owns it, is closed explicitly by that
component (close() lets librdkafka finish or cancel its requests before the handle goes),
and is never left for the garbage collector: callbacks given to a client capture plain
values, never their owner. A group's committed offsets are read with a consumer's
committed(), not an admin request. AdminClient has no close(): the few admin requests knarr
makes (creating topics; with static membership, describing the group and its topic now and
then) go through one admin client per cluster, kept for the life of the process
(`shared_admin`), with a request timeout, and every future it returns is waited for before
its user closes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from knarr.kafka.settings import Settings
from knarr.observability.kafka_logs import ClientLog

# librdkafka's own log lines, as stdlib log records (served by poll/consume, on the caller's thread).
LIBRDKAFKA_LOGGER = logging.getLogger("knarr.librdkafka")


def _hooks(log: ClientLog | None) -> dict[str, Any]:
    if log is None:
        return {"logger": LIBRDKAFKA_LOGGER}
    return {"logger": log.logger, "error_cb": log.error_cb}


def open_consumer(settings: Settings, log: ClientLog | None = None) -> Consumer:
    """A consumer whose librdkafka log lines and errors go through ``log`` (structlog, deduplicated)."""
    return Consumer({**settings, **_hooks(log)})


def open_producer(settings: Settings, log: ClientLog | None = None) -> Producer:
    return Producer({**settings, **_hooks(log)})


def close_consumer(consumer: Consumer | None, on_error: Callable[[str], None] | None = None) -> None:
    """Leave the group (if any) and destroy the handle; safe to call on a consumer that is already closed."""
    if consumer is None:
        return
    try:
        consumer.close()
    except (KafkaException, RuntimeError) as exc:
        if on_error is not None and "closed" not in str(exc):
            on_error(str(exc))


def close_producer(producer: Producer | None, flush_timeout: float = 10.0) -> int:
    """Flush (bounded), then destroy the handle. Returns how many records were still undelivered."""
    if producer is None:
        return 0
    remaining = producer.flush(flush_timeout)
    if remaining:
        # Drop what cannot be delivered so the destroy does not wait on it; the caller reports it.
        producer.purge(in_queue=True, in_flight=True, blocking=False)
        producer.poll(0)
    producer.close()
    return remaining


_admins: dict[tuple[tuple[str, str], ...], AdminClient] = {}
_admins_guard = threading.Lock()


def shared_admin(settings: Settings) -> AdminClient:
    """The process's admin client for these settings, created on first use and kept until exit."""
    key = tuple(sorted((k, str(v)) for k, v in settings.items()))
    with _admins_guard:
        admin = _admins.get(key)
        if admin is None:
            admin = _admins[key] = AdminClient({**settings, "logger": LIBRDKAFKA_LOGGER})
        return admin
