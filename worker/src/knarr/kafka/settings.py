"""librdkafka properties for each kind of client, from the worker's configuration.

`kafka.extra` is written for the source consumer. Its connection-level properties (security,
SASL, TLS, sockets, DNS) describe the cluster rather than the consumer, so every other client
talking to that cluster gets them too: producers for sinks and the DLQ, Spark's readers, the
operator's lag reader. A sink's or the DLQ's own `extra` is applied last and wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from knarr.config.models import KafkaConfig

# Properties that describe how to reach and authenticate to the cluster (librdkafka's global
# connection properties). Anything else in kafka.extra is consumer tuning and stays there.
CONNECTION_PREFIXES = (
    "security.", "sasl.", "ssl.", "ssl_", "enable.ssl.", "https.", "oauthbearer.", "client.dns.",
    "socket.", "broker.address.", "broker.version.", "api.version.", "reconnect.", "connections.max.",
    "metadata.max.age.", "topic.metadata.", "client.rack",
)

Settings = dict[str, Any]

STATIC_MEMBER = "group.instance.id"  # librdkafka's static group membership

# How much the source consumer's client fetches ahead of the worker. The worker's own queue holds
# what its pool can use (backpressure); the client only needs enough to hide a fetch's round trip.
# librdkafka's defaults suit a consumer that drains fast: it keeps fetching until a partition has
# 100,000 messages queued (64 MiB in all), and one fetch brings up to 1 MiB of every partition
# (50 MiB a request). A worker that started behind a backlog of small messages on 16 partitions
# grew from 66 to 190 MiB with them (each queued message costs librdkafka about 300 bytes besides
# its payload), and worked through one partition at a time while the others waited for the first
# fetch's messages to drain. With these it stayed near 66 MiB and moved on 8 to all 16 partitions
# in 20 s, at the same pace (bench/backlog.py). With so short a queue a partition must not wait
# long to fetch again once it has drained: librdkafka's 1 s back-off left persistent mode's pool
# idle. Each can be raised in kafka.extra.
PREFETCH_MESSAGES_PER_PARTITION = 2_000  # queued.min.messages (or max_poll_records, if more)
PREFETCH_KBYTES = 16 * 1024  # queued.max.messages.kbytes
FETCH_PARTITION_BYTES = 64 * 1024  # fetch.message.max.bytes; a bigger message still comes whole
FETCH_REQUEST_BYTES = 2 * 1024 * 1024  # fetch.max.bytes (at least message.max.bytes)
FETCH_QUEUE_BACKOFF_MS = 20  # fetch.queue.backoff.ms: how soon a partition whose queue was full fetches again


def connection(brokers: str, extra: Mapping[str, Any] | None = None) -> Settings:
    """What every client of this cluster needs: the bootstrap servers and the connection properties of `extra`."""
    settings: Settings = {"bootstrap.servers": brokers}
    settings.update({k: v for k, v in (extra or {}).items() if k.startswith(CONNECTION_PREFIXES)})
    return settings


def source_consumer(kafka: KafkaConfig, client_id: str) -> Settings:
    """The worker's group consumer: offsets are stored and committed by the watermark alone, never automatically."""
    return {
        "bootstrap.servers": kafka.brokers,
        "group.id": kafka.consumer_group,
        "client.id": client_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "cooperative-sticky",
        "max.poll.interval.ms": kafka.max_poll_interval_ms,
        "session.timeout.ms": kafka.session_timeout_ms,
        "heartbeat.interval.ms": kafka.heartbeat_interval_ms,
        "enable.partition.eof": False,
        "queued.min.messages": max(PREFETCH_MESSAGES_PER_PARTITION, kafka.max_poll_records),
        "queued.max.messages.kbytes": PREFETCH_KBYTES,
        "fetch.message.max.bytes": FETCH_PARTITION_BYTES,
        "fetch.max.bytes": max(FETCH_REQUEST_BYTES, _whole(kafka.extra.get("message.max.bytes"))),
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        **kafka.extra,
    }


def _whole(value: Any) -> int:
    """An integer property from kafka.extra, or 0 when absent or not a number (librdkafka judges it)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def range_reader(kafka: KafkaConfig) -> Settings:
    """A consumer that reads assigned offset ranges (Spark backfills): no group membership, nothing committed."""
    return {
        **kafka.extra,
        "bootstrap.servers": kafka.brokers,
        # librdkafka wants a group id; nothing is ever committed or subscribed under it.
        "group.id": f"{kafka.consumer_group}-backfill",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
    }


def producer(kafka: KafkaConfig, brokers: str = "", extra: Mapping[str, Any] | None = None) -> Settings:
    """A sink's or the DLQ's producer: the cluster's connection settings, then its own `extra`."""
    return {**connection(brokers or kafka.brokers, kafka.extra), **(extra or {})}


def offsets_reader(brokers: str, group: str, extra: Mapping[str, Any] | None = None) -> Settings:
    """A consumer that only reads a group's committed offsets and the log's extent (the operator's lag reader).

    It never subscribes, so it never joins the group or disturbs the workers in it.
    """
    return {
        **connection(brokers, extra),
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
    }
