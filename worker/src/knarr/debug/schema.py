"""The recorder's SQLite tables, and how an event becomes a row and back. Pure.

Three tables: ``events`` (one row per engine event), ``worker_config`` (who wrote this file:
its worker, consumer group, debug URL and masked config, so peers sharing ``db_dir`` find
each other) and ``worker_state`` (periodic snapshots of the overview).
"""

from __future__ import annotations

import functools
import json
import sqlite3
from typing import Any

import orjson

DDL = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    worker TEXT NOT NULL,
    kind TEXT NOT NULL,
    partition INTEGER,
    "offset" INTEGER,
    task_id TEXT,
    parent_task_id TEXT,
    duration_ms REAL,
    data TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS events_message ON events (partition, "offset");
CREATE TABLE IF NOT EXISTS worker_config (
    worker TEXT PRIMARY KEY,
    cluster TEXT,
    consumer_group TEXT,
    debug_url TEXT,
    db_path TEXT,
    config TEXT,
    updated_at REAL
);
CREATE TABLE IF NOT EXISTS worker_state (
    ts REAL NOT NULL,
    worker TEXT NOT NULL,
    state TEXT NOT NULL
);
"""

EVENT_COLUMNS = ("id", "ts", "worker", "kind", "partition", "offset", "task_id", "parent_task_id", "duration_ms", "data")
# One event as the recorder buffers it: its columns in EVENT_COLUMNS order but the worker's (the same
# for every event of a recorder), its data already JSON.
BUFFERED_COLUMNS = tuple(column for column in EVENT_COLUMNS if column != "worker")
_ROW = "(?1" + ", ?" * len(BUFFERED_COLUMNS) + ")"  # ?1: the worker; each bare ? the next parameter
INSERT_EVENTS = "INSERT INTO events (worker, " + ", ".join(f'"{c}"' for c in BUFFERED_COLUMNS) + ") VALUES "


@functools.cache
def insert_events(rows: int) -> str:
    """One INSERT of ``rows`` buffered events. Its parameters: the worker, then each row's
    BUFFERED_COLUMNS. SQLite numbers a bare ``?`` one past the largest number it has seen, so the
    worker, bound once, is ``?1`` in every row."""
    return INSERT_EVENTS + ", ".join([_ROW] * rows)


UPSERT_CONFIG = ("INSERT INTO worker_config (worker, cluster, consumer_group, debug_url, db_path, config, updated_at) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(worker) DO UPDATE SET cluster=excluded.cluster, "
                 "consumer_group=excluded.consumer_group, debug_url=excluded.debug_url, db_path=excluded.db_path, "
                 "config=excluded.config, updated_at=excluded.updated_at")
INSERT_STATE = "INSERT INTO worker_state (ts, worker, state) VALUES (?, ?, ?)"


def create(conn: sqlite3.Connection) -> None:
    conn.executescript(DDL)


def dumps(data: Any) -> str:
    """JSON of event data; anything JSON cannot say (bytes, a pydantic model) becomes its text.
    Never raises: the recorder calls it on the event loop, for every event.

    orjson writes it, ten times faster than json (about 0.2 against 2 µs for an event's data).
    json still writes what orjson refuses (an integer past 64 bits, a lone surrogate) and what it
    would change: orjson writes NaN and infinities as null, so a text with a null in it is written
    again by json. Data that neither can write (a key that is no text or number, a cycle) is kept
    as its repr, under ``unencodable``.
    """
    try:
        text = orjson.dumps(data, default=_text, option=_ORJSON_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError
        return _json(data)
    return _json(data) if b"null" in text else text.decode()


def _json(data: Any) -> str:
    try:
        return _encode(data)
    except (TypeError, ValueError, RecursionError):
        return _encode({"unencodable": repr(data)[:2_000]})


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


# Dates and dataclasses go to _text, as json sends them.
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
# The fallback for what orjson refuses or would change. One encoder, built once: json.dumps with
# options builds a new one per call.
_encode = json.JSONEncoder(separators=(",", ":"), default=_text, check_circular=False).encode


def event_object(row: tuple | sqlite3.Row) -> dict[str, Any]:
    """An events row as the API's event object (data parsed back)."""
    event = dict(zip(EVENT_COLUMNS, tuple(row)))
    event["data"] = json.loads(event["data"] or "{}")
    return event
