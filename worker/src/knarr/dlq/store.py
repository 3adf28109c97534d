"""Where a DLQ is, reading it, and its replay ledger: the I/O under ``knarr dlq``.

A Kafka DLQ is read with a throwaway consumer: partitions assigned by hand from the low to the
high watermark as of the start, no group joined, nothing committed. A file DLQ is read line by line.

The replay ledger is the list of record ids already replayed: a compacted topic
``<dlq topic>.replayed`` keyed by record id, or a sidecar ``<dlq file>.replayed`` (JSON Lines).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from knarr.config.root import KnarrConfig
from knarr.dlq.records import DlqRecord, UnreadableRecord, parse_record
from knarr.errors import UnavailableError, UsageError
from knarr.kafka import settings
from knarr.kafka.clients import close_consumer, open_consumer, shared_admin
from knarr.kafka.settings import Settings
from knarr.observability.kafka_logs import ClientLog
from knarr.sinks.producer import AsyncProducer

LEDGER_SUFFIX = ".replayed"
DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Location:
    """A DLQ: a topic on a cluster, or a JSON Lines file."""

    topic: str = ""
    connection: Settings = field(default_factory=dict)  # librdkafka connection properties of the topic's cluster
    path: Path | None = None
    timeout: float = DEFAULT_TIMEOUT

    @property
    def is_file(self) -> bool:
        return self.path is not None

    @property
    def label(self) -> str:
        if self.path is not None:
            return f"file {str(self.path)!r}"
        return f"topic {self.topic!r} at {self.connection.get('bootstrap.servers')}"

    @property
    def ledger_label(self) -> str:
        if self.path is not None:
            return f"file {str(self.path) + LEDGER_SUFFIX!r}"
        return f"topic {self.topic + LEDGER_SUFFIX!r}"


def locate(config: KnarrConfig | None, topic: str | None = None, file: str | None = None,
           brokers: str | None = None) -> Location:
    """The DLQ named by --file / --topic, or else the config's (``dlq.path``, else ``dlq.topic``)."""
    if file and topic:
        raise UsageError("give --file or --topic, not both")
    if file:
        return Location(path=Path(file))
    extra = config.kafka.extra if config is not None else {}
    timeout = config.kafka.startup_timeout_seconds if config is not None else DEFAULT_TIMEOUT
    if topic:
        servers = brokers or (config.dlq_brokers if config is not None else "")
        if not servers:
            raise UsageError("--topic needs --brokers (or --config, whose dlq.brokers / kafka.brokers are used)")
        return Location(topic=topic, connection=settings.connection(servers, extra), timeout=timeout)
    if config is None:
        raise UsageError("which DLQ? give --config (its dlq.path or dlq.topic), --file PATH, or --topic NAME --brokers HOST:PORT")
    if config.dlq.path and not brokers:
        return Location(path=Path(config.dlq.path))
    servers = brokers or config.dlq_brokers
    return Location(topic=config.dlq_topic, connection=settings.connection(servers, extra), timeout=timeout)


# --- reading ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Read:
    records: list[DlqRecord]
    read: int  # entries read
    unreadable: int
    limited: bool  # stopped at the limit with more left
    missing: bool = False  # the topic or file does not exist (nothing was ever dead-lettered there)


def read(location: Location, limit: int) -> Read:
    if location.path is not None:
        return _read_file(location.path, limit)
    entries, limited, missing = read_topic(location.connection, location.topic, limit, location.timeout)
    return _parsed(entries, limited, missing)


def _parsed(entries: list[tuple[bytes | None, str]], limited: bool, missing: bool) -> Read:
    records, unreadable = [], 0
    for value, position in entries:
        try:
            records.append(parse_record(value or b"", position))
        except UnreadableRecord:
            unreadable += 1
    return Read(records, len(entries), unreadable, limited, missing)


def _read_file(path: Path, limit: int) -> Read:
    if not path.exists():
        return Read([], 0, 0, False, missing=True)
    entries: list[tuple[bytes | None, str]] = []
    limited = False
    try:
        with path.open("rb") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                if len(entries) >= limit:
                    limited = True
                    break
                entries.append((line, f"{path.name}:{number}"))
    except OSError as exc:
        raise UsageError(f"cannot read the DLQ file {str(path)!r}: {exc.strerror}") from None
    return _parsed(entries, limited, False)


