"""The dead-letter queue: failed deliveries (and unprocessable windows) as JSON envelopes on a topic."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
import uuid
from typing import Any

from pydantic import BaseModel

from knarr.api.payloads import DeliveryError, payload_kind
from knarr.api.tasks import ExecutorError, ExecutorTask
from knarr.kafka.settings import Settings
from knarr.sinks.base import SinkConnectError
from knarr.sinks.producer import AsyncProducer


MAX_RECORD_BYTES = 900_000  # under the 1 MB Kafka brokers and producers accept by default
MAX_ERROR_CHARS = 4_000


ENVELOPE_VERSION = 2
MESSAGE_STAGE_TYPES = ("executor", "handler")  # the sink_type of a record holding source messages, not outputs
MAX_FIELDS_CHARS = 8_000  # one payload's routing fields (table, key, path, headers, meta) in a record


def stage_of(sink_type: str, sink_name: str) -> str:
    """Where a dead letter comes from: ``sink`` (a delivery its sink refused: the record holds outputs) or the
    processing step that gave up on source messages (parse, arrange, task, on_message_complete, ...)."""
    return sink_name if sink_type in MESSAGE_STAGE_TYPES else "sink"


def envelope(error: DeliveryError, partition: int | None, source_topic: str = "",
             max_bytes: int = MAX_RECORD_BYTES) -> dict[str, Any]:
    """The DLQ record: what failed, where (partition, offsets, keys), why, and the original payloads.

    A record is enough to do the work again (``knarr dlq replay``): it has an ``id`` of its own,
    its ``stage``, and for a sink's refusal each payload's kind and routing fields (a file's path,
    a table, a Redis key and ttl, a Kafka key and headers) beside its data; source messages that
    are not UTF-8 are kept in base64 (``payload_encodings`` says which).

    The record stays under ``max_bytes`` whatever it carries: when the payloads would not fit,
    each keeps only its head, and the record says so (``truncated``) with every payload's full
    size and SHA-256, so the original can be found again upstream and checked.
    """
    stage = stage_of(error.sink_type, error.sink_name)
    if stage == "sink":
        payloads = [_payload_json(p) for p in error.payloads]
    else:
        payloads, encodings = _source_values(error.payloads)
    record: dict[str, Any] = {
        "id": uuid.uuid4().hex,
        "version": ENVELOPE_VERSION,
        "stage": stage,
        "original_payloads": payloads,
        "truncated": False,
        "sink_name": error.sink_name,
        "sink_type": error.sink_type,
        "error": error.error[:MAX_ERROR_CHARS],
        "timestamp": time.time(),
        "source_topic": source_topic,
        "partition": partition,
        "offsets": list(error.offsets),
        "keys": [_key_text(k) for k in error.keys],
        "attempt_count": error.attempt,
    }
    if stage == "sink":
        record.update(_routing(error.payloads))
    elif "base64" in encodings:
        record["payload_encodings"] = encodings
    if error.task is not None:
        record["task"] = error.task
    if len(record_json(record)) <= max_bytes:
        return record
    record["payload_sizes"] = [len(p.encode()) for p in payloads]
    record["payload_sha256"] = [hashlib.sha256(p.encode()).hexdigest() for p in payloads]
    record["original_payloads"] = [""] * len(payloads)
    record["truncated"] = True
    if len(record_json(record)) > max_bytes:  # even the routing fields do not fit: say so, keep the rest
        record.pop("payload_fields", None)
        record["payload_fields_omitted"] = True
    share = max(0, (max_bytes - len(record_json(record)) - 64) // max(1, len(payloads)))
    record["original_payloads"] = [_head(p, share) for p in payloads]
    return record


def _routing(payloads: list[Any]) -> dict[str, Any]:
    """Each payload's kind and fields other than its data, so a replay can rebuild it."""
    kinds = {payload_kind(p) for p in payloads}
    out: dict[str, Any] = {"payload_kind": kinds.pop() if len(kinds) == 1 else ""}
    fields: list[dict[str, Any] | None] = []
    raw: list[int] = []
    for index, payload in enumerate(payloads):
        if not isinstance(payload, BaseModel) or not hasattr(payload, "data_json"):
            fields.append(None)
            continue
        if isinstance(payload.data, (bytes, bytearray)):
            raw.append(index)  # its data is text as given, not a JSON value to re-encode
        entry = {name: _field_value(getattr(payload, name)) for name in type(payload).model_fields if name not in ("data", "sink")}
        fields.append(entry if len(record_json(entry)) <= MAX_FIELDS_CHARS else None)
    out["payload_fields"] = fields
    if raw:
        out["raw_data"] = raw
    return out


