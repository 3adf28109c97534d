"""The ledger of one partition: every state change in a message's life, and nothing else.

No I/O and no awaiting. The partition processor (the shell around it) reports what
happened, and each report returns the effects to carry out next:

    take(messages)                    a window is formed; its offsets join the watermark
    arranged(window, tasks[, part])   -> RunTask per task, CloseGroup per message without tasks
    arrange_failed(window, reason[, part]) -> DeadLetter of those messages
    settle(run, outcome)              -> RunTask per replacement, DeadLetter for a task failed
                                         for good (by policy), CloseGroup per group now complete
    group_closed(group)               -> the offset completes; FinishWindow once all have
    dead_lettered(letter)             -> what the dead letter was holding up goes on

A message's group is *open* while tasks work for it, *closing* while its hook and deliveries
run, and *closed* once its offset is complete. Tasks are registered with every group they
work for before any of them may start (pre-registration), and a replacement is registered
before the task it replaces settles, so no group can be seen complete while work for it is
still to come. Invariants (tests/unit/test_ledger.py checks them under random interleavings):
every group closes exactly once with ``total == succeeded + failed + replaced``; no offset
completes before every task working for it has settled and its group has closed; the
watermark never passes an offset that has not completed.
"""

from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field

from knarr.api.groups import MessageGroup, PendingContext
from knarr.api.messages import SourceMessage
from knarr.api.tasks import ExecutorError, ExecutorResult, ExecutorTask
from knarr.api.trusted import trusted
from knarr.engine.watermark import OffsetWatermark

_window_ids = itertools.count(1)
_run_ids = itertools.count(1)


# --- outcomes: how a task's life ended, as the executor classified it -------------------------
@dataclass(slots=True)
class Succeeded:
    result: ExecutorResult


@dataclass(slots=True)
class Failed:
    error: ExecutorError
    retries_exhausted: bool = False  # on_error asked for RETRY and no attempt was left


@dataclass(slots=True)
class Replaced:
    error: ExecutorError
    tasks: list[ExecutorTask]


Outcome = Succeeded | Failed | Replaced


# --- state --------------------------------------------------------------------------------------
class GroupState(enum.Enum):
    OPEN = "open"  # tasks still work for the message
    CLOSING = "closing"  # every task settled; its hook and deliveries are running
    CLOSED = "closed"  # the offset is complete


MESSAGE_OUTCOMES = ("empty", "succeeded", "failed", "partial")  # what Group.outcome() says


@dataclass(eq=False, slots=True)
class Group:
    """One source message and every task derived from it (replaced ones included)."""

    message: SourceMessage
    window: Window
    offset: int  # the message's (read for every task and event: a field, not a property's call)
    tasks: list[ExecutorTask] = field(default_factory=list)
    results: list[ExecutorResult] = field(default_factory=list)
    errors: list[ExecutorError] = field(default_factory=list)
    open_tasks: int = 0
    state: GroupState = GroupState.OPEN
    started_at: float = 0.0
    finished_at: float = 0.0

    def outcome(self) -> str:
        """What became of the message, as knarr_messages_completed_total counts it (the same as its view says)."""
        if not self.tasks:
            return "empty"
        if not self.errors:
            return "succeeded"
        return "failed" if not self.results else "partial"

    def counts(self) -> dict[str, int]:
        """Its tasks by what became of them, as its MessageGroup counts them (replaced: neither result nor error)."""
        total, succeeded, failed = len(self.tasks), len(self.results), len(self.errors)
        return {"task_count": total, "total": total, "succeeded": succeeded, "failed": failed,
                "replaced": total - succeeded - failed}

    def view(self) -> MessageGroup:
        """The group as the handler's on_message_complete sees it."""
        return trusted(
            MessageGroup, source_message=self.message, tasks=list(self.tasks), results=list(self.results),
            errors=list(self.errors), started_at=self.started_at, finished_at=self.finished_at,
        )


@dataclass(eq=False, slots=True)
class Run:
    """A task in flight: scheduled, waiting for a slot, running or retrying. Attempts count from 1."""

    task: ExecutorTask
    window: Window
    groups: list[Group]
    id: int = field(default_factory=_run_ids.__next__)
    attempt: int = 1
    part: set[int] | None = None  # the offsets its arrange() call answered for, when the window was split
    delivering: bool = False  # its outputs are with the sinks, awaiting their confirmation

    @property
    def first_offset(self) -> int | None:
        """The first message this task works for: where the flight recorder files the task's events."""
        return self.groups[0].offset if self.groups else None


