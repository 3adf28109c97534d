"""What ``knarr dlq inspect`` reports: counts by sink, reason and hour, the time range, samples. Pure."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from knarr.dlq.records import DlqRecord, hour_bucket, iso

SAMPLE_PAYLOAD_CHARS = 200


@dataclass(frozen=True, slots=True)
class Summary:
    location: str
    read: int  # records read (before filtering)
    unreadable: int
    matched: int
    payloads: int
    limited: bool  # the read stopped at --limit
    by_sink: list[tuple[str, int]]  # "type/name" -> records
    by_stage: list[tuple[str, int]]
    by_reason: list[tuple[str, int]]
    other_reasons: int  # records whose reason is past the top N
    by_hour: list[tuple[str, int]]
    oldest: float | None
    newest: float | None
    samples: list[dict[str, Any]] = field(default_factory=list)
    replayed: int | None = None  # matched records already in the replay ledger (None: ledger not read)


def summarise(records: list[DlqRecord], *, location: str, read: int, unreadable: int = 0, limited: bool = False,
              top_reasons: int = 10, samples: int = 3, replayed_ids: frozenset[str] | None = None) -> Summary:
    """Counts over the records that matched the filters (``records``)."""
    by_sink = Counter(f"{r.sink_type}/{r.sink_name}" for r in records)
    by_stage = Counter(r.stage for r in records)
    reasons = Counter(r.reason for r in records)
    top = _ordered(reasons)[:top_reasons]
    by_hour = Counter(hour_bucket(r.timestamp) for r in records)
    stamps = [r.timestamp for r in records if r.timestamp is not None]
    return Summary(
        location=location, read=read, unreadable=unreadable, matched=len(records),
        payloads=sum(len(r.payloads) for r in records), limited=limited,
        by_sink=_ordered(by_sink), by_stage=_ordered(by_stage), by_reason=top,
        other_reasons=len(records) - sum(n for _, n in top),
        by_hour=sorted(by_hour.items()),
        oldest=min(stamps) if stamps else None, newest=max(stamps) if stamps else None,
        samples=[sample(r) for r in records[:samples]],
        replayed=None if replayed_ids is None else sum(1 for r in records if r.id in replayed_ids),
    )


def _ordered(counter: Counter) -> list[tuple[str, int]]:
    """Most first; ties by name, so the output is the same on every run."""
    return sorted(counter.items(), key=lambda item: (-item[1], item[0]))


def sample(record: DlqRecord) -> dict[str, Any]:
    payloads = [p if len(p) <= SAMPLE_PAYLOAD_CHARS else p[:SAMPLE_PAYLOAD_CHARS] + "…" for p in record.payloads[:3]]
    out: dict[str, Any] = {
        "id": record.id, "position": record.position, "time": iso(record.timestamp), "stage": record.stage,
        "sink": f"{record.sink_type}/{record.sink_name}", "error": record.error.strip().splitlines()[0][:500] if record.error.strip() else "",
        "source": f"{record.source_topic}[{record.partition}] offsets {list(record.offsets)[:10]}",
        "payloads": payloads, "payload_count": len(record.payloads),
    }
    if record.payload_fields:
        out["payload_fields"] = list(record.payload_fields[:3])
    return out


def as_json(summary: Summary) -> dict[str, Any]:
    return {
        "location": summary.location, "read": summary.read, "unreadable": summary.unreadable,
        "matched": summary.matched, "payloads": summary.payloads, "limited": summary.limited,
        "by_sink": dict(summary.by_sink), "by_stage": dict(summary.by_stage),
        "by_reason": [{"reason": r, "records": n} for r, n in summary.by_reason],
        "other_reasons": summary.other_reasons, "by_hour": dict(summary.by_hour),
        "oldest": iso(summary.oldest) if summary.oldest is not None else None,
        "newest": iso(summary.newest) if summary.newest is not None else None,
        "already_replayed": summary.replayed, "samples": summary.samples,
    }


def render(summary: Summary) -> str:
    """The report for people."""
    head = f"{summary.matched} of {summary.read} records match ({summary.payloads} payloads) in {summary.location}"
    if summary.read == 0:
        head = f"no records in {summary.location}"
    lines = [head]
    if summary.limited:
        lines.append(f"  (reading stopped at --limit {summary.read}: there are more records)")
    if summary.unreadable:
        lines.append(f"  {summary.unreadable} entries are not DLQ records (not JSON objects) and were left out")
    if summary.replayed is not None and summary.matched:
        lines.append(f"  {summary.replayed} of them already replayed (in the replay ledger)")
    if not summary.matched:
        return "\n".join(lines)
    lines.append(f"oldest  {iso(summary.oldest)}")
    lines.append(f"newest  {iso(summary.newest)}")
    lines += _table("by sink (type/name)", summary.by_sink)
    lines += _table("by stage", summary.by_stage)
    reasons = list(summary.by_reason)
    if summary.other_reasons:
        reasons.append(("(other reasons)", summary.other_reasons))
    lines += _table("by reason", reasons)
    lines += _table("by hour (UTC)", summary.by_hour)
    if summary.samples:
        lines.append("samples")
        for s in summary.samples:
            lines.append(f"  {s['id']}  {s['time']}  {s['sink']}  at {s['position']}")
            lines.append(f"    error:    {s['error']}")
            lines.append(f"    source:   {s['source']}")
            for index, payload in enumerate(s["payloads"]):
                fields = s.get("payload_fields", [None] * 3)
                routing = fields[index] if index < len(fields) else None
                lines.append(f"    payload:  {payload}" + (f"  {routing}" if routing else ""))
            if s["payload_count"] > len(s["payloads"]):
                lines.append(f"    … and {s['payload_count'] - len(s['payloads'])} more payloads")
    return "\n".join(lines)


def _table(title: str, rows: list[tuple[str, int]]) -> list[str]:
    if not rows:
        return []
    width = max(len(str(n)) for _, n in rows)
    return [title] + [f"  {n:>{width}}  {name}" for name, n in rows]
