"""What the debug API asks of a recorder database. Pure functions over a sqlite3 connection.

Every query is bounded by ``limit`` (``debug.max_ui_rows``) and says when it was cut
(``truncated``). Messages are named by (partition, offset); an event about several messages
(a fan-in task, a window's delivery) lists them in ``data.offsets``.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from knarr.debug.schema import EVENT_COLUMNS, event_object

_SELECT = 'SELECT id, ts, worker, kind, partition, "offset", task_id, parent_task_id, duration_ms, data FROM events'
# The message at ? is the event's own offset, or one of its data.offsets.
_ABOUT_OFFSET = ('("offset" = ? OR (json_type(data, \'$.offsets\') = \'array\' AND EXISTS '
                 "(SELECT 1 FROM json_each(data, '$.offsets') WHERE value = ?)))")
FILTERS = ("kind", "partition", "task_id", "offset", "since_id", "worker")


def events(conn: sqlite3.Connection, filters: dict[str, Any], limit: int) -> dict[str, Any]:
    """Events matching the filters, newest first. ``kind`` may list several, comma-separated."""
    where, args = [], []
    if filters.get("kind"):
        kinds = [k.strip() for k in str(filters["kind"]).split(",") if k.strip()]
        where.append(f"kind IN ({','.join('?' * len(kinds))})")
        args += kinds
    if filters.get("partition") is not None:
        where.append("partition = ?")
        args.append(int(filters["partition"]))
    if filters.get("task_id"):
        where.append("(task_id = ? OR parent_task_id = ?)")
        args += [filters["task_id"], filters["task_id"]]
    if filters.get("offset") is not None:
        where.append(_ABOUT_OFFSET)
        args += [int(filters["offset"])] * 2
    if filters.get("since_id") is not None:
        where.append("id > ?")
        args.append(int(filters["since_id"]))
    if filters.get("worker"):
        where.append("worker = ?")
        args.append(filters["worker"])
    return _page(conn, _SELECT + _where(where) + " ORDER BY ts DESC, id DESC", args, limit, "events")


def trace(conn: sqlite3.Connection, partition: int, offset: int, limit: int) -> dict[str, Any]:
    """One message's story: its consumption, its group and every task of it (replacements as a tree),
    its deliveries and dead letters, and the commit that covered it."""
    about = [event_object(r) for r in conn.execute(
        _SELECT + f" WHERE partition = ? AND {_ABOUT_OFFSET} ORDER BY id LIMIT ?", (partition, offset, offset, limit))]
    consumed = [e for e in about if e["kind"] == "consumed"]
    closed = [e for e in about if e["kind"] == "message_complete"]
    queued = {e["task_id"]: e["offset"] for e in about if e["kind"] == "task_queued" and e["task_id"]}
    tasks = _task_nodes(conn, partition, queued, limit)
    group = None
    if closed:
        data = closed[-1]["data"]
        group = {"total": data.get("total"), "succeeded": data.get("succeeded"), "failed": data.get("failed"),
                 "replaced": data.get("replaced"), "closed_at": closed[-1]["ts"]}
    committed = conn.execute(
        'SELECT ts, "offset" FROM events WHERE kind = \'committed\' AND partition = ? AND "offset" > ? ORDER BY id LIMIT 1',
        (partition, offset)).fetchone()
    return {
        "partition": partition, "offset": offset,
        "consumed_at": consumed[0]["ts"] if consumed else None,
        "group": group,
        "tasks": tasks,
        "deliveries": [e for e in about if e["kind"] == "delivered"],
        "dead_letters": [e for e in about if e["kind"] == "dead_lettered"],
        "committed": {"ts": committed[0], "offset": committed[1]} if committed else None,
        "events": about,
    }


def _task_nodes(conn: sqlite3.Connection, partition: int, queued: dict[str, int | None],
                limit: int) -> list[dict[str, Any]]:
    """The tasks ``queued`` names (task id -> the offset its events are filed under), as trees of replacements.

    A task's events carry the offset of the first message it works for, so the (partition,
    offset) index finds them; task ids themselves are not indexed (hashes as ids, like
    make_stable_task_id's, made that index cost more than the rest of a row). Files written
    before task events carried an offset have it NULL there.
    """
    if not queued:
        return []
    task_ids = list(queued)
    nodes: dict[str, dict[str, Any]] = {}
    for i in range(0, len(task_ids), 400):  # SQLite's bound on parameters per statement
        chunk = task_ids[i:i + 400]
        offsets = sorted({o for o in (queued[t] for t in chunk) if o is not None})
        rows = conn.execute(
            _SELECT + f' WHERE ((partition = ? AND "offset" IN ({",".join("?" * len(offsets))})) OR (partition = ? '
            f'AND "offset" IS NULL)) AND task_id IN ({",".join("?" * len(chunk))}) ORDER BY id',  # two index searches
            (partition, *offsets, partition, *chunk))
        for row in rows:
            _apply(nodes, event_object(row))
    ordered = [nodes[t] for t in task_ids if t in nodes][:limit]
    by_id = {n["task_id"]: n for n in ordered}
    roots = []
    for node in ordered:
        parent = by_id.get(node["parent_task_id"] or "")
        (parent["children"] if parent is not None else roots).append(node)
    return roots


def _apply(nodes: dict[str, dict[str, Any]], event: dict[str, Any]) -> None:
    """Fold one task event into its node: the latest attempt's figures win."""
    data = event["data"]
    node = nodes.get(event["task_id"])
    if node is None:
        node = nodes[event["task_id"]] = {
            "task_id": event["task_id"], "parent_task_id": event["parent_task_id"], "args": None, "status": "queued",
            "exit_code": None, "attempt": None, "duration_ms": None, "slot_wait_ms": None, "stdout": None,
            "stderr": None, "reason": None, "offsets": [], "children": [],
        }
    kind = event["kind"]
    if kind == "task_queued":
        node["args"] = data.get("args")
        node["offsets"] = data.get("offsets", [])
        node["parent_task_id"] = node["parent_task_id"] or event["parent_task_id"]
    elif kind == "task_started":
        node.update(status="running", slot_wait_ms=data.get("slot_wait_ms"), slot=data.get("slot"),
                    attempt=data.get("attempt", node["attempt"]))
    elif kind in ("task_finished", "task_failed"):
        node.update(status="succeeded" if kind == "task_finished" else "failed", exit_code=data.get("exit_code"),
                    attempt=data.get("attempt"), duration_ms=event["duration_ms"], stdout=data.get("stdout"),
                    stderr=data.get("stderr"), reason=data.get("reason"), pid=data.get("pid"))
        if data.get("args") is not None:
            node["args"] = data["args"]
    elif kind == "task_replaced":
        node.update(status="replaced", replacements=data.get("replacements", []))


def slow_tasks(conn: sqlite3.Connection, min_ms: float, limit: int) -> dict[str, Any]:
    return _page(conn, _SELECT + " WHERE kind IN ('task_finished', 'task_failed') AND duration_ms >= ? "
                 "ORDER BY duration_ms DESC, id DESC", [min_ms], limit, "tasks")


def failed_tasks(conn: sqlite3.Connection, limit: int) -> dict[str, Any]:
    return _page(conn, _SELECT + " WHERE kind = 'task_failed' ORDER BY ts DESC, id DESC", [], limit, "tasks")


def dead_letters(conn: sqlite3.Connection, limit: int) -> dict[str, Any]:
    return _page(conn, _SELECT + " WHERE kind = 'dead_lettered' ORDER BY ts DESC, id DESC", [], limit, "dead_letters")


def count_events(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT count(*) FROM events").fetchone()[0]


def workers(conn: sqlite3.Connection, consumer_group: str | None = None) -> list[dict[str, Any]]:
    """The workers that wrote these databases (the newest row of each), with their latest state."""
    rows = conn.execute("SELECT worker, cluster, consumer_group, debug_url, db_path, config, max(updated_at) "
                        "FROM worker_config GROUP BY worker ORDER BY worker").fetchall()
    out = []
    for worker, cluster, group, url, db_path, config, updated in rows:
        if consumer_group is not None and group != consumer_group:
            continue
        state = conn.execute("SELECT state FROM worker_state WHERE worker = ? ORDER BY ts DESC LIMIT 1",
                             (worker,)).fetchone()
        out.append({"worker": worker, "cluster": cluster, "consumer_group": group, "debug_url": url,
                    "db_path": db_path, "updated_at": updated, "config": json.loads(config or "{}"),
                    "state": json.loads(state[0]) if state else None})
    return out


def _where(clauses: list[str]) -> str:
    return (" WHERE " + " AND ".join(clauses)) if clauses else ""


def _page(conn: sqlite3.Connection, sql: str, args: list[Any], limit: int, key: str) -> dict[str, Any]:
    rows = conn.execute(sql + " LIMIT ?", (*args, limit + 1)).fetchall()
    return {key: [event_object(r) for r in rows[:limit]], "truncated": len(rows) > limit}


__all__ = ["EVENT_COLUMNS", "FILTERS", "count_events", "dead_letters", "events", "failed_tasks", "slow_tasks",
           "trace", "workers"]
