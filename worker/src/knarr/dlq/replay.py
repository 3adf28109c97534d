"""Planning a replay: what each DLQ record becomes (re-delivery to its sink, re-queueing its source
messages, or nothing, and why), and rebuilding the payloads a record held. Pure.

A record is replayed at most once unless asked (``--again``): every record done is written to the
replay ledger, and a later plan skips the ids found there.
"""

from __future__ import annotations

import json
import typing
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from knarr.api.payloads import PAYLOAD_KINDS, CollectResult
from knarr.dlq.records import DlqRecord, decode_key

Action = Literal["sink", "source", "already_replayed", "unreplayable"]


@dataclass(frozen=True, slots=True)
class Step:
    record: DlqRecord
    action: Action
    target: str = ""  # where it goes: "filesystem sink 'out'", "topic 'in'"
    why: str = ""  # for what is not replayed
    count: int = 0  # payloads (to a sink) or messages (to the source)


def plan(records: list[DlqRecord], replayed: frozenset[str], *, to_source: bool = False, again: bool = False,
         source_target: str = "the source") -> list[Step]:
    """One step per record, in the order read."""
    return [_step(r, replayed, to_source, again, source_target) for r in records]


def _step(record: DlqRecord, replayed: frozenset[str], to_source: bool, again: bool, source_target: str) -> Step:
    if record.id in replayed and not again:
        return Step(record, "already_replayed", why="already replayed (use --again to replay it anyway)")
    if to_source or not record.is_sink_stage:
        why = _why_not_to_source(record)
        if why:
            return Step(record, "unreplayable", why=why)
        return Step(record, "source", source_target, count=len(record.payloads))
    try:
        collect = rebuild(record)
    except (ValueError, TypeError, KeyError) as exc:
        return Step(record, "unreplayable", why=str(exc))
    return Step(record, "sink", f"{record.sink_type} sink {record.sink_name!r}", count=collect.count)


def _why_not_to_source(record: DlqRecord) -> str:
    if record.is_sink_stage:
        return ("it holds a sink's outputs, not the source messages; replay it to its sink (without --to-source), "
                f"or re-read offsets {list(record.offsets)[:10]} of {record.source_topic or 'the source'}")
    if record.truncated:
        return (f"its messages were cut to fit the DLQ (their sizes and SHA-256 are in the record); re-read offsets "
                f"{list(record.offsets)[:10]} of partition {record.partition} of {record.source_topic or 'the source'}")
    if not record.payloads:
        return "it holds no source messages"
    return ""


def rebuild(record: DlqRecord) -> CollectResult:
    """The payloads a sink-stage record held, as the handler returned them (data, routing fields),
    addressed to the sink instance that refused them."""
    if record.truncated:
        raise ValueError("its payloads were cut to fit the DLQ (their sizes and SHA-256 are in the record); "
                         "they cannot be delivered from it")
    cls = PAYLOAD_KINDS.get(record.payload_kind)
    if cls is None or record.payload_fields is None:
        raise ValueError("it has no payload kind and routing fields (written by an older knarr, or a payload of "
                         "an unknown kind); it can only be read")
    if len(record.payload_fields) != len(record.payloads) or any(f is None for f in record.payload_fields):
        raise ValueError("a payload's routing fields were too large to keep in the record")
    binary = _bytes_fields(cls)
    payloads = []
    for index, (text, fields) in enumerate(zip(record.payloads, record.payload_fields, strict=True)):
        assert fields is not None
        values: dict[str, Any] = {k: decode_key(v) if k in binary and isinstance(v, str) else v
                                  for k, v in fields.items() if k in cls.model_fields and k not in ("data", "sink")}
        try:
            data = text.encode() if index in record.raw_data else json.loads(text)
        except json.JSONDecodeError:
            raise ValueError(f"payload {index} is not the JSON text of its data") from None
        payloads.append(cls(sink=record.sink_name, data=data, **values))
    return CollectResult(**{record.payload_kind: payloads})


def _bytes_fields(cls: type) -> frozenset[str]:
    """The payload fields that hold bytes (a DLQ record writes them as text or base64:...)."""
    return frozenset(name for name, f in cls.model_fields.items() if _holds_bytes(f.annotation))


def _holds_bytes(annotation: Any) -> bool:
    return annotation is bytes or any(_holds_bytes(a) for a in typing.get_args(annotation))


@dataclass(frozen=True, slots=True)
class PlanCounts:
    """Per action and target: records and payloads/messages."""

    rows: list[tuple[Action, str, int, int]]  # action, target, records, items

    def records(self, action: Action) -> int:
        return sum(r for a, _, r, _ in self.rows if a == action)


def count(steps: list[Step]) -> PlanCounts:
    records: Counter[tuple[Action, str]] = Counter()
    items: Counter[tuple[Action, str]] = Counter()
    for step in steps:
        key = (step.action, step.target if step.action in ("sink", "source") else step.why)
        records[key] += 1
        items[key] += step.count
    order = {"sink": 0, "source": 1, "already_replayed": 2, "unreplayable": 3}
    rows = sorted(((a, t, n, items[(a, t)]) for (a, t), n in records.items()), key=lambda r: (order[r[0]], r[1]))
    return PlanCounts(rows)


def describe_plan(steps: list[Step]) -> str:
    """What a dry run says it would do."""
    counts = count(steps)
    if not steps:
        return "nothing to replay: no record matches"
    lines = []
    for action, target, records, items in counts.rows:
        if action == "sink":
            lines.append(f"  would re-deliver {records} records ({items} payloads) to {target}")
        elif action == "source":
            lines.append(f"  would re-queue {records} records ({items} messages) to {target}")
        elif action == "already_replayed":
            lines.append(f"  would skip {records} records already replayed (use --again to replay them anyway)")
        else:
            lines.append(f"  cannot replay {records} records: {target}")
    return "\n".join(lines)
