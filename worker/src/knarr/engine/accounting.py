"""Window and message-group accounting: which tasks a message waits for, and when it is done.

No I/O here. The processor calls these as tasks are arranged, replaced and settled; they
answer which message groups (and whether the window) just became complete.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from knarr.api.groups import MessageGroup
from knarr.api.messages import SourceMessage
from knarr.api.tasks import ExecutorError, ExecutorResult, ExecutorTask

_window_ids = itertools.count(1)


@dataclass(eq=False, slots=True)
class MessageTracker:
    """One source message's group while its tasks run."""

    message: SourceMessage
    tasks: list[ExecutorTask] = field(default_factory=list)
    results: list[ExecutorResult] = field(default_factory=list)
    errors: list[ExecutorError] = field(default_factory=list)
    remaining: int = 0
    started_at: float = 0.0
    finished_at: float = 0.0
    fired: bool = False

    def group(self) -> MessageGroup:
        return MessageGroup.model_construct(
            source_message=self.message,
            tasks=list(self.tasks),
            results=list(self.results),
            errors=list(self.errors),
            started_at=self.started_at,
            finished_at=self.finished_at,
        )


@dataclass(eq=False, slots=True)
class TaskRun:
    """A scheduled task with the groups it reports to. Attempts count from 1."""

    task: ExecutorTask
    window: Window
    trackers: list[MessageTracker]
    attempt: int = 1
    replaced: bool = False


@dataclass(eq=False)
class Window:
    """One arrange() call's messages and every task scheduled for them (replacements included)."""

    partition: int
    messages: list[SourceMessage]
    id: int = field(default_factory=lambda: next(_window_ids))
    created_at: float = field(default_factory=time.monotonic)
    trackers: dict[int, MessageTracker] = field(default_factory=dict)
    total: int = 0  # tasks scheduled, replacements included (a count, not the runs: see schedule())
    results: list[ExecutorResult] = field(default_factory=list)
    settled: int = 0
    open_groups: int = 0
    untracked_offsets: int = 0
    arranged: bool = False
    completed: bool = False

    def __post_init__(self) -> None:
        now = time.monotonic()
        for msg in self.messages:
            self.trackers[msg.offset] = MessageTracker(message=msg, started_at=now)
        self.open_groups = len(self.trackers)

    def schedule(self, tasks: list[ExecutorTask], parent: TaskRun | None = None) -> list[TaskRun]:
        """Register tasks with all their groups before any of them may start.

        Pre-registration is what stops a fast task from completing a group early: every
        group's ``remaining`` already counts every task of the batch. Offsets that are not
        messages of this window are ignored (and counted in ``untracked_offsets``).
        """
        runs = []
        for task in tasks:
            if parent is not None and task.parent_task_id is None:
                task.parent_task_id = parent.task.task_id
            trackers = []
            seen: set[int] = set()
            for offset in task.source_offsets:
                if offset in seen:
                    continue
                seen.add(offset)
                tracker = self.trackers.get(offset)
                if tracker is None or tracker.fired:
                    self.untracked_offsets += 1
                    continue
                tracker.tasks.append(task)
                tracker.remaining += 1
                trackers.append(tracker)
            # The window does not keep its runs: run -> window -> run would be a reference cycle,
            # and every window (with its messages, tasks and results) would wait for the cyclic
            # GC. Those full collections cost about 18 us of worker CPU per task.
            runs.append(TaskRun(task=task, window=self, trackers=trackers))
            self.total += 1
        return runs

    def groups_without_tasks(self) -> list[MessageTracker]:
        """After arrange(): messages no task works for. Their groups are empty and complete now."""
        return [t for t in self.trackers.values() if t.remaining == 0 and not t.fired]

    def succeed(self, run: TaskRun, result: ExecutorResult) -> list[MessageTracker]:
        for tracker in run.trackers:
            tracker.results.append(result)
        self.results.append(result)
        return self._settle(run)

    def fail(self, run: TaskRun, error: ExecutorError) -> list[MessageTracker]:
        for tracker in run.trackers:
            tracker.errors.append(error)
        if error.result is not None:
            self.results.append(error.result)
        return self._settle(run)

    def replace(self, run: TaskRun, replacements: list[ExecutorTask]) -> tuple[list[TaskRun], list[MessageTracker]]:
        """The run is replaced: schedule successors first (so no group hits zero in between)."""
        runs = self.schedule(replacements, parent=run)
        run.replaced = True
        return runs, self._settle(run)

    def _settle(self, run: TaskRun) -> list[MessageTracker]:
        self.settled += 1
        done = []
        now = time.monotonic()
        for tracker in run.trackers:
            tracker.remaining -= 1
            if tracker.remaining == 0 and not tracker.fired:
                tracker.fired = True
                tracker.finished_at = now
                done.append(tracker)
        return done

    def mark_fired(self, trackers: list[MessageTracker]) -> None:
        now = time.monotonic()
        for tracker in trackers:
            tracker.fired = True
            tracker.finished_at = now

    def group_closed(self) -> None:
        """A group's hook ran and its deliveries settled."""
        self.open_groups -= 1

    @property
    def is_complete(self) -> bool:
        return self.arranged and self.settled == self.total and self.open_groups == 0 and not self.completed
