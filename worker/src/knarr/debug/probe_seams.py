"""Where the message probe plugs into the real engine: the same processor, executor and hooks,
with outputs collected instead of delivered and every task's life written down.

- :class:`CollectingSinks` stands where the processor expects its ``SinkManager``: a payload is
  resolved to its configured sink exactly as in delivery (``resolve_sink``), then kept, not sent;
  a dead letter is kept, not written to the DLQ.
- :class:`ProbeExecutor` is the real ``TaskExecutor`` (timeouts, retries, ``on_error``,
  replacements) that also notes each task's outcome, attempts and wait for a slot.
- :class:`ProbeHandler` wraps the user's handler: every hook runs unchanged, and what it was given
  and returned (or raised) is noted, so the report can show each stage.
"""

from __future__ import annotations

import contextvars
import time
import traceback
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

from knarr.api.handler import BaseHandler
from knarr.api.messages import SourceMessage
from knarr.api.payloads import CollectResult
from knarr.api.tasks import ErrorAction, ExecutorError, ExecutorResult, ExecutorTask
from knarr.engine.execution import TaskExecutor
from knarr.engine.ledger import Outcome
from knarr.engine.scheduling import SlotScheduler
from knarr.sinks.delivery import Origin
from knarr.sinks.resolution import resolve_sink


# --- what is noted ------------------------------------------------------------------------------
@dataclass(slots=True)
class TaskTrace:
    """One task as the probe saw it run."""

    task: ExecutorTask
    queued_at: float
    slot_wait_seconds: float = 0.0
    attempts: list[dict[str, Any]] = field(default_factory=list)  # one per failed attempt (what on_error saw)
    outcome: Outcome | None = None  # None while it runs (or when the probe ran out of time)
    attempt: int = 1


@dataclass(slots=True)
class Collected:
    """A payload that would have gone to ``sink`` ("<type>.<name>"), and which hook returned it."""

    sink: str
    payload: Any
    stage: str


@dataclass(slots=True)
class Notes:
    """Everything the probe's seams noted while the message went through."""

    traces: list[TaskTrace] = field(default_factory=list)
    arranged: list[ExecutorTask] = field(default_factory=list)
    stages: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {"on_task_complete": [], "on_message_complete": [], "on_window_complete": []})
    errors: list[dict[str, Any]] = field(default_factory=list)
    collected: list[Collected] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    groups: list[Any] = field(default_factory=list)  # the MessageGroups on_message_complete was given
    origins: dict[int, str] = field(default_factory=dict)  # id(payload) -> the stage that returned it

    def hook_failed(self, stage: str, exc: BaseException, **where: Any) -> None:
        self.errors.append({"stage": stage, "error": f"{type(exc).__name__}: {exc}", **where, **_raised_at(exc)})


_KNARR_DIR = str(Path(__file__).resolve().parents[1])  # the knarr package: frames in it are not the user's
_current: contextvars.ContextVar[TaskTrace | None] = contextvars.ContextVar("knarr_probe_task", default=None)


# --- sinks: resolve as delivery does, keep instead of sending -----------------------------------
class CollectingSinks:
    """The processor's sink manager for a probe: nothing leaves the process."""

    def __init__(self, sink_names: dict[str, list[str]], notes: Notes) -> None:
        self._names = sink_names  # sink kind (a CollectResult's target) -> configured instance names
        self.notes = notes

    async def deliver(self, collect: CollectResult | None, origin: Origin) -> int:
        if collect is None or not collect.has_outputs:
            return 0
        count = 0
        for kind, payloads in collect.by_sink_type():
            for payload in payloads:
                # An unknown or ambiguous sink name raises SinkResolutionError, as in delivery.
                name = resolve_sink(kind, payload.sink, self._names.get(kind, ()))
                stage = self.notes.origins.get(id(payload), "")
                self.notes.collected.append(Collected(f"{kind}.{name}", payload, stage))
                count += 1
        return count

    async def dead_letter_messages(self, stage: str, reason: str, messages: list[SourceMessage],
                                   partition: int | None, task: ExecutorTask | None = None,
                                   error: ExecutorError | None = None) -> None:
        self.notes.dead_letters.append({
            "stage": stage, "reason": reason, "partition": partition, "offsets": [m.offset for m in messages],
            "task_id": task.task_id if task is not None else None,
        })


# --- tasks: the real executor, watched -------------------------------------------------------------
class ProbeScheduler(SlotScheduler):
    """The probe's own pool slots; the time a task waits for one is noted on its trace."""

    async def acquire(self, partition: int, priority: tuple = (), can_hold: bool = False) -> bool:
        started = time.monotonic()
        try:
            return await super().acquire(partition, priority, can_hold)
        finally:
            trace = _current.get()
            if trace is not None:
                trace.slot_wait_seconds += time.monotonic() - started


