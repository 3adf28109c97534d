"""Files as the backfill's input: JSON Lines or Parquet, on any Hadoop-compatible path.

Every line (JSONL) or row (Parquet) is one message. A Parquet file written from Kafka (a
topic dump) keeps its coordinates: columns ``value`` (and optionally ``key``, ``partition``,
``offset``, ``timestamp``) are used as they are. Without ``partition``/``offset`` columns the
input is one partition, numbered in file order; without a ``value`` column each row becomes
its JSON object.
"""

from __future__ import annotations

import json
from typing import Any

from knarr.errors import UsageError

FORMATS = ("jsonl", "parquet")

# A record travelling through Spark: (partition, offset, value, key, timestamp ms or None).
Record = tuple[int, int, bytes, bytes | None, int | None]


class InputError(UsageError, ValueError):
    pass


def input_format(path: str, given: str | None) -> str:
    """The input's format: as given, or from the path's suffix."""
    if given:
        if given not in FORMATS:
            raise InputError(f"--input-format {given!r} is not supported; use one of {', '.join(FORMATS)}")
        return given
    name = path.rstrip("/").lower()
    if name.endswith(".parquet") or name.endswith(".pq"):
        return "parquet"
    if name.endswith((".jsonl", ".ndjson", ".json", ".jsonl.gz", ".json.gz")):
        return "jsonl"
    raise InputError(f"--input {path!r}: cannot tell JSONL from Parquet by its name; add --input-format jsonl|parquet")


def _bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return str(value).encode()


def _millis(value: Any) -> int | None:
    if value is None:
        return None
    if hasattr(value, "timestamp"):
        return int(value.timestamp() * 1000)
    return int(value)


def read_records(spark: Any, path: str, fmt: str) -> Any:
    """An RDD of :data:`Record` for the input at ``path``."""
    try:
        if fmt == "jsonl":
            lines = spark.read.text(path).rdd.map(lambda row: row.value)
            return lines.zipWithIndex().map(lambda pair: (0, pair[1], pair[0].encode(), None, None))
        frame = spark.read.parquet(path)
    except Exception as exc:  # Spark's AnalysisException: path missing, not Parquet, ...
        raise InputError(f"--input {path!r}: cannot read it as {fmt}: {str(exc).splitlines()[0]}") from None
    columns = set(frame.columns)
    if "value" not in columns:
        names = frame.columns
        rows = frame.rdd.map(lambda row: json.dumps(dict(zip(names, row, strict=True)), default=str).encode())
        return rows.zipWithIndex().map(lambda pair: (0, pair[1], pair[0], None, None))
    has_key, has_ts = "key" in columns, "timestamp" in columns
    if {"partition", "offset"} <= columns:
        return frame.rdd.map(lambda row: (int(row["partition"]), int(row["offset"]), _bytes(row["value"]) or b"",
                                          _bytes(row["key"]) if has_key else None,
                                          _millis(row["timestamp"]) if has_ts else None))
    indexed = frame.rdd.zipWithIndex()
    return indexed.map(lambda pair: (0, pair[1], _bytes(pair[0]["value"]) or b"",
                                     _bytes(pair[0]["key"]) if has_key else None,
                                     _millis(pair[0]["timestamp"]) if has_ts else None))