@dataclass(eq=False)
class Window:
    """One arrange() call's messages, and the count of its runs still in flight."""

    partition: int
    messages: list[SourceMessage]
    id: int = field(default_factory=_window_ids.__next__)
    created_at: float = field(default_factory=time.monotonic)
    groups: dict[int, Group] = field(default_factory=dict)
    results: list[ExecutorResult] = field(default_factory=list)
    tasks: int = 0  # runs scheduled, replacements included
    open_runs: int = 0
    open_groups: int = 0
    unarranged: set[int] = field(default_factory=set)  # offsets arrange() has not answered for yet
    finished: bool = False

    @property
    def offsets(self) -> list[int]:
        return [m.offset for m in self.messages]

    @property
    def arranged(self) -> bool:
        return not self.unarranged


# --- effects: what the shell carries out ----------------------------------------------------------
@dataclass(slots=True)
class RunTask:
    run: Run


@dataclass(slots=True)
class CloseGroup:
    """Call on_message_complete with the group and deliver what it returns, then report group_closed."""

    group: Group


@dataclass(slots=True)
class FinishWindow:
    """Every group of the window is closed: call on_window_complete and deliver what it returns."""

    window: Window


@dataclass(slots=True)
class DeadLetter:
    """Send these messages to the DLQ with the reason, then report dead_lettered(letter).

    ``holds`` says what waits for it: the groups to close afterwards (their offsets complete
    only once the dead letter is safely written).
    """

    stage: str  # arrange | task | on_message_complete | on_window_complete | ...
    reason: str
    messages: list[SourceMessage]
    holds: list[Group] = field(default_factory=list)
    task: ExecutorTask | None = None
    error: ExecutorError | None = None  # the task's last failure, for stage "task"


Effect = RunTask | CloseGroup | FinishWindow | DeadLetter


class ArrangeRefused(ValueError):
    """arrange() returned something the engine will not run (wrong type, too many tasks)."""


