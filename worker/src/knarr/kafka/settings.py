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
        **kafka.extra,
    }


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