def read_topic(connection: Settings, topic: str, limit: int | None, timeout: float) -> tuple[list[tuple[bytes | None, str]], bool, bool]:
    """Every record of ``topic`` up to the high watermarks as of now (at most ``limit``), oldest first per
    partition. Returns (value, position) pairs, whether the limit cut the read, and whether the topic is missing."""
    client_log = ClientLog("consumer")
    client_log.quiet = True
    consumer = open_consumer({
        **connection, "group.id": f"knarr-dlq-reader-{uuid.uuid4().hex[:12]}", "enable.auto.commit": False,
        "enable.auto.offset.store": False, "auto.offset.reset": "earliest", "enable.partition.eof": False,
    }, client_log)
    brokers = str(connection.get("bootstrap.servers"))
    try:
        try:
            metadata = consumer.list_topics(topic=topic, timeout=timeout)
        except KafkaException as exc:
            raise UnavailableError(client_log.unreachable(brokers, timeout, str(exc))) from None
        client_log.quiet = False
        found = metadata.topics.get(topic)
        if found is None or found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return [], False, True
        if found.error is not None:
            raise UnavailableError(f"topic {topic!r} at {brokers}: {found.error.str()}")
        ends: dict[int, int] = {}
        assignment = []
        for partition in sorted(found.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
            if high > low:
                ends[partition] = high
                assignment.append(TopicPartition(topic, partition, low))
        if not assignment:
            return [], False, False
        consumer.assign(assignment)
        out: list[tuple[bytes | None, str]] = []
        quiet_since = time.monotonic()
        while ends:
            if limit is not None and len(out) >= limit:
                return out, True, False
            batch = consumer.consume(num_messages=min(500, limit - len(out)) if limit is not None else 500, timeout=0.2)
            for msg in batch:
                if msg.error() is not None:
                    raise UnavailableError(f"reading topic {topic!r} at {brokers}: {msg.error().str()}")
                out.append((msg.value(), f"{topic}[{msg.partition()}]@{msg.offset()}"))
            if batch:
                quiet_since = time.monotonic()
            # Past the end of a partition (also when its last offsets are transaction markers): done with it.
            for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
            if ends and time.monotonic() - quiet_since > timeout:
                raise UnavailableError(f"reading topic {topic!r} at {brokers}: nothing arrived for {timeout:.0f}s "
                                       f"with partitions {sorted(ends)} not read to their end; is the broker up?")
        return out, False, False
    finally:
        close_consumer(consumer)


# --- the replay ledger --------------------------------------------------------------------------


def ledger_entry(record_id: str, how: str, target: str) -> dict[str, Any]:
    return {"id": record_id, "replayed_at": time.time(), "to": how, "target": target}


class FileLedger:
    """``<dlq file>.replayed``: one JSON line per replayed record."""

    def __init__(self, dlq_path: Path) -> None:
        self.path = Path(str(dlq_path) + LEDGER_SUFFIX)

    def ids(self) -> frozenset[str]:
        if not self.path.exists():
            return frozenset()
        ids = set()
        with self.path.open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    ids.add(json.loads(line)["id"])
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut by a crash mid-write: that record is simply not marked
        return frozenset(ids)

    async def open(self) -> None:
        self.path.touch()

    async def add(self, entry: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")

    async def close(self) -> None:
        return None


class KafkaLedger:
    """``<dlq topic>.replayed``: a compacted topic keyed by record id (created on the first replay)."""

    def __init__(self, location: Location) -> None:
        self.location = location
        self.topic = location.topic + LEDGER_SUFFIX
        self._producer: AsyncProducer | None = None

    def ids(self) -> frozenset[str]:
        entries, _, _ = read_topic(self.location.connection, self.topic, None, self.location.timeout)
        ids = set()
        for value, _ in entries:
            try:
                ids.add(json.loads(value or b"")["id"])
            except (ValueError, KeyError, TypeError):
                continue
        return frozenset(ids)

    async def open(self) -> None:
        admin = shared_admin(self.location.connection)
        futures = admin.create_topics([NewTopic(self.topic, num_partitions=1, config={"cleanup.policy": "compact"})],
                                      request_timeout=self.location.timeout)
        try:
            futures[self.topic].result(timeout=self.location.timeout)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if err is None or err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise UnavailableError(f"cannot create the replay ledger topic {self.topic!r}: {exc}; create it "
                                       "(cleanup.policy=compact) or let this client create topics") from None
        self._producer = AsyncProducer(dict(self.location.connection))
        try:
            self._producer.connect(self.location.timeout)
        except ConnectionError as exc:
            raise UnavailableError(f"replay ledger {self.topic!r}: {exc}") from None

    async def add(self, entry: dict[str, Any]) -> None:
        assert self._producer is not None
        await self._producer.produce(self.topic, json.dumps(entry).encode(), key=entry["id"].encode())

    async def close(self) -> None:
        if self._producer is not None:
            self._producer.close()


def ledger(location: Location) -> FileLedger | KafkaLedger:
    return FileLedger(location.path) if location.path is not None else KafkaLedger(location)
