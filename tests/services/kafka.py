"""Real-Kafka helpers for the test suite.

The broker is the local single-node KRaft broker managed by
``hack/kafka/kafka.sh`` (state in ``<repo>/.cache/kafka``). There is no
fake: if the broker cannot be started, the ``kafka_bootstrap`` fixture errors
with the broker's log tail. Tests are never skipped for missing infra.

Register the session fixture from ``tests/conftest.py``::

    pytest_plugins = ["tests.services.kafka"]

Every helper takes the bootstrap string explicitly, so they can be called from
any test, thread or fixture. Clients follow knarr's own rules
(``knarr.kafka.clients``): admin requests go through the process's one admin
client per broker, consumers and producers are closed explicitly, and
committed offsets are read with a consumer, never an admin request to the
group coordinator. Use
``unique_name`` for topics and group ids: the broker is shared by every test
(and every engineer's session), so names must never collide.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from knarr.kafka import settings
from knarr.kafka.clients import close_consumer, close_producer, open_consumer, open_producer, shared_admin

REPO_ROOT = Path(__file__).resolve().parents[2]
KAFKA_SH = REPO_ROOT / "hack" / "kafka" / "kafka.sh"
BROKER_LOG = REPO_ROOT / ".cache" / "kafka" / "broker.log"

# A cold `up` fetches ~45 MB of jars with Maven before starting the JVM.
_UP_TIMEOUT_S = 600


class KafkaUnavailable(RuntimeError):
    """The local broker could not be started or reached."""


# --------------------------------------------------------------------- broker


def _log_tail(lines: int = 60) -> str:
    try:
        return "\n".join(BROKER_LOG.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no broker log at {BROKER_LOG}: {exc})"


def ensure_kafka() -> str:
    """Start the local broker (or reuse the running one); return its bootstrap.

    Raises KafkaUnavailable with kafka.sh's stderr, which on a failed start
    includes the last 60 lines of the broker log.
    """
    cmd = ["bash", str(KAFKA_SH), "up"]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=_UP_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise KafkaUnavailable(
            f"`{' '.join(cmd)}` did not finish within {_UP_TIMEOUT_S}s.\n"
            f"--- kafka.sh stderr ---\n{exc.stderr or ''}\n"
            f"--- last lines of {BROKER_LOG} ---\n{_log_tail()}"
        ) from exc
    for line in proc.stdout.splitlines():
        if line.startswith("KAFKA_BOOTSTRAP="):
            bootstrap = line.removeprefix("KAFKA_BOOTSTRAP=").strip()
            if proc.returncode == 0 and bootstrap:
                return bootstrap
    raise KafkaUnavailable(
        f"`{' '.join(cmd)}` failed (exit {proc.returncode}); "
        f"inspect with `hack/kafka/kafka.sh logs`.\n"
        f"--- kafka.sh stdout ---\n{proc.stdout}\n"
        f"--- kafka.sh stderr ---\n{proc.stderr}"
    )


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """Bootstrap address ("127.0.0.1:PORT") of the running local broker.

    Started once per session and left running afterwards, so the next session
    (or a neighbour's) reuses it; stop it with `make kafka-down`.
    """
    try:
        return ensure_kafka()
    except KafkaUnavailable as exc:
        pytest.fail(f"local Kafka broker unavailable:\n{exc}", pytrace=False)


# --------------------------------------------------------------------- names


def unique_name(prefix: str) -> str:
    """``prefix`` plus a short random suffix, for per-test topics and groups."""
    return f"{prefix}-{secrets.token_hex(4)}"


# --------------------------------------------------------------------- admin


def _admin(bootstrap: str) -> AdminClient:
    return shared_admin(settings.connection(bootstrap))


def _partition_ids(bootstrap: str, topic: str, timeout: float = 10) -> list[int]:
    md = _admin(bootstrap).list_topics(topic=topic, timeout=timeout)
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None:
        raise KafkaException(tmd.error if tmd else f"topic {topic!r} not in metadata")
    return sorted(tmd.partitions)


def create_topic(bootstrap: str, name: str, partitions: int = 1, timeout: float = 30) -> None:
    """Create ``name`` and wait until every partition has a leader.

    An existing topic with the same partition count is accepted (idempotent);
    one with a different count is an error.
    """
    admin = _admin(bootstrap)
    deadline = time.monotonic() + timeout
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1)],
        request_timeout=timeout,
    )
    existed = False
    try:
        futures[name].result(timeout=timeout)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
        existed = True

    # CreateTopics returns once the controller has the topic; the broker's
    # metadata cache and partition leadership follow shortly after.
    last = "no metadata yet"
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=name, timeout=max(0.1, min(5.0, deadline - time.monotonic())))
        tmd = md.topics.get(name)
        if tmd is None or tmd.error is not None:
            last = f"topic metadata error: {tmd.error if tmd else 'missing'}"
        else:
            parts = tmd.partitions
            if existed and parts and len(parts) != partitions:
                raise ValueError(
                    f"topic {name!r} already exists with {len(parts)} partitions, wanted {partitions}"
                )
            if len(parts) == partitions and all(
                p.leader >= 0 and p.error is None for p in parts.values()
            ):
                return
            last = f"{len(parts)}/{partitions} partitions, leaders {[p.leader for p in parts.values()]}"
        time.sleep(0.05)  # pacing between metadata polls, bounded by the deadline
    raise TimeoutError(f"topic {name!r} not ready after {timeout}s ({last})")


def end_offsets(bootstrap: str, topic: str, timeout: float = 10) -> dict[int, int]:
    """Log-end offset (high watermark) of every partition of ``topic``."""
    admin = _admin(bootstrap)
    requests = {TopicPartition(topic, p): OffsetSpec.latest() for p in _partition_ids(bootstrap, topic)}
    futures = admin.list_offsets(requests, request_timeout=timeout)
    return {tp.partition: fut.result(timeout=timeout).offset for tp, fut in futures.items()}


def group_assignment(bootstrap: str, group: str, timeout: float = 10) -> tuple[bool, dict[str, list[int]]]:
    """Whether ``group`` is stable, and each member's partitions, by its static id (group.instance.id)."""
    description = _admin(bootstrap).describe_consumer_groups([group], request_timeout=timeout)[group].result(timeout + 5)
    return description.state == ConsumerGroupState.STABLE, {
        m.group_instance_id: sorted(tp.partition for tp in m.assignment.topic_partitions) for m in description.members
    }


_COORDINATOR_MOVING = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                       KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT}