class ProbeExecutor(TaskExecutor):
    def __init__(self, handler: Any, scheduler: SlotScheduler, config: Any, notes: Notes) -> None:
        super().__init__(handler, scheduler, config)
        self.notes = notes

    def direct_start(self, task: ExecutorTask) -> None:
        """Every task takes an asyncio task of its own here (not direct.py's path): its trace follows it."""
        return None

    async def run(self, task: ExecutorTask, partition: int, attempt: int = 1, offset: int | None = None,
                  granted: bool = False, first: Any = None) -> tuple[Outcome, int]:
        trace = TaskTrace(task=task, queued_at=time.monotonic())
        self.notes.traces.append(trace)
        _current.set(trace)  # this run has an asyncio task of its own: the scheduler finds its trace
        outcome, trace.attempt = await super().run(task, partition, attempt, offset, granted=granted, first=first)
        trace.outcome = outcome
        return outcome, trace.attempt


# --- hooks: run the user's, note what they did ------------------------------------------------------
class ProbeHandler:
    """The user's handler with every hook the engine calls passed through and noted.

    Hooks not defined here (deserialize_message, message_label, task_priority, ...) are the
    user's own, reached through ``__getattr__``.
    """

    def __init__(self, handler: BaseHandler, notes: Notes) -> None:
        self._handler = handler
        self.notes = notes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handler, name)

    async def arrange(self, messages: list[SourceMessage], pending: Any) -> Any:
        try:
            tasks = await self._handler.arrange(messages, pending)
        except Exception as exc:
            self.notes.hook_failed("arrange", exc)
            raise
        if isinstance(tasks, list):
            self.notes.arranged += [t.model_copy() for t in tasks if isinstance(t, ExecutorTask)]
        return tasks

    async def on_task_complete(self, result: ExecutorResult) -> Any:
        return await self._stage("on_task_complete", {"task_id": result.task.task_id},
                                 self._handler.on_task_complete(result))

    async def on_message_complete(self, group: Any) -> Any:
        self.notes.groups.append(group)
        return await self._stage("on_message_complete", {"offset": group.source_message.offset},
                                 self._handler.on_message_complete(group))

    async def on_window_complete(self, results: list[ExecutorResult], source_messages: list[SourceMessage]) -> Any:
        return await self._stage("on_window_complete", {"results": len(results)},
                                 self._handler.on_window_complete(results, source_messages))

    async def on_error(self, task: ExecutorTask, error: ExecutorError) -> Any:
        trace = _current.get()
        attempt = {"attempt": error.attempt, "reason": error.reason, "exit_code": error.exit_code,
                   "stderr": error.stderr, "decision": None}
        if trace is not None:
            trace.attempts.append(attempt)
        try:
            decision = await self._handler.on_error(task, error)
        except Exception as exc:
            self.notes.hook_failed("on_error", exc, task_id=task.task_id)
            attempt["decision"] = "skip (on_error raised)"
            raise
        attempt["decision"] = _decision_text(decision)
        return decision

    async def _stage(self, stage: str, where: dict[str, Any], call: Any) -> Any:
        entry: dict[str, Any] = {**where, "outputs": {}, "error": None}
        self.notes.stages[stage].append(entry)
        try:
            returned = await call
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
            self.notes.hook_failed(stage, exc, **where)
            raise
        if isinstance(returned, CollectResult):
            for kind, payloads in returned.by_sink_type():
                for payload in payloads:
                    self.notes.origins[id(payload)] = stage
                if payloads:
                    entry["outputs"][kind] = len(payloads)
        elif returned is not None:
            entry["error"] = f"returned {type(returned).__name__}; hooks must return CollectResult or None"
        return returned


def _decision_text(decision: Any) -> str:
    if isinstance(decision, ErrorAction):
        return decision.value
    if isinstance(decision, list):
        ids = [t.task_id for t in decision if isinstance(t, ExecutorTask)]
        return f"replaced by {', '.join(ids)}" if ids else "replaced by nothing"
    return repr(decision)[:200]


def _raised_at(exc: BaseException) -> dict[str, str]:
    """Where in the user's code an exception was raised (the innermost frame outside knarr)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_KNARR_DIR)]
    own = [f for f in frames if "-packages/" not in f.filename]  # not a library the handler called into
    if not (own or frames):
        return {}
    frame = (own or frames)[-1]
    return {"where": f"{frame.filename}:{frame.lineno}" + (f": {frame.line}" if frame.line else "")}
