"""The SQLite tier: ``<db_dir>/<worker>-cache.db``, one table of JSON values with their expiry.

Synchronous on purpose: the handler cache calls it from one thread of its own, so the event
loop never waits on the disk and the connection is never used by two threads at once.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    expires_at REAL,
    updated_at REAL NOT NULL
)
"""

# (key, JSON text or None for a delete, expires_at)
Change = tuple[str, str | None, float | None]


def db_path(db_dir: str, worker_name: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in worker_name) or "knarr"
    return Path(db_dir) / f"{safe}-cache.db"


class SqliteStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(SCHEMA)
        self._db = db

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError(f"the cache database {self.path} is not open")
        return self._db

    def read(self, key: str, now: float) -> tuple[str, float | None] | None:
        row = self.db.execute(
            "SELECT value, expires_at FROM entries WHERE key = ? AND (expires_at IS NULL OR expires_at > ?)",
            (key, now),
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def recent(self, limit: int, now: float) -> list[tuple[str, str, float | None]]:
        """The ``limit`` most recently written live entries, oldest first."""
        rows = self.db.execute(
            "SELECT key, value, expires_at FROM entries WHERE expires_at IS NULL OR expires_at > ? "
            "ORDER BY updated_at DESC LIMIT ?", (now, limit),
        ).fetchall()
        return list(reversed(rows))

    def write(self, changes: list[Change], now: float) -> int:
        """Apply ``changes`` in one transaction and drop expired rows; returns how many expired rows went."""
        db = self.db
        db.execute("BEGIN")
        try:
            db.executemany(
                "INSERT INTO entries (key, value, expires_at, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at, "
                "updated_at = excluded.updated_at",
                [(key, text, expires, now) for key, text, expires in changes if text is not None],
            )
            db.executemany("DELETE FROM entries WHERE key = ?", [(key,) for key, text, _ in changes if text is None])
            purged = db.execute("DELETE FROM entries WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,)).rowcount
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return purged

    def count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]

    def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()