def committed_offsets(bootstrap: str, group: str, topic: str, timeout: float = 10) -> dict[int, int]:
    """Offsets ``group`` has committed on ``topic``, by partition.

    Partitions without a committed offset are left out, so a group that never
    committed gives ``{}``.
    """
    partitions = [TopicPartition(topic, p) for p in _partition_ids(bootstrap, topic)]
    deadline = time.monotonic() + timeout
    consumer = open_consumer({**settings.connection(bootstrap), "group.id": group, "enable.auto.commit": False})
    try:
        while True:
            try:
                listing = consumer.committed(partitions, timeout=max(0.1, deadline - time.monotonic()))
                break
            except KafkaException as exc:
                # A broker that just came back may still be moving the group's coordinator.
                err = exc.args[0] if exc.args else None
                passing = err is not None and (err.retriable() or err.code() in _COORDINATOR_MOVING)
                if not passing or time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)  # pacing between retries, bounded by the deadline
    finally:
        close_consumer(consumer)
    out: dict[int, int] = {}
    for tp in listing:
        if tp.error is not None:
            raise KafkaException(tp.error)
        if tp.offset >= 0:
            out[tp.partition] = tp.offset
    return out


# --------------------------------------------------------------------- produce


def produce_json(
    bootstrap: str,
    topic: str,
    records: Iterable[Any],
    partition: int | None = None,
    key_fn: Callable[[Any], str | bytes | None] | None = None,
    timeout: float = 30,
) -> list[tuple[int, int]]:
    """Produce each record as compact JSON; return ``(partition, offset)`` per record.

    ``partition`` pins every record to one partition; otherwise the key (from
    ``key_fn(record)``, str keys are UTF-8 encoded) picks it, as in production.
    Flushes before returning and raises on any delivery error.
    """
    producer = open_producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    results: dict[int, tuple[int, int]] = {}
    errors: list[str] = []

    def on_delivery(index: int):
        def cb(err, msg):
            if err is not None:
                errors.append(f"record {index}: {err}")
            else:
                results[index] = (msg.partition(), msg.offset())

        return cb

    count = 0
    for index, record in enumerate(records):
        kwargs: dict[str, Any] = {
            "value": json.dumps(record, separators=(",", ":")).encode(),
            "on_delivery": on_delivery(index),
        }
        if key_fn is not None:
            key = key_fn(record)
            kwargs["key"] = key.encode() if isinstance(key, str) else key
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)  # local queue full: serve delivery reports, retry
        producer.poll(0)
        count += 1

    remaining = close_producer(producer, flush_timeout=timeout)
    if remaining:
        raise TimeoutError(f"{remaining} of {count} records to {topic!r} not delivered within {timeout}s")
    if errors:
        raise KafkaException(f"delivery to {topic!r} failed: " + "; ".join(errors[:10]))
    return [results[i] for i in range(count)]


