"""The probe's report, built from what its seams noted: plain data, ready for JSON (no I/O here).

Its shape is the debug API's (``POST /api/probe``): the message, what ``arrange`` returned, the
task tree (a replacement is a child of the task it replaced), the MessageGroup's counts, the
would-be deliveries per sink, what each output hook did, the would-be dead letters, and errors.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from knarr.api.messages import SourceMessage
from knarr.api.tasks import ExecutorError, ExecutorResult, ExecutorTask
from knarr.debug.probe_seams import Collected, Notes, TaskTrace
from knarr.engine.ledger import Failed, Replaced, Succeeded


def build_report(message: SourceMessage | None, headers: dict[str, Any], notes: Notes, duration_seconds: float) -> dict[str, Any]:
    group = notes.groups[-1] if notes.groups else None
    tree = task_tree(notes.traces, group)
    return {
        "message": None if message is None else message_view(message, headers),
        "arranged": [task_view(t) for t in notes.arranged],
        "tasks": tree,
        "group": group_counts(group, tree),
        "would_deliver": would_deliver(notes.collected),
        "dead_letters": list(notes.dead_letters),
        "stages": {stage: list(entries) for stage, entries in notes.stages.items()},
        "errors": list(notes.errors),
        "duration_ms": round(duration_seconds * 1000, 3),
    }


# --- the message and its tasks --------------------------------------------------------------------
def message_view(msg: SourceMessage, headers: dict[str, Any]) -> dict[str, Any]:
    payload = msg.payload.model_dump(mode="json") if isinstance(msg.payload, BaseModel) else jsonable(msg.payload)
    return {
        "topic": msg.topic, "partition": msg.partition, "offset": msg.offset,
        "key": text(msg.key), "value": text(msg.value), "headers": headers,
        "payload": payload, "parse_error": msg.parse_error,
    }


def task_view(task: ExecutorTask) -> dict[str, Any]:
    """A task as arrange() (or on_error) made it; never its env or stdin, which may hold secrets."""
    return {
        "task_id": task.task_id, "parent_task_id": task.parent_task_id, "args": list(task.args),
        "binary_path": task.binary_path, "source_offsets": list(task.source_offsets), "labels": dict(task.labels),
        "metadata": jsonable(task.metadata), "precomputed": task.precomputed is not None,
    }


def task_tree(traces: list[TaskTrace], group: Any) -> list[dict[str, Any]]:
    """Every task that ran, as a forest: roots are the tasks arrange() returned."""
    nodes = [task_node(trace, group) for trace in traces]
    by_id: dict[str, dict[str, Any]] = {}
    for node in nodes:
        by_id.setdefault(node["task_id"], node)
    roots = []
    for node in nodes:
        parent = by_id.get(node["parent_task_id"] or "")
        if parent is None or parent is node:
            roots.append(node)
        else:
            parent["children"].append(node)
    return roots


def task_node(trace: TaskTrace, group: Any) -> dict[str, Any]:
    task = trace.task
    node: dict[str, Any] = {
        "task_id": task.task_id, "parent_task_id": task.parent_task_id, "args": list(task.args),
        "status": "unfinished", "exit_code": None, "attempt": trace.attempt, "duration_ms": None,
        "slot_wait_ms": round(trace.slot_wait_seconds * 1000, 3), "stdout": "", "stderr": "", "reason": None,
        "error": None, "attempts": list(trace.attempts), "children": [],
    }
    status, result, error = _final(trace, group)
    node["status"] = status
    if error is not None:
        node.update(exit_code=error.exit_code, stderr=error.stderr, reason=error.reason, error=error.exception)
        result = error.result
    if result is not None:
        node.update(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr,
                    duration_ms=round(result.duration_seconds * 1000, 3))
    return node


def _final(trace: TaskTrace, group: Any) -> tuple[str, ExecutorResult | None, ExecutorError | None]:
    """How the task ended, as the MessageGroup has it when there is one (on_task_complete may have
    turned a success into a failure), else as the executor returned it."""
    if group is not None:
        for result in group.results:
            if result.task is trace.task:
                return "succeeded", result, None
        for error in group.errors:
            if error.task is trace.task:
                return "failed", None, error
    outcome = trace.outcome
    if isinstance(outcome, Replaced):
        return "replaced", None, outcome.error
    if isinstance(outcome, Failed):
        return "failed", None, outcome.error
    if isinstance(outcome, Succeeded):
        return "succeeded", outcome.result, None
    return "unfinished", None, None


def group_counts(group: Any, tree: list[dict[str, Any]]) -> dict[str, Any]:
    """The MessageGroup's counts as on_message_complete saw them; without one (the message never got
    there), counted from the task tree, and ``closed`` says so."""
    if group is not None:
        return {"total": group.total, "succeeded": group.succeeded, "failed": group.failed,
                "replaced": group.replaced, "closed": True}
    counts = {"total": 0, "succeeded": 0, "failed": 0, "replaced": 0}
    for node in walk(tree):
        counts["total"] += 1
        if node["status"] in counts:
            counts[node["status"]] += 1
    return {**counts, "closed": False}


def walk(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every node of the forest, depth first."""
    out = []
    for node in nodes:
        out.append(node)
        out += walk(node["children"])
    return out


# --- outputs --------------------------------------------------------------------------------------
def would_deliver(collected: list[Collected]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for item in collected:
        out.setdefault(item.sink, []).append(payload_view(item.payload, item.stage))
    return out


def payload_view(payload: Any, stage: str) -> dict[str, Any]:
    """A payload as its sink would get it: its data and its other fields (key, table, path, ...)."""
    view: dict[str, Any] = {"stage": stage}
    for name in type(payload).model_fields:
        if name != "data":
            view[name] = jsonable(getattr(payload, name))
    view["data"] = jsonable(payload.data_dict())
    return view


def text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", errors="replace")


def jsonable(value: Any) -> Any:
    """Anything a handler put in a payload, as JSON data (bytes as text, models dumped, the rest str())."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return json.loads(json.dumps(value, default=_plain))


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)