class Ledger:
    """The accounting of one partition's windows, groups, in-flight runs and watermark."""

    def __init__(self, partition: int, *, max_tasks_per_window: int = 10_000,
                 dead_letter_exhausted: bool = True) -> None:
        self.partition = partition
        self.max_tasks_per_window = max_tasks_per_window
        self.dead_letter_exhausted = dead_letter_exhausted
        self.watermark = OffsetWatermark()
        self.runs: dict[int, Run] = {}
        self.delivering = 0  # of the runs, those whose outputs await the sinks' confirmation
        self.windows: set[Window] = set()
        self.untracked_offsets = 0  # source_offsets naming no open message of the window (ignored)

    # --- queries ----------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """Runs not yet settled (waiting for a slot, running, between retries, or delivering)."""
        return len(self.runs)

    @property
    def working(self) -> int:
        """Runs in flight whose outputs are not with the sinks yet: backpressure's load counts them."""
        return len(self.runs) - self.delivering

    @property
    def settled(self) -> bool:
        """Nothing open: every window taken is finished."""
        return not self.windows

    def pending_context(self) -> PendingContext:
        tasks = [run.task for run in self.runs.values()]
        return PendingContext.model_construct(pending_tasks=tasks, pending_task_ids={t.task_id for t in tasks})

    # --- events -----------------------------------------------------------------------------------
    def take(self, messages: list[SourceMessage]) -> Window:
        """A window of messages is about to go to arrange(): their offsets join the watermark."""
        window = Window(self.partition, messages)
        now = time.monotonic()
        for msg in messages:
            self.watermark.register(msg.offset)
            window.groups[msg.offset] = Group(message=msg, window=window, offset=msg.offset, started_at=now)
        window.open_groups = len(window.groups)
        window.unarranged = set(window.groups)
        self.windows.add(window)
        return window

    def check_arranged(self, tasks: object) -> list[ExecutorTask]:
        """What arrange() returned, as a task list; ArrangeRefused (with what to do) if it cannot run."""
        if tasks is None:
            return []
        if not isinstance(tasks, list) or not all(isinstance(t, ExecutorTask) for t in tasks):
            raise ArrangeRefused(f"arrange() must return list[ExecutorTask], got {_describe(tasks)}")
        if len(tasks) > self.max_tasks_per_window:
            raise ArrangeRefused(
                f"arrange() returned {len(tasks)} tasks for one window, more than "
                f"executor.max_tasks_per_window ({self.max_tasks_per_window}); split the work across "
                "messages or raise the limit"
            )
        return tasks

    def arranged(self, window: Window, tasks: list[ExecutorTask], part: list[SourceMessage] | None = None) -> list[Effect]:
        """arrange() returned ``tasks`` (checked) for ``part`` of the window (default: all of it not yet
        arranged): register every task with every group first, then run them.

        While a window is split (to find the messages arrange() fails on), each part is arranged on
        its own, and a task's offsets outside its part are ignored (counted as untracked).
        """
        offsets = window.unarranged if part is None else {m.offset for m in part}
        window.unarranged = window.unarranged - offsets
        runs = self._schedule(window, tasks, parent=None, within=None if part is None else offsets)
        effects: list[Effect] = [RunTask(run) for run in runs]
        effects += self._close_idle(window, offsets)
        return effects + self._finish_if_done(window)  # every message may have been set aside already

    def arrange_failed(self, window: Window, reason: str, part: list[SourceMessage] | None = None) -> list[Effect]:
        """arrange() raised or was refused for ``part`` of the window (default: all of it not yet arranged):
        those messages go to the DLQ, then their offsets complete."""
        offsets = window.unarranged if part is None else {m.offset for m in part}
        window.unarranged = window.unarranged - offsets
        groups = [window.groups[o] for o in sorted(offsets)]
        for group in groups:
            group.state = GroupState.CLOSING
            group.finished_at = time.monotonic()
        return [DeadLetter("arrange", reason, [g.message for g in groups], holds=groups)]

    def delivering_from(self, run: Run) -> None:
        """The run's outputs went to the sinks: until it settles it awaits their confirmation, counted apart
        from the work (backpressure bounds the two apart, engine/backpressure.py)."""
        if not run.delivering:
            run.delivering = True
            self.delivering += 1

    def settle(self, run: Run, outcome: Outcome) -> list[Effect]:
        """A run reached its terminal outcome (after on_task_complete and its deliveries, on success)."""
        if self.runs.pop(run.id, None) is None:
            raise KeyError(f"run {run.id} (task {run.task.task_id}) settled twice or was never scheduled")
        if run.delivering:
            run.delivering = False
            self.delivering -= 1
        window = run.window
        window.open_runs -= 1
        effects: list[Effect] = []
        if isinstance(outcome, Succeeded):
            for group in run.groups:
                group.results.append(outcome.result)
            window.results.append(outcome.result)
        elif isinstance(outcome, Failed):
            for group in run.groups:
                group.errors.append(outcome.error)
            if outcome.error.result is not None:
                window.results.append(outcome.error.result)
            if outcome.retries_exhausted and self.dead_letter_exhausted and run.groups:
                # Spec: a task that fails for good is dead-lettered (or discarded, by policy).
                # Its groups wait for the dead letter, so their offsets cannot complete first.
                letter = DeadLetter("task", f"retries exhausted after {outcome.error.attempt} attempt(s): "
                                    f"{_error_text(outcome.error)}", [g.message for g in run.groups],
                                    holds=[g for g in run.groups if g.state is GroupState.OPEN], task=run.task,
                                    error=outcome.error)
                for group in letter.holds:
                    group.open_tasks += 1  # held open by the letter, released in dead_lettered()
                effects.append(letter)
        else:
            # Successors are registered before the replaced run lets go of its groups.
            effects += [RunTask(r) for r in self._schedule(window, outcome.tasks, parent=run, within=run.part)]
        effects += self._release(run.groups)
        # A run that works for no open group (its offsets were all untracked) finishes nothing else.
        return effects + self._finish_if_done(window)

    def set_aside(self, window: Window, messages: list[SourceMessage], reason: str, dead_letter: bool) -> list[Effect]:
        """Messages that will not go to arrange() (they did not parse): dead-letter them, or complete them as they are."""
        groups = [window.groups[m.offset] for m in messages]
        window.unarranged = window.unarranged - {m.offset for m in messages}
        now = time.monotonic()
        for group in groups:
            group.state = GroupState.CLOSING
            group.finished_at = now
        if dead_letter:
            return [DeadLetter("parse", reason, list(messages), holds=groups)]
        effects: list[Effect] = []
        for group in groups:
            effects += self.group_closed(group)
        return effects

    def take_untracked(self) -> int:
        """How many task offsets named no open message of their window since the last call (they were ignored)."""
        count, self.untracked_offsets = self.untracked_offsets, 0
        return count

    def dead_lettered(self, letter: DeadLetter) -> list[Effect]:
        """The dead letter is written: the groups it was holding may go on."""
        if letter.stage == "task":
            return self._release(letter.holds)
        effects: list[Effect] = []
        for group in letter.holds:
            effects += self.group_closed(group)
        return effects

    def group_closed(self, group: Group) -> list[Effect]:
        """The group's hook ran and its deliveries settled: its offset is complete."""
        if group.state is GroupState.CLOSED:
            raise ValueError(f"group of offset {group.offset} closed twice")
        group.state = GroupState.CLOSED
        self.watermark.complete(group.offset)
        group.window.open_groups -= 1
        return self._finish_if_done(group.window)

    def forget(self) -> None:
        """The partition was revoked or stopped: drop everything still open (it will be replayed)."""
        self.runs.clear()
        self.windows.clear()
        self.delivering = 0

    # --- internals --------------------------------------------------------------------------------
    def _schedule(self, window: Window, tasks: list[ExecutorTask], parent: Run | None,
                  within: set[int] | None = None) -> list[Run]:
        runs = []
        for task in tasks:
            if parent is not None and task.parent_task_id is None:
                task.parent_task_id = parent.task.task_id
            groups: list[Group] = []
            for offset in dict.fromkeys(task.source_offsets):  # each offset once, in order
                group = window.groups.get(offset) if within is None or offset in within else None
                if group is None or group.state is not GroupState.OPEN:
                    self.untracked_offsets += 1
                    continue
                group.tasks.append(task)
                group.open_tasks += 1
                groups.append(group)
            run = Run(task=task, window=window, groups=groups, attempt=1, part=within)
            self.runs[run.id] = run
            window.tasks += 1
            window.open_runs += 1
            runs.append(run)
        return runs

    def _release(self, groups: list[Group]) -> list[Effect]:
        effects: list[Effect] = []
        now = time.monotonic()
        for group in groups:
            group.open_tasks -= 1
            if group.open_tasks == 0 and group.state is GroupState.OPEN:
                group.state = GroupState.CLOSING
                group.finished_at = now
                effects.append(CloseGroup(group))
        return effects

    def _finish_if_done(self, window: Window) -> list[Effect]:
        if window.arranged and window.open_groups == 0 and window.open_runs == 0 and not window.finished:
            window.finished = True
            self.windows.discard(window)
            # Nothing asks for its groups any more, and each group points back at the window: left
            # in place, the whole window (messages, tasks, results) would wait for the garbage
            # collector's cycle search instead of going as soon as the last reference does.
            window.groups = {}
            return [FinishWindow(window)] if window.tasks else []
        return []

    def _close_idle(self, window: Window, offsets: set[int]) -> list[Effect]:
        """After arrange(): messages no task works for have empty groups, complete at once."""
        effects: list[Effect] = []
        now = time.monotonic()
        for offset in sorted(offsets):
            group = window.groups[offset]
            if group.open_tasks == 0 and group.state is GroupState.OPEN:
                group.state = GroupState.CLOSING
                group.finished_at = now
                effects.append(CloseGroup(group))
        return effects


def _describe(value: object) -> str:
    if isinstance(value, list):
        kinds = sorted({type(v).__name__ for v in value if not isinstance(v, ExecutorTask)})
        return f"a list holding {', '.join(kinds)}"
    return type(value).__name__


def _error_text(error: ExecutorError) -> str:
    if error.reason == "failed":
        return f"exit code {error.exit_code}: {(error.stderr or '').strip()[-500:]}"
    return f"{error.reason}: {(error.exception or error.stderr or '').strip()[-500:]}"