def produce_values(bootstrap: str, topic: str, values: Iterable[tuple[int, bytes]], producer_settings: dict[str, Any],
                   timeout: float = 60) -> None:
    """Produce ``(partition, value)`` pairs as fast as the client takes them, without delivery reports
    (for backlogs of many messages); ``producer_settings`` shape the batches. Raises if the broker
    has not taken them all within ``timeout`` after the last one."""
    producer = open_producer({"bootstrap.servers": bootstrap, **producer_settings})
    try:
        for partition, value in values:
            while True:
                try:
                    producer.produce(topic, value, partition=partition)
                    break
                except BufferError:
                    producer.poll(0.1)  # local queue full: let it drain, retry
        remaining = producer.flush(timeout)
        if remaining:
            raise TimeoutError(f"{remaining} records to {topic!r} not delivered within {timeout}s")
    finally:
        close_producer(producer, 10)


# --------------------------------------------------------------------- consume


@dataclass(frozen=True)
class Message:
    value: bytes | None
    key: bytes | None
    partition: int
    offset: int

    def json(self) -> Any:
        assert self.value is not None, f"tombstone at {self.partition}/{self.offset}"
        return json.loads(self.value)


def consume_all(
    bootstrap: str,
    topic: str,
    expected: int | None = None,
    timeout: float = 30,
) -> list[Message]:
    """Read ``topic`` from the beginning of every partition.

    With ``expected``, returns as soon as that many messages arrived, or
    whatever arrived when ``timeout`` passes (the caller asserts). Without it,
    reads up to the end offsets as of the call and returns. Messages come in
    arrival order (ordered within each partition). Uses a fresh group id and
    manual assignment, so there is no rebalance wait and nothing is committed.
    """
    deadline = time.monotonic() + timeout
    consumer = open_consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("consume-all"),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        partitions = _wait_for_partitions(consumer, topic, deadline)
        if not partitions:
            return []
        # Without `expected`, the target is each partition's end offset as of
        # now; partitions that are already empty need no reading at all.
        ends: dict[int, int] = {}
        tps = []
        for p in partitions:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=max(0.1, deadline - time.monotonic())
            )
            tps.append(TopicPartition(topic, p, low))
            if high > low:
                ends[p] = high
        consumer.assign(tps)

        out: list[Message] = []
        while True:
            if expected is not None and len(out) >= expected:
                return out
            if expected is None and _caught_up(consumer, topic, ends):
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return out
            # consume() returns only when the batch is full or its timeout
            # expires, so short slices keep the tail latency low.
            for msg in consumer.consume(num_messages=500, timeout=min(remaining, 0.1)):
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(msg.error())
                out.append(Message(msg.value(), msg.key(), msg.partition(), msg.offset()))
    finally:
        close_consumer(consumer)


