"""DLQ records as data: parsing an envelope (old and new), times, reasons, and the filters inspect and replay share.

Pure: text in, values out. Reading a topic or a file is in :mod:`knarr.dlq.store`.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from knarr.errors import UsageError
from knarr.sinks.dlq import stage_of

REASON_CHARS = 160


@dataclass(frozen=True, slots=True)
class DlqRecord:
    """One dead letter, as read back. ``position`` says where it was read (``topic[p]@offset``, ``file:line``)."""

    id: str
    stage: str  # "sink" (a sink refused outputs) or the step that gave up on source messages
    sink_name: str
    sink_type: str
    error: str
    timestamp: float | None
    position: str
    payloads: tuple[str, ...] = ()
    truncated: bool = False
    source_topic: str = ""
    partition: int | None = None
    offsets: tuple[int, ...] = ()
    keys: tuple[str | None, ...] = ()
    payload_kind: str = ""
    payload_fields: tuple[dict[str, Any] | None, ...] | None = None
    raw_data: frozenset[int] = frozenset()
    payload_encodings: tuple[str, ...] = ()
    version: int = 1
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_sink_stage(self) -> bool:
        return self.stage == "sink"

    @property
    def reason(self) -> str:
        return normalise_reason(self.error)

    def source_values(self) -> list[bytes]:
        """The source messages' values as they were consumed (a source-stage record's payloads)."""
        out = []
        for index, text in enumerate(self.payloads):
            encoding = self.payload_encodings[index] if index < len(self.payload_encodings) else "utf-8"
            out.append(base64.b64decode(text) if encoding == "base64" else text.encode("utf-8"))
        return out

    def key_bytes(self) -> list[bytes | None]:
        return [decode_key(k) for k in self.keys]


class UnreadableRecord(ValueError):
    """A DLQ entry that is not a knarr envelope (not JSON, not an object)."""


def parse_record(raw: bytes | str, position: str) -> DlqRecord:
    """A record from its JSON text. Records of older knarr versions (no id, no stage) get both derived:
    the stage from sink_type, the id from the record's content, so it is the same on every read."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, (bytes, bytearray)) else raw
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnreadableRecord(f"{position}: not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise UnreadableRecord(f"{position}: a JSON {type(data).__name__}, not a DLQ record")
    sink_name, sink_type = str(data.get("sink_name", "")), str(data.get("sink_type", ""))
    fields = data.get("payload_fields")
    stamp = data.get("timestamp")
    partition = data.get("partition")
    return DlqRecord(
        id=str(data.get("id") or "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:32]),
        stage=str(data.get("stage") or stage_of(sink_type, sink_name)),
        sink_name=sink_name,
        sink_type=sink_type,
        error=str(data.get("error", "")),
        timestamp=float(stamp) if isinstance(stamp, (int, float)) else None,
        position=position,
        payloads=tuple(str(p) for p in data.get("original_payloads") or ()),
        truncated=bool(data.get("truncated", False)),
        source_topic=str(data.get("source_topic", "")),
        partition=partition if isinstance(partition, int) else None,
        offsets=tuple(o for o in data.get("offsets") or () if isinstance(o, int)),
        keys=tuple(k if k is None else str(k) for k in data.get("keys") or ()),
        payload_kind=str(data.get("payload_kind", "")),
        payload_fields=tuple(f if isinstance(f, dict) else None for f in fields) if isinstance(fields, list) else None,
        raw_data=frozenset(i for i in data.get("raw_data") or () if isinstance(i, int)),
        payload_encodings=tuple(str(e) for e in data.get("payload_encodings") or ()),
        version=int(data.get("version", 1)) if isinstance(data.get("version", 1), int) else 1,
        raw=data,
    )


def decode_key(key: str | None) -> bytes | None:
    """A key as the envelope writes it: UTF-8 text, or ``base64:...`` for anything else."""
    if key is None:
        return None
    if key.startswith("base64:"):
        return base64.b64decode(key.removeprefix("base64:"))
    return key.encode("utf-8")


# --- reasons -----------------------------------------------------------------------------------

_UUIDISH = re.compile(r"\b[0-9a-f]{8}(?:-?[0-9a-f]{4}){3}-?[0-9a-f]{12}\b|\b[0-9a-f]{16,}\b", re.I)
_NUMBER = re.compile(r"(?<![A-Za-z_])\d+(?:\.\d+)?")
_TASK = re.compile(r"^task \S+: ")  # a task-stage error names its task first


def normalise_reason(error: str) -> str:
    """The error's first line with ids and numbers blanked, so one cause is counted once."""
    first = error.strip().splitlines()[0] if error.strip() else "(no error text)"
    first = _TASK.sub("task <id>: ", first)
    first = _UUIDISH.sub("<id>", first)
    first = _NUMBER.sub("N", first)
    first = " ".join(first.split()).rstrip(" :")  # "exit code 3: " with an empty stderr
    return first if len(first) <= REASON_CHARS else first[: REASON_CHARS - 1] + "…"


# --- time ---------------------------------------------------------------------------------------

_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def parse_time(text: str, now: float, option: str = "--since") -> float:
    """A point in time as epoch seconds: ISO 8601 (no zone: UTC), or a span back from ``now`` (``90s``, ``2h``, ``7d``)."""
    relative = _RELATIVE.match(text)
    if relative:
        return now - float(relative.group(1)) * _UNIT_SECONDS[relative.group(2)]
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{option} {text!r} is not a time: give ISO 8601 (2026-01-31T12:00, UTC unless a zone is "
                         "given) or a span back from now (30m, 2h, 7d)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def iso(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def hour_bucket(timestamp: float | None) -> str:
    if timestamp is None:
        return "unknown"
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%dT%H:00Z")


# --- filters ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Filters:
    """Which records inspect and replay look at. Every filter given must match (an empty one matches all)."""

    sinks: frozenset[str] = frozenset()
    sink_types: frozenset[str] = frozenset()
    reason: re.Pattern[str] | None = None
    since: float | None = None  # inclusive
    until: float | None = None  # exclusive
    stages: frozenset[str] = frozenset()

    @classmethod
    def build(cls, sinks: Iterable[str] = (), sink_types: Iterable[str] = (), reason: str | None = None,
              since: str | None = None, until: str | None = None, now: float = 0.0,
              stages: Iterable[str] = ()) -> Filters:
        return cls(
            sinks=frozenset(sinks), sink_types=frozenset(sink_types), reason=reason_pattern(reason),
            since=parse_time(since, now, "--since") if since else None,
            until=parse_time(until, now, "--until") if until else None,
            stages=frozenset(stages),
        )

    def matches(self, record: DlqRecord) -> bool:
        if self.sinks and record.sink_name not in self.sinks:
            return False
        if self.sink_types and record.sink_type not in self.sink_types:
            return False
        if self.stages and not ({record.stage, "source" if not record.is_sink_stage else "sink"} & self.stages):
            return False
        if self.reason is not None and not self.reason.search(record.error):
            return False
        if self.since is not None and (record.timestamp is None or record.timestamp < self.since):
            return False
        if self.until is not None and (record.timestamp is None or record.timestamp >= self.until):
            return False
        return True

    @property
    def is_empty(self) -> bool:
        return not (self.sinks or self.sink_types or self.reason or self.since is not None
                    or self.until is not None or self.stages)


def reason_pattern(text: str | None) -> re.Pattern[str] | None:
    """``--reason``: a regular expression searched in the error, case-insensitive (plain words are a substring
    match); text that is no valid expression is taken literally."""
    if not text:
        return None
    try:
        return re.compile(text, re.I)
    except re.error:
        return re.compile(re.escape(text), re.I)
