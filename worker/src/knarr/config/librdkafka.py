"""What knarr lets through to librdkafka: refused ``extra`` properties, and librdkafka's own checks.

knarr's delivery guarantee (at least once, committed by watermark) rests on a few consumer
settings it owns. A property in ``kafka.extra`` is applied last, over them, so the keys
that would silently undo them are refused by name, each with its reason. Everything else
passes through; librdkafka itself then judges the final settings at startup
(:func:`check_consumer_settings`), and its verdict is translated into the config keys a
person wrote.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from knarr.config.secrets import redact, secret_values

# librdkafka property -> why knarr refuses it in kafka.extra (the consumer).
REFUSED_CONSUMER_PROPERTIES: dict[str, str] = {
    # Commits: knarr commits an offset only once every task and delivery of the messages
    # before it are done (the watermark). Anything committing or storing offsets on its own
    # commits messages whose work is still running: a crash then loses them.
    "enable.auto.commit": "auto-commit would commit offsets of messages whose tasks are still running (lost on a crash); knarr commits by watermark",
    "auto.commit.enable": "a legacy alias of enable.auto.commit: auto-commit would commit offsets of messages still being processed",
    "enable.auto.offset.store": "storing the offset of every polled message lets any offset-store commit (and a close) commit unfinished work; knarr commits explicit offsets",
    # Group protocol: knarr drains exactly the revoked partitions in the cooperative
    # rebalance callbacks before they move; the next-generation protocol (KIP-848) and eager
    # strategies change what a revoke means, and one worker with another strategy cannot
    # join a group of cooperative-sticky workers (InconsistentGroupProtocol) mid-rollout.
    "group.protocol": "knarr's revoke handling (drain, then commit, before a partition moves) is built on the classic protocol's cooperative rebalance",
    "partition.assignment.strategy": "knarr drains only the partitions a rebalance moves (cooperative-sticky); another strategy stops every partition on every rebalance, and mixed strategies cannot share a group during a rollout",
    "group.remote.assignor": "it belongs to group.protocol=consumer, which knarr does not use",
    # group.instance.id (static membership) stays allowed: one id per worker process is safe
    # and spares a rebalance on restart. The operator refuses it, since all of a Pipeline's
    # replicas share one config and the broker would fence all but one of them.
    # Settings knarr has first-class keys for: extra is applied last and would win silently.
    "group.id": "use kafka.consumer_group",
    "bootstrap.servers": "use kafka.brokers",
    "metadata.broker.list": "use kafka.brokers",
    "max.poll.interval.ms": "use kafka.max_poll_interval_ms",
    "session.timeout.ms": "use kafka.session_timeout_ms",
    "heartbeat.interval.ms": "use kafka.heartbeat_interval_ms",
}
# Whole families: auto.commit.interval.ms and co. only tune auto-commit; offset.store.method=file
# keeps offsets in a local file that another pod never sees.
REFUSED_CONSUMER_PREFIXES: dict[str, str] = {
    "auto.commit.": "auto-commit settings have no place in knarr, which commits by watermark",
    "offset.store.": "offsets must be committed to the group on the broker, where every worker (and the operator) reads them",
}

# A sink's or the DLQ's producer: acks=0 never hears of a failed write, so knarr would count
# the delivery done and commit the offset of a message whose result is gone.
REFUSED_PRODUCER_PROPERTIES: dict[str, str] = {
    "bootstrap.servers": "use the sink's brokers key",
    "metadata.broker.list": "use the sink's brokers key",
}
_ACKS_KEYS = ("acks", "request.required.acks")


def refused_consumer_property(key: str) -> str | None:
    """Why ``key`` may not be set in kafka.extra, or None if it may."""
    name = key.strip().lower()
    if name in REFUSED_CONSUMER_PROPERTIES:
        return REFUSED_CONSUMER_PROPERTIES[name]
    for prefix, reason in REFUSED_CONSUMER_PREFIXES.items():
        if name.startswith(prefix):
            return reason
    return None


def refused_producer_property(key: str, value: object) -> str | None:
    """Why ``key: value`` may not be set in a producer's extra, or None if it may."""
    name = key.strip().lower()
    if name in REFUSED_PRODUCER_PROPERTIES:
        return REFUSED_PRODUCER_PROPERTIES[name]
    if name in _ACKS_KEYS and str(value).strip() == "0":
        return "acks=0 never learns of a failed write, so a lost result would still be counted delivered and its offset committed; use acks=all (or 1)"
    return None


