"""Naming recorder databases, finding them on disk and reading several as one.

A worker's files are ``knarr-recorder-<worker>-<time>.db``; the ``-live.db`` link points at
the current one and is never listed itself. :func:`merged_connection` attaches files read-only
to one in-memory connection and puts a ``UNION ALL`` view over each table, so the read-side
queries (``queries.py``) run unchanged over one file, a worker's history or a whole fleet.
"""

from __future__ import annotations

import calendar
import contextlib
import re
import sqlite3
import time
from pathlib import Path

from knarr.debug import schema

PREFIX = "knarr-recorder-"
MAX_ATTACHED = 10  # SQLite's default limit of attached databases
TABLES = ("events", "worker_config", "worker_state")


def file_prefix(worker: str) -> str:
    """What every file of this worker's name begins with (a worker name may hold any character)."""
    return f"{PREFIX}{re.sub(r'[^A-Za-z0-9_.-]', '_', worker)}-"


def file_stamp(unix_us: int) -> str:
    """The time in a file's name, UTC to the microsecond (20260126T093005123456), from one clock reading:
    the names sort in the order of the times."""
    seconds, micros = divmod(unix_us, 1_000_000)
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(seconds)) + f"{micros:06d}"


def stamp_of(path: Path) -> int:
    """The time in a recorder file's name (file_stamp's), in microseconds since the epoch; 0 if it has none."""
    text = path.name.rsplit("-", 1)[-1].removesuffix(".db")
    if len(text) != 21 or text[8] != "T" or not (text[:8] + text[9:]).isdigit():
        return 0
    try:
        seconds = calendar.timegm(time.strptime(text[:15], "%Y%m%dT%H%M%S"))
    except ValueError:
        return 0
    return seconds * 1_000_000 + int(text[15:])


def all_files(db_dir: str) -> list[Path]:
    """Every recorder database in ``db_dir`` (links left out), oldest first by name."""
    root = Path(db_dir)
    if not db_dir or not root.is_dir():
        return []
    return sorted((p for p in root.glob(f"{PREFIX}*.db") if not p.is_symlink() and not p.name.endswith("-live.db")),
                  key=lambda p: p.name.rsplit("-", 1)[-1])


def recorder_files(db_dir: str, worker: str) -> list[Path]:
    """This worker's database files, oldest first (the current one last)."""
    prefix = file_prefix(worker)
    return [p for p in all_files(db_dir) if p.name.startswith(prefix) and p.name[len(prefix):-3].isalnum()]


def merged_connection(paths: list[str]) -> sqlite3.Connection:
    """One connection over the newest MAX_ATTACHED of ``paths`` (read-only), tables as views."""
    conn = sqlite3.connect(":memory:", uri=True, check_same_thread=False)
    attached = []
    for i, path in enumerate(paths[-MAX_ATTACHED:]):
        name = f"db{i}"
        try:
            conn.execute(f"ATTACH DATABASE ? AS {name}", (f"file:{path}?mode=ro",))
            conn.execute(f"SELECT count(*) FROM {name}.events").fetchone()
        except sqlite3.DatabaseError:
            with contextlib.suppress(sqlite3.DatabaseError):
                conn.execute(f"DETACH DATABASE {name}")
            continue  # deleted meanwhile (retention), or not a recorder database
        attached.append(name)
    if not attached:
        conn.executescript(schema.DDL)
        return conn
    for table in TABLES:
        union = " UNION ALL ".join(f"SELECT * FROM {name}.{table}" for name in attached)
        conn.execute(f"CREATE TEMP VIEW {table} AS {union}")
    return conn
