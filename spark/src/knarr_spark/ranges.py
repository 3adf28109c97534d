"""What slice of history to backfill: parsing the range ends, and turning them into offsets. Pure.

The ends arrive as the operator writes them (``spec.backfills[].from/to``): per-partition
offsets ``"0:100,1:250"`` or RFC 3339 timestamps. The start is inclusive, the end exclusive.
Timestamps become offsets through the broker (``offsets_for_times``, in :mod:`kafka_input`);
this module only decides, from what the broker said, which offsets that is.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone

from knarr.errors import UsageError
from knarr_spark.planning import PartitionRange


class RangeError(UsageError, ValueError):
    """The requested range cannot be backfilled; the message says which end and why."""


def parse_offsets(text: str, flag: str) -> dict[int, int]:
    """``"0:100,1:250"`` -> ``{0: 100, 1: 250}``."""
    out: dict[int, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        partition, sep, offset = item.partition(":")
        if not sep or not partition.strip().isdigit() or not offset.strip().lstrip("-").isdigit():
            raise RangeError(f"{flag} {text!r}: {item!r} is not PARTITION:OFFSET; write e.g. {flag} 0:100,1:250")
        p, o = int(partition), int(offset)
        if o < 0:
            raise RangeError(f"{flag}: partition {p} has negative offset {o}")
        if p in out:
            raise RangeError(f"{flag}: partition {p} is given twice")
        out[p] = o
    if not out:
        raise RangeError(f"{flag} is empty; write e.g. {flag} 0:100,1:250")
    return out


def parse_timestamp(text: str, flag: str) -> int | None:
    """An RFC 3339 time (or epoch milliseconds) as epoch milliseconds; empty means "now" (None)."""
    text = text.strip()
    if not text:
        return None
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise RangeError(f"{flag} {text!r} is not an RFC 3339 time; write e.g. 2026-11-01T00:00:00Z "
                         "(or epoch milliseconds)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)  # like the CRD's date-time: UTC unless said
    return int(moment.timestamp() * 1000)


def ranges_from_offsets(start: Mapping[int, int], end: Mapping[int, int],
                        watermarks: Mapping[int, tuple[int, int]]) -> tuple[list[PartitionRange], list[str]]:
    """Per-partition ``[start, end)`` from explicit offsets, checked against the log's ``(low, high)``.

    Returns the ranges and warnings for people (offsets already deleted by retention).
    """
    if set(start) != set(end):
        only = sorted(set(start) ^ set(end))
        raise RangeError(f"--from-offsets and --to-offsets must name the same partitions; "
                         f"partition(s) {only} appear in only one of them")
    ranges, warnings = [], []
    for p in sorted(start):
        if p not in watermarks:
            raise RangeError(f"partition {p} does not exist in the topic (it has partitions {sorted(watermarks)})")
        low, high = watermarks[p]
        s, e = start[p], end[p]
        if e < s:
            raise RangeError(f"partition {p}: --to-offsets {e} is before --from-offsets {s}; the end is exclusive and must be >= the start")
        if e > high:
            raise RangeError(f"partition {p}: --to-offsets {e} is past the end of the log ({high}); "
                             f"use at most {high}")
        if s < low:
            warnings.append(f"partition {p}: offsets {s}..{min(low, e) - 1} were already deleted by retention; "
                            f"starting at {min(low, e)}")
            s = min(low, e)
        ranges.append(PartitionRange(p, s, e))
    return ranges, warnings


def ranges_from_times(start: Mapping[int, int], end: Mapping[int, int | None],
                      watermarks: Mapping[int, tuple[int, int]]) -> list[PartitionRange]:
    """Per-partition ranges from what ``offsets_for_times`` answered for each end.

    An answer of -1 (no message at or after the time) means the log's end; so does an end
    time of "now" (None). Every partition of the topic takes part.
    """
    ranges = []
    for p, (low, high) in sorted(watermarks.items()):
        s = high if start.get(p, -1) < 0 else max(start[p], low)
        e_raw = end.get(p)
        e = high if e_raw is None or e_raw < 0 else min(e_raw, high)
        ranges.append(PartitionRange(p, s, max(s, e)))
    return ranges