def _wait_for_partitions(consumer: Consumer, topic: str, deadline: float) -> list[int]:
    while True:
        remaining = deadline - time.monotonic()
        md = consumer.list_topics(topic=topic, timeout=max(0.1, min(remaining, 5.0)))
        tmd = md.topics.get(topic)
        if tmd is not None and tmd.error is None and tmd.partitions:
            return sorted(tmd.partitions)
        if time.monotonic() >= deadline:
            return []
        time.sleep(0.05)  # pacing between metadata polls, bounded by the deadline


def _caught_up(consumer: Consumer, topic: str, ends: dict[int, int]) -> bool:
    # position() is the next offset to fetch (negative before the first
    # fetch); control records (transaction markers) advance it too.
    if not ends:
        return True
    positions = consumer.position([TopicPartition(topic, p) for p in ends])
    return all(tp.offset >= ends[tp.partition] for tp in positions)


# --------------------------------------------------------------------- a broker to hurt


class PrivateBroker:
    """A second local broker with its own state directory, for fault tests.

    Tests that stop, slow or kill a broker do it to this one, so the broker every other test
    shares is never touched. ``flapping()`` makes it slow the way a loaded or GC-bound broker
    is: SIGSTOP for a moment, SIGCONT, over and over.
    """

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.bootstrap = ""

    def _sh(self, command: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "KNARR_KAFKA_STATE_DIR": str(self.state_dir)}
        return subprocess.run(["bash", str(KAFKA_SH), command], capture_output=True, text=True,
                              timeout=_UP_TIMEOUT_S, check=False, env=env)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join((self.state_dir / "broker.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"(no broker log: {exc})"

    def start(self) -> str:
        proc = self._sh("up")
        for line in proc.stdout.splitlines():
            if line.startswith("KAFKA_BOOTSTRAP=") and proc.returncode == 0:
                self.bootstrap = line.removeprefix("KAFKA_BOOTSTRAP=").strip()
                return self.bootstrap
        raise KafkaUnavailable(f"private broker in {self.state_dir} did not start (exit {proc.returncode}):\n"
                               f"{proc.stderr}\n--- broker log ---\n{self.log_tail()}")

    def stop(self) -> None:
        self.resume()
        self._sh("down")

    @property
    def pid(self) -> int:
        return int((self.state_dir / "broker.pid").read_text().strip())

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        try:
            os.kill(self.pid, signal.SIGCONT)
        except (OSError, ValueError):
            pass

    @contextmanager
    def flapping(self, stopped: float = 0.35, running: float = 0.4) -> Iterator[threading.Event]:
        """Stop and continue the broker in a cycle while the block runs; it is always left running.

        Yields an event that is set after the first full cycle.
        """
        done, cycled = threading.Event(), threading.Event()

        def cycle() -> None:
            while not done.is_set():
                self.pause()
                done.wait(stopped)
                self.resume()
                cycled.set()
                done.wait(running)

        thread = threading.Thread(target=cycle, name="broker-flapper", daemon=True)
        thread.start()
        try:
            yield cycled
        finally:
            done.set()
            thread.join()
            self.resume()


@pytest.fixture(scope="session")
def private_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateBroker]:
    """A broker of the fault tests' own, started once per session and stopped at its end."""
    broker = PrivateBroker(tmp_path_factory.mktemp("private-kafka"))
    try:
        broker.start()
    except KafkaUnavailable as exc:
        pytest.fail(f"private Kafka broker unavailable:\n{exc}", pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()