def _field_value(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return _key_text(bytes(value))
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


def _source_values(values: list[Any]) -> tuple[list[str], list[str]]:
    """Source message values as text: UTF-8 as it is, anything else in base64 (so it can be re-queued intact)."""
    texts, encodings = [], []
    for value in values:
        if isinstance(value, (bytes, bytearray)):
            try:
                texts.append(bytes(value).decode("utf-8"))
                encodings.append("utf-8")
            except UnicodeDecodeError:
                texts.append(base64.b64encode(bytes(value)).decode())
                encodings.append("base64")
        else:
            texts.append(_payload_json(value))
            encodings.append("utf-8")
    return texts, encodings


TASK_STDERR_CHARS = 2000


def record_json(record: dict[str, Any]) -> str:
    """A DLQ record as JSON. Anything JSON cannot hold (a task's metadata may carry any object) is
    written as its str(): a dead letter must never fail for how it is written."""
    return json.dumps(record, default=str)


def task_record(task: ExecutorTask, error: ExecutorError) -> dict[str, Any]:
    """What a DLQ record keeps of a task that failed for good: enough to see why and to run it again.

    The task's env and stdin stay out: env may hold credentials, stdin may be large.
    """
    return {
        "task_id": task.task_id,
        "binary_path": task.binary_path,
        "args": task.args,
        "source_offsets": task.source_offsets,
        "parent_task_id": task.parent_task_id,
        "metadata": task.metadata,
        "reason": error.reason,
        "exit_code": error.exit_code,
        "exception": error.exception,
        "stderr": error.stderr[:TASK_STDERR_CHARS],
        "stderr_truncated": error.stderr_truncated or len(error.stderr) > TASK_STDERR_CHARS,
        "attempts": error.attempt,
    }


def _head(text: str, budget: int) -> str:
    """The longest prefix of ``text`` whose JSON encoding fits in ``budget`` bytes."""
    head = text[:budget]
    while head and len(json.dumps(head)) > budget:
        head = head[: len(head) * budget // len(json.dumps(head))]
    return head


def _key_text(key: bytes | None) -> str | None:
    if key is None:
        return None
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(key).decode()


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
    def __init__(self, topic: str, producer_settings: Settings, source_topic: str,
                 max_record_bytes: int = MAX_RECORD_BYTES, startup_timeout: float = 30.0) -> None:
        self.topic = topic
        self.max_record_bytes = max_record_bytes
        self.startup_timeout = startup_timeout
        self.brokers = producer_settings["bootstrap.servers"]
        self.source_topic = source_topic
        self._producer = AsyncProducer(producer_settings)

    async def connect(self) -> None:
        try:
            await asyncio.to_thread(self._producer.connect, self.startup_timeout)
        except ConnectionError as exc:
            raise SinkConnectError(f"dead-letter queue (topic {self.topic!r}): {exc}") from None

    async def send(self, error: DeliveryError, partition: int | None) -> None:
        record = record_json(envelope(error, partition, self.source_topic, self.max_record_bytes)).encode()
        await self._producer.produce(self.topic, record, key=str(partition).encode() if partition is not None else None)

    def hurry(self) -> None:
        """The worker waits for dead letters to be confirmed: hear of them sooner (AsyncProducer.hurry)."""
        self._producer.hurry()

    async def close(self) -> None:
        await asyncio.to_thread(self._producer.close)


class FileDeadLetterQueue:
    """Dead letters appended to a JSONL file: for the embedded (Kafka-less) mode."""

    def __init__(self, path: str, source_topic: str, max_record_bytes: int = MAX_RECORD_BYTES) -> None:
        from pathlib import Path

        self.max_record_bytes = max_record_bytes
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
            fh.write(record_json(envelope(error, partition, self.source_topic, self.max_record_bytes)) + "\n")

    async def close(self) -> None:
        return None
