"""One partition's processor: the shell that carries out what the ledger decides.

It takes windows off the partition's queue, calls the handler's hooks (through the one
door in ``hooks``), runs tasks through the shared executor, delivers outputs and dead
letters through the sinks, and reports every outcome to its ``Ledger``, which answers with
the next effects. All bookkeeping — groups, windows, in-flight runs, the watermark — lives
in the ledger; this file only does the waiting.

A message's life, in the order it reads here: ``_window`` (deserialize, take, arrange) →
``run_task`` (execute, on_task_complete, deliver, settle) → ``_close`` (on_message_complete,
deliver, group_closed → the offset completes) → ``_finish`` (on_window_complete, deliver).
What cannot go on goes through ``_dead_letter``. The close a task's end brings runs in that
task's own asyncio task (``_carry_on``); every other effect starts one of its own. A task's usual
life (in a persistent program, or spawned by the native runner) takes no asyncio task at all:
direct.py carries it through callbacks, and hands it to ``run_task``, ``complete`` or
``deliver_and_settle`` the moment it leaves that way.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from knarr.api.handler import BaseHandler
from knarr.api.messages import SourceMessage
from knarr.api.payloads import CollectResult
from knarr.api.tasks import ExecutorResult, ExecutorTask
from knarr.config.models import ExecutorConfig
from knarr.engine.direct import DirectPath
from knarr.engine.execution import TaskExecutor, task_context, task_error
from knarr.runtime.hooks import Called, call_hook, call_sync_hook, defines
from knarr.engine.ledger import (
    MESSAGE_OUTCOMES, ArrangeRefused, CloseGroup, DeadLetter, Effect, Failed, FinishWindow, Group, Ledger, Outcome, Run,
    RunTask, Succeeded, Window,
)
from knarr.errors import FatalError
from knarr.observability import events, metrics
from knarr.observability.logging import get_logger
from knarr.runtime.stats import RunStats
from knarr.runtime.stopping import cancel_and_wait, wait_event
from knarr.sinks.delivery import Origin, SinkManager

IDLE_WAKEUP_SECONDS = 1.0
STALL_FIRST_DELAY_SECONDS = 1.0
STALL_MAX_DELAY_SECONDS = 60.0
PARSE_POLICIES = ("arrange", "dlq", "skip")
# knarr_messages_completed_total's child for each outcome a message can have (Group.outcome)
_messages_completed = {outcome: metrics.messages_completed.labels(outcome) for outcome in MESSAGE_OUTCOMES}


class PartitionProcessor:
    def __init__(
        self,
        topic: str,
        partition: int,
        handler: BaseHandler,
        executor: TaskExecutor,
        sinks: SinkManager,
        config: ExecutorConfig,
        on_fatal: Callable[[BaseException], None],
        on_progress: Callable[[], None] | None = None,
        stats: RunStats | None = None,
        on_parse_error: str = "arrange",
        recorder: Any = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.handler = handler
        self.executor = executor
        self.sinks = sinks
        self.config = config
        self.on_fatal = on_fatal
        self.on_progress = on_progress or (lambda: None)
        self.stats = stats or RunStats()
        self.on_parse_error = on_parse_error
        self.recorder = recorder  # the flight recorder, or None (debug off)
        self.ledger = Ledger(partition, max_tasks_per_window=config.max_tasks_per_window,
                             dead_letter_exhausted=config.on_retries_exhausted == "dlq")
        self.log = get_logger(partition=partition, topic=topic)
        self.failure: str | None = None  # set when the processor died twice: the partition is failed
        self.stall: str | None = None  # set while arrange() fails on everything: the partition waits
        self._last_window_failed_whole = False
        self._queue: deque[SourceMessage] = deque()
        self._arrived = asyncio.Event()
        self._settled = asyncio.Event()
        self._settled.set()
        self._children: set[asyncio.Task] = set()
        self._closing_deliveries = 0  # on_message_complete's and on_window_complete's outputs with the sinks
        self._loop_task: asyncio.Task | None = None
        self._restarts = 0
        self._current: tuple[list[SourceMessage], Window | None] | None = None  # the window being formed
        self._label = str(partition)
        self._consumed = metrics.messages_consumed.labels(self._label)
        self._queue_size = metrics.queue_size.labels(self._label)
        # Hooks left at BaseHandler's do nothing per message: skipped (hooks.defines)
        self._deserializes = defines(handler, "deserialize_message") or handler.input_model is not None
        self._labels_messages = defines(handler, "message_label")
        self.completes_tasks = defines(handler, "on_task_complete")
        self._completes_messages = defines(handler, "on_message_complete")
        self._completes_windows = defines(handler, "on_window_complete")
        self._direct = DirectPath(self)  # tasks' usual way, without an asyncio task each

    @property
    def watermark(self):
        return self.ledger.watermark

    # --- input -----------------------------------------------------------------------------
    def enqueue(self, messages: list[SourceMessage]) -> None:
        self._queue.extend(messages)
        self._settled.clear()
        self._arrived.set()
        self._consumed.inc(len(messages))
        self._queue_size.set(len(self._queue))
        if self.recorder is not None and messages:  # one event per poll of this partition, naming every message
            self.recorder.record("consumed", self.partition, messages[0].offset, data={
                "offsets": [m.offset for m in messages], "keys": [m.key for m in messages],
                "bytes": sum(len(m.value) for m in messages)})

    @property
    def load(self) -> int:
        """Queued messages plus the tasks in flight whose outputs are not with the sinks yet (waiting for a
        slot included): what backpressure counts as work."""
        return self.queued + self.ledger.working

    @property
    def delivering(self) -> int:
        """Tasks whose outputs await the sinks' confirmation, and messages' and windows' outputs that do:
        backpressure bounds them apart from the work."""
        return self.ledger.delivering + self._closing_deliveries

    @property
    def queued(self) -> int:
        """Messages taken and not yet in a window."""
        return len(self._queue)

    @property
    def inflight_tasks(self) -> int:
        return self.ledger.in_flight

    @property
    def is_settled(self) -> bool:
        return not self._queue and self.ledger.settled

    # --- the window loop, supervised -------------------------------------------------------
    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._windows(), name=f"knarr-partition-{self.partition}")

    async def _windows(self) -> None:
        while True:
            try:
                while True:
                    messages = await self._collect()
                    if messages:
                        self._current = (messages, None)
                        await self._window(messages)
                        self._current = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._recover_current(f"{type(exc).__name__}: {exc}")
                if not self._died(exc):
                    return

    def _recover_current(self, reason: str) -> None:
        """The loop died forming a window: nothing of it may be lost, nor committed past."""
        if self._current is None:
            return
        messages, window = self._current
        self._current = None
        if window is None:  # not yet in the ledger: back to the front of the queue
            self._queue.extendleft(reversed(messages))
        elif not window.arranged:  # in the ledger, never arranged: dead-letter it so the partition goes on
            self._carry_out(self.ledger.arrange_failed(window, f"the engine failed on this window: {reason}"))

    def _died(self, exc: BaseException) -> bool:
        """The processor raised where it never should (an engine bug): restart once, then fail the partition."""
        reason = f"{type(exc).__name__}: {exc}"
        metrics.processor_failures.labels(self._label).inc()
        if self._restarts == 0:
            self._restarts += 1
            self.log.error("partition processor died; restarting it once", error=reason, exc_info=exc)
            return True
        self.failure = f"partition {self.partition} failed twice: {reason}"
        self.log.error("partition processor died again; the partition is marked failed (readiness fails, "
                       "nothing past its last complete offset is committed)", error=reason, exc_info=exc)
        return False

    async def _collect(self) -> list[SourceMessage]:
        if not self._queue:
            self._arrived.clear()
            if not await wait_event(self._arrived, IDLE_WAKEUP_SECONDS):
                return []
        size = self.config.window_size
        if self.config.window_linger_ms and len(self._queue) < size:
            # Stateful batching: give the window a moment to fill before arrange() runs.
            deadline = time.monotonic() + self.config.window_linger_ms / 1000
            while len(self._queue) < size:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._arrived.clear()
                if not await wait_event(self._arrived, remaining):
                    break
        take = min(size, len(self._queue))
        window = [self._queue.popleft() for _ in range(take)]
        self._queue_size.set(len(self._queue))
        return window

    async def _window(self, messages: list[SourceMessage]) -> None:
        for msg in messages if self._deserializes else ():
            called = call_sync_hook("deserialize_message", self.handler.deserialize_message, msg, log=self.log,
                                    offset=msg.offset)
            if called.raised:
                msg.payload = None
                msg.parse_error = f"deserialize_message raised {type(called.error).__name__}: {called.error}"
        window = self.ledger.take(messages)
        self._current = (messages, window)
        arrange_messages = messages
        if self.on_parse_error != "arrange":
            unparsed = [m for m in messages if m.parse_error is not None]
            if unparsed:
                metrics.labelled(metrics.parse_errors, self.on_parse_error).inc(len(unparsed))
                self._carry_out(self.ledger.set_aside(window, unparsed, "message did not parse: "
                                                      + "; ".join(sorted({m.parse_error or '' for m in unparsed}))[:500],
                                                      dead_letter=self.on_parse_error == "dlq"))
                arrange_messages = [m for m in messages if m.parse_error is None]
                if self.on_parse_error == "skip":
                    self.stats.messages += len(unparsed)
        if arrange_messages:
            await self._arrange(window, arrange_messages)
        else:
            self._carry_out(self.ledger.arranged(window, []))
        untracked = self.ledger.take_untracked()
        if untracked:
            metrics.untracked_offsets.inc(untracked)
        # The window left the queue and its tasks (if fewer than its messages) took its place in
        # the load: a held poll may go on now.
        self.on_progress()

    # --- arrange(): find what it fails on, and stall when it fails on everything ------------
    async def _arrange(self, window: Window, messages: list[SourceMessage]) -> None:
        """Arrange the messages. When arrange() fails, split the window to find the messages it fails
        on and dead-letter only those. When it fails on every message alone (and the window has two
        or more, or the window before failed whole too), the handler is broken rather than the data:
        the partition stalls — nothing dead-lettered, nothing committed, readiness fails — and
        retries with backoff until arrange() works again."""
        delay = STALL_FIRST_DELAY_SECONDS
        while True:
            parts = await self._arrange_parts(messages)
            failed = [(part, reason) for part, _, reason in parts if reason is not None]
            whole = sum(len(part) for part, _ in failed) == len(messages)
            if failed and whole and (len(messages) > 1 or self._last_window_failed_whole):
                self._stall_arrange(failed[0][1], len(messages), delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, STALL_MAX_DELAY_SECONDS)
                continue
            self._last_window_failed_whole = bool(failed) and whole
            self._end_stall()
            if failed:
                self.log.error("arrange() fails on some messages; only those are dead-lettered",
                               failed=[m.offset for part, _ in failed for m in part], of=len(messages),
                               error=failed[0][1])
            whole_window = len(parts) == 1
            for part, tasks, reason in parts:
                scope = None if whole_window else part
                if reason is None:
                    if self.recorder is not None:
                        self.recorder.record("window_arranged", self.partition, part[0].offset, data={
                            "window_id": window.id, "offsets": [m.offset for m in part], "tasks": len(tasks or [])})
                    self._carry_out(self.ledger.arranged(window, tasks or [], scope))
                else:
                    self._carry_out(self.ledger.arrange_failed(window, reason, scope))
            return

    async def _arrange_parts(self, messages: list[SourceMessage]) -> list[tuple[list[SourceMessage], list[ExecutorTask] | None, str | None]]:
        """arrange() the messages; if it fails, each half on its own, down to single messages."""
        tasks, reason = await self._call_arrange(messages)
        if reason is None or len(messages) == 1:
            return [(messages, tasks, reason)]
        mid = len(messages) // 2
        return await self._arrange_parts(messages[:mid]) + await self._arrange_parts(messages[mid:])

    async def _call_arrange(self, messages: list[SourceMessage]) -> tuple[list[ExecutorTask] | None, str | None]:
        called = await call_hook("arrange", self.handler.arrange, messages, self.ledger.pending_context(),
                                 log=self.log, quiet=True)
        if called.raised:
            return None, f"arrange() raised {_exc_text(called.error)}"
        try:
            return self.ledger.check_arranged(called.value), None
        except ArrangeRefused as exc:
            metrics.hook_errors.labels("arrange").inc()
            return None, str(exc)

    def _stall_arrange(self, reason: str, count: int, retry_in: float) -> None:
        if self.stall is None:
            metrics.stalls.labels("arrange").inc()
            metrics.partition_stalled.labels(self._label).set(1)
            self.log.error("arrange() fails on every message alone: the handler looks broken, not the data; "
                           "partition stalled (nothing dead-lettered, nothing committed), retrying with backoff",
                           hook="arrange", error=reason, messages=count, retry_in=retry_in)
        self.stall = f"partition {self.partition} stalled: arrange() fails on every message: {reason}"

    def _end_stall(self) -> None:
        if self.stall is not None:
            self.stall = None
            metrics.partition_stalled.labels(self._label).set(0)
            self.log.warning("arrange() works again; partition resumes", hook="arrange")

    # --- carrying out effects --------------------------------------------------------------
    def _carry_out(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, RunTask):
                self.stats.tasks += 1
                if self.recorder is not None:
                    self._record_queued(effect.run)
                if not self._direct.start(effect.run):
                    self.spawn(self.run_task(effect.run))
            # in place when no hook is called, as _in_place says (spelled out here: two calls fewer a message)
            elif isinstance(effect, CloseGroup) and not self._completes_messages:
                self._closed(effect.group, time.monotonic(), 0)
            elif isinstance(effect, FinishWindow) and not self._completes_windows:
                self._finished(effect.window, 0)
            else:
                self.spawn(self._effect(effect))
        self._update_settled()

    def _in_place(self, effect: Effect) -> bool:
        """A message's close or a window's end with no hook of the handler's to call, so nothing to
        await: it is carried out at once rather than in an asyncio task of its own (about 3 us a
        message where a task works for many)."""
        return ((isinstance(effect, CloseGroup) and not self._completes_messages)
                or (isinstance(effect, FinishWindow) and not self._completes_windows))

    async def _carry_on(self, effects: list[Effect]) -> None:
        """Carry out what a task's end brings, the last hook step among it in this asyncio task.

        Usually that is the close of the task's own message: running it here rather than in a
        task of its own saves a task's start-up per message. Every other effect starts at once,
        as _carry_out starts them, and progress is reported before the step runs.
        """
        last = next((i for i in range(len(effects) - 1, -1, -1)
                     if not isinstance(effects[i], RunTask) and not self._in_place(effects[i])), None)
        if last is None:
            self._carry_out(effects)
            self.on_progress()
            return
        step = effects[last]
        self._carry_out(effects[:last] + effects[last + 1:])
        self.on_progress()
        await self._effect(step)

    def _effect(self, effect: Effect) -> Coroutine[Any, Any, None]:
        if isinstance(effect, CloseGroup):
            return self._close(effect.group)
        if isinstance(effect, FinishWindow):
            return self._finish(effect.window)
        return self._dead_letter(effect)

    def _record_queued(self, run: Run) -> None:
        task, offsets = run.task, [g.offset for g in run.groups]
        data = {"offsets": offsets, "args": task.args, "window_id": run.window.id}
        if task.labels:
            data["labels"] = task.labels
        self.recorder.record("task_queued", self.partition, run.first_offset, task.task_id,
                             task.parent_task_id, data=data)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        child = asyncio.create_task(self._supervised(coro))
        self._children.add(child)
        child.add_done_callback(self._children.discard)

    async def _supervised(self, coro: Coroutine[Any, Any, None]) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.crashed(exc)

    def crashed(self, exc: Exception) -> None:
        """What carrying out a message's work raised: a fatal error stops the worker; anything else is an
        engine bug mid-message, and the ledger may be inconsistent: the partition fails."""
        if isinstance(exc, FatalError):
            self.on_fatal(exc)
            return
        self._restarts = max(self._restarts, 1)
        self._died(exc)
        if self._loop_task is not None:
            self._loop_task.cancel()

    # --- a task ----------------------------------------------------------------------------
    async def run_task(self, run: Run, granted: bool = False, first: Any = None) -> None:
        """A task's life in its own asyncio task; ``granted`` and ``first`` hand over one direct.py began."""
        outcome, run.attempt = await self.executor.run(run.task, self.partition, run.attempt, run.first_offset,
                                                       granted=granted, first=first)
        if isinstance(outcome, Succeeded):
            outcome = await self._task_complete(run, outcome)
        await self._settle_task(run, outcome)

    async def complete(self, run: Run, outcome: Succeeded, hook: Any) -> None:
        """direct.py's hand-over of a task whose on_task_complete waits (``hook``: the rest of that call)."""
        await self._settle_task(run, await self._task_complete(run, outcome, hook))

    def count(self, outcome: Outcome) -> None:
        if isinstance(outcome, Succeeded):
            self.stats.succeeded += 1
        elif isinstance(outcome, Failed):
            self.stats.failed += 1
            if outcome.retries_exhausted:
                metrics.labelled(metrics.tasks, "dead_lettered" if self.ledger.dead_letter_exhausted else "discarded").inc()
        else:
            self.stats.replaced += 1

    async def deliver_and_settle(self, run: Run, outcome: Succeeded, started: float,
                                 delivering: Coroutine[Any, Any, int]) -> None:
        """direct.py's hand-over of a delivery it did not finish: the rest, then settling the task."""
        delivered = await delivering
        self.stats.outputs += delivered
        self.task_completed(run, started, delivered)
        await self._settle_task(run, outcome)

    async def _settle_task(self, run: Run, outcome: Outcome) -> None:
        """The end of a task in its own asyncio task: count its outcome and carry on with what settling brings."""
        self.count(outcome)
        await self._carry_on(self.ledger.settle(run, outcome))

    def settle(self, run: Run, outcome: Outcome) -> None:
        """direct.py's end of a task, in place: count its outcome and carry out what settling it brings."""
        self.count(outcome)
        self._carry_out(self.ledger.settle(run, outcome))
        self.on_progress()

    async def _task_complete(self, run: Run, outcome: Succeeded, hook: Any = None) -> Outcome:
        result = outcome.result
        started = time.monotonic()
        delivered = 0
        if self.completes_tasks:
            called = await hook if hook is not None else await call_hook(
                "on_task_complete", self.handler.on_task_complete, result, log=self.log, **task_context(run.task))
            if called.raised:
                return self.hook_failed(run, result, called.error)
            if _outputs(called.value) is not None:
                self.ledger.delivering_from(run)
            delivered = await self._deliver(called.value, "task", [g.message for g in run.groups], run.task.task_id)
        self.task_completed(run, started, delivered)
        return outcome

    def task_completed(self, run: Run, started: float, delivered: int) -> None:
        events.emit("task_complete", self.recorder, self._task_record, run, started, delivered)

    def _task_record(self, run: Run, started: float, delivered: int) -> events.Fields:
        task = run.task
        data = {"labels": task.labels, "output_message_count": delivered} if task.labels else {
            "output_message_count": delivered}
        return self.partition, run.first_offset, task.task_id, round(time.monotonic() - started, 6), data

    def hook_failed(self, run: Run, result: ExecutorResult, error: BaseException | None) -> Failed:
        """on_task_complete raised: the task counts as failed (reason 'hook')."""
        reason = f"on_task_complete raised {_exc_text(error)}"
        if self.recorder is not None:
            self.recorder.record("task_failed", self.partition, run.first_offset, run.task.task_id,
                                 run.task.parent_task_id,
                                 data={"reason": "hook", "exit_code": result.exit_code, "attempt": run.attempt,
                                       "stderr": reason})
        return Failed(task_error(run.task, run.attempt, result, exit_code=result.exit_code, stderr=result.stderr,
                                 pid=result.pid, exception=reason, reason="hook"))

    # --- a message's group -----------------------------------------------------------------
    async def _close(self, group: Group) -> None:
        started = time.monotonic()
        called = _NOTHING
        if self._completes_messages:  # (else _carry_out closes the group in place; its view is made only for the hook)
            label = group.message.label
            if self._labels_messages:
                label = call_sync_hook("message_label", self.handler.message_label, group.message, log=self.log,
                                       default=label).value
            called = await call_hook("on_message_complete", self.handler.on_message_complete, group.view(),
                                     log=self.log, offset=group.offset, label=label)
        if called.raised:
            letter = DeadLetter("on_message_complete", f"on_message_complete raised {_exc_text(called.error)}",
                                [group.message], holds=[group])
            await self._dead_letter(letter)
            return
        self._closed(group, started, await self._deliver(called.value, "message", [group.message]))

    def _closed(self, group: Group, started: float, delivered: int) -> None:
        """The close's hook (if any) returned and what it returned is delivered: count it, then complete the offset."""
        _messages_completed[group.outcome()].inc()
        events.emit("message_complete", self.recorder, self._message_record, group, started, delivered)
        self._group_closed(group)

    def _message_record(self, group: Group, started: float, delivered: int) -> events.Fields:
        data = group.counts()
        data["output_message_count"] = delivered
        return self.partition, group.offset, None, round(time.monotonic() - started, 6), data

    def _group_closed(self, group: Group) -> None:
        self.stats.messages += 1
        if not group.tasks:
            self.stats.empty_messages += 1
        self._carry_out(self.ledger.group_closed(group))  # the load is what it was: no progress to report

    # --- a window's end --------------------------------------------------------------------
    async def _finish(self, window: Window) -> None:
        delivered = 0
        if self._completes_windows:  # (else _carry_out finishes the window in place)
            called = await call_hook("on_window_complete", self.handler.on_window_complete, list(window.results),
                                     window.messages, log=self.log, window_id=window.id, offsets=window.offsets)
            if called.raised:
                await self._dead_letter(DeadLetter("on_window_complete",
                                                   f"on_window_complete raised {_exc_text(called.error)}",
                                                   list(window.messages)))
                return
            delivered = await self._deliver(called.value, "window", window.messages)
        self._finished(window, delivered)

    def _finished(self, window: Window, delivered: int) -> None:
        events.emit("window_complete", self.recorder, self._window_record, window, delivered)

    def _window_record(self, window: Window, delivered: int) -> events.Fields:
        return self.partition, None, None, round(time.monotonic() - window.created_at, 6), {
            "window_id": window.id, "task_count": window.tasks, "output_message_count": delivered}

    # --- outputs ---------------------------------------------------------------------------
    async def _deliver(self, collect: Any, stage: str, messages: list[SourceMessage],
                       task_id: str | None = None) -> int:
        """Deliver what a hook returned; ``messages`` are what it derives from (named in dead letters)."""
        if _outputs(collect) is None:
            return 0
        # A payload naming no configured sink raises SinkResolutionError, a FatalError: a handler bug
        # stops the worker before anything of it is committed.
        counted = stage != "task"  # (a task's are counted as its run's, ledger.delivering_from)
        if counted:  # a message's or a window's outputs: no run of theirs counts them, so they are counted here
            self._closing_deliveries += 1
        try:
            delivered = await self.sinks.deliver(collect, Origin.of(self.partition, messages, stage, task_id))
        finally:
            if counted:
                self._closing_deliveries -= 1
                self.on_progress()  # a hold on the deliveries may be over
        self.stats.outputs += delivered
        return delivered

    def plan(self, collect: Any) -> list[tuple[Any, list[Any]]] | None:
        """What a hook returned, resolved to its sinks (direct.py delivers from it); None when there is
        nothing to deliver. SinkResolutionError (a FatalError) as ``_deliver`` raises it."""
        if _outputs(collect) is None:
            return None
        return self.sinks.plan(collect)

    async def _dead_letter(self, letter: DeadLetter) -> None:
        """Write the dead letter (the DLQ's own failure policy applies inside), then let what it held go on."""
        await self.sinks.dead_letter_messages(letter.stage, letter.reason, letter.messages, self.partition,
                                              task=letter.task, error=letter.error)
        if letter.stage != "task":
            self.stats.messages += len(letter.holds)  # their offsets complete now, without on_message_complete
        self._carry_out(self.ledger.dead_lettered(letter))
        self.on_progress()

    # --- drain and stop --------------------------------------------------------------------
    def _update_settled(self) -> None:
        if self.is_settled:
            self._settled.set()

    async def drain(self, timeout: float) -> bool:
        """Finish queued and in-flight work; True if everything settled within ``timeout``."""
        if self.failure is not None or self.stall is not None:
            return False  # a failed or stalled partition will not settle in time
        deadline = time.monotonic() + timeout
        self._update_settled()
        if not await wait_event(self._settled, timeout):
            self.log.warning("drain timed out; uncommitted offsets will be replayed", timeout=timeout,
                             queued=len(self._queue), inflight=self.ledger.in_flight)
            return False
        # Window hooks already spawned should finish too (they may deliver).
        window_hooks = [c for c in self._children if not c.done()]
        if window_hooks:
            _, pending = await asyncio.wait(window_hooks, timeout=max(0.0, deadline - time.monotonic()))
            if pending:
                return False
        return self.failure is None

    async def stop(self) -> None:
        """Cancel everything still running (subprocess groups are killed by their runners), and wait
        until it has ended: stopping.cancel_and_wait cancels again what lost its cancel."""
        self._direct.stop()
        await cancel_and_wait([t for t in [self._loop_task, *self._children] if t is not None], self.log)
        self.ledger.forget()
        self._queue.clear()
        self._queue_size.set(0)


_NOTHING = Called()  # what a hook the handler leaves out answers: None


def _outputs(collect: Any) -> CollectResult | None:
    """What a hook returned, if it has outputs to deliver; FatalError when it is no CollectResult (a handler bug)."""
    if collect is None:
        return None
    if not isinstance(collect, CollectResult):
        raise FatalError(f"hooks must return CollectResult or None, got {type(collect).__name__}")
    return collect if collect.has_outputs else None


def _exc_text(exc: BaseException | None) -> str:
    return f"{type(exc).__name__}: {exc}" if exc is not None else "an exception"
