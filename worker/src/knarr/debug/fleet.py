"""The fleet: the workers of one consumer group, found through the worker_config rows of the
recorder databases in ``db_dir`` (a volume the workers share), read as one database.

Each worker writes its own files; a file's ``worker_config`` row says whose it is, which
consumer group and cluster it serves and where its debug UI is. The merged view attaches the
newest file of every worker of this worker's group (and cluster) read-only, so the same
queries as for one worker answer for all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path
from typing import Any, Callable

from knarr.debug import queries
from knarr.debug.files import MAX_ATTACHED, all_files, merged_connection


def group_files(db_dir: str, consumer_group: str, cluster: str) -> dict[str, list[Path]]:
    """Every worker of the group whose files are in ``db_dir``: worker -> its files, oldest first."""
    found: dict[str, list[Path]] = {}
    for path in all_files(db_dir):
        owner = _owner(path)
        if owner is None:
            continue
        worker, group, owner_cluster = owner
        if group == consumer_group and (owner_cluster or "") == (cluster or ""):
            found.setdefault(worker, []).append(path)
    return found


def _owner(path: Path) -> tuple[str, str, str] | None:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            row = conn.execute("SELECT worker, consumer_group, cluster FROM worker_config "
                               "ORDER BY updated_at DESC LIMIT 1").fetchone()
    except sqlite3.DatabaseError:
        return None  # being written for the first time, deleted meanwhile, or not a recorder file
    return tuple(row) if row else None  # type: ignore[return-value]


def fleet_paths(db_dir: str, consumer_group: str, cluster: str) -> list[str]:
    """The files to merge: the newest of each worker first, then older ones while SQLite can attach more."""
    per_worker = group_files(db_dir, consumer_group, cluster)
    newest = [files[-1] for files in per_worker.values()]
    older = sorted((p for files in per_worker.values() for p in files[:-1]), key=lambda p: p.name.rsplit("-", 1)[-1])
    room = max(0, MAX_ATTACHED - len(newest))
    return [str(p) for p in (older[-room:] if room else []) + newest]


async def read(recorder: Any, query: Callable[..., Any], *args: Any) -> Any:
    """``query(conn, *args)`` over the merged databases of the fleet (this worker's alone without a db_dir)."""
    db_dir = recorder.config.db_dir
    if not db_dir:
        return await recorder.read(query, *args)
    paths = fleet_paths(db_dir, recorder.consumer_group, recorder.cluster)

    def run() -> Any:
        with contextlib.closing(merged_connection(paths)) as conn:
            return query(conn, *args)

    return await asyncio.to_thread(run)


async def describe(recorder: Any, own_state: dict[str, Any]) -> dict[str, Any]:
    """Who is in the fleet, each worker's debug URL and latest state; how many events the merge holds."""
    def both(conn: sqlite3.Connection) -> tuple[list[dict[str, Any]], int]:
        return queries.workers(conn, recorder.consumer_group), queries.count_events(conn)

    workers, count = await read(recorder, both)
    rows = []
    for worker in workers:
        state = own_state if worker["worker"] == recorder.worker else worker["state"]
        rows.append({"worker": worker["worker"], "debug_url": worker["debug_url"], "updated_at": worker["updated_at"],
                     "state": state, "self": worker["worker"] == recorder.worker})
    if not any(r["self"] for r in rows):
        rows.append({"worker": recorder.worker, "debug_url": recorder.debug_url, "updated_at": None,
                     "state": own_state, "self": True})
    return {"workers": rows, "merged": {"events": count, "workers": len(rows)}}