def refusals(extra: Mapping[str, Any], *, producer: bool = False) -> list[str]:
    """One line per refused property of ``extra``, naming the key (never its value)."""
    lines = []
    for key, value in extra.items():
        reason = refused_producer_property(key, value) if producer else refused_consumer_property(key)
        if reason is not None:
            lines.append(f"{key!r} may not be set here: {reason}")
    return lines


# --- librdkafka's verdict on the final settings --------------------------------------------

# The consumer's librdkafka properties knarr fills from its own keys.
CONSUMER_KEYS = {
    "max.poll.interval.ms": "kafka.max_poll_interval_ms",
    "session.timeout.ms": "kafka.session_timeout_ms",
    "heartbeat.interval.ms": "kafka.heartbeat_interval_ms",
    "group.id": "kafka.consumer_group",
    "bootstrap.servers": "kafka.brokers",
}
_QUOTED = re.compile(r"[`\"']([a-z][a-z0-9_.]*)[`\"']")
_LEADING = re.compile(r"^([a-z][a-z0-9_]*\.[a-z0-9_.]+) failed")  # "ssl.key.location failed: ..."
# librdkafka's log lines while judging repeat what the error says: keep them off stderr.
_checker_log = logging.getLogger("knarr.config.librdkafka")
_checker_log.addHandler(logging.NullHandler())
_checker_log.propagate = False


class ConsumerSettingsError(ValueError):
    """librdkafka refuses the consumer's settings; the message names the config keys involved."""


def config_key(prop: str) -> str:
    """The config key a person writes for librdkafka property ``prop``."""
    return CONSUMER_KEYS.get(prop, f"kafka.extra.{prop}")


def check_consumer_settings(settings: Mapping[str, Any], max_poll_records: int) -> None:
    """Let librdkafka judge the consumer's final ``settings`` now, not at the first poll.

    A consumer is created from exactly these settings — minus the bootstrap servers, so it
    makes no connection and starts no request — asked for a batch of ``max_poll_records``
    without waiting, and closed. Whatever librdkafka or the client refuses becomes a
    :class:`ConsumerSettingsError` naming the config keys, with every secret value masked.
    Ranges and relations librdkafka enforces (``max.poll.interval.ms`` >= ``session.timeout.ms``,
    unknown properties, bad values, unreadable key files) are checked by librdkafka itself,
    so the check cannot drift from the client.
    """
    from confluent_kafka import Consumer, KafkaException

    local = {k: v for k, v in settings.items() if k not in ("bootstrap.servers", "metadata.broker.list")}
    local.pop("error_cb", None)
    secrets = secret_values({"kafka": {"extra": dict(settings)}})
    try:
        consumer = Consumer({**local, "logger": _checker_log})
    except KafkaException as exc:
        raise ConsumerSettingsError(_explain(_kafka_message(exc), secrets)) from None
    try:
        consumer.consume(num_messages=max_poll_records, timeout=0)
    except ValueError as exc:
        raise ConsumerSettingsError(
            f"kafka.max_poll_records: {max_poll_records} is more than the Kafka client takes in one poll ({exc}); lower it"
        ) from None
    finally:
        consumer.close()


def _kafka_message(exc: Exception) -> str:
    err = exc.args[0] if exc.args else exc
    text = err.str() if hasattr(err, "str") else str(err)
    return text.strip().removeprefix("Failed to create consumer: ")


def _explain(message: str, secrets: list[str]) -> str:
    props = list(dict.fromkeys(_LEADING.findall(message) + _QUOTED.findall(message)))
    keys = ", ".join(config_key(p) for p in props) or "kafka.extra"
    return f"{keys}: the Kafka client (librdkafka) refuses these consumer settings: {redact(message, secrets)}"
