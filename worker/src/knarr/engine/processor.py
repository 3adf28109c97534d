"""One partition's processor: its queue, windows, arrange(), task outcomes, groups and watermark.

Every assigned partition gets one. It collects windows from its queue, lets the handler
arrange them into tasks, registers those tasks with their message groups *before* any of
them starts, and launches them without waiting — so several windows are in flight at
once. When a message's last task is terminal, ``on_message_complete`` runs, its output is
delivered, and only then does the offset complete in the watermark.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections import deque
from collections.abc import Callable

from knarr.api.groups import PendingContext
from knarr.api.handler import BaseHandler
from knarr.api.messages import SourceMessage
from knarr.api.payloads import CollectResult, DeliveryError
from knarr.api.tasks import ExecutorError, ExecutorTask
from knarr.config.models import ExecutorConfig
from knarr.engine.accounting import MessageTracker, TaskRun, Window
from knarr.engine.execution import Failed, Replaced, Succeeded, TaskExecutor
from knarr.engine.hooks import call_hook
from knarr.engine.stats import RunStats
from knarr.engine.watermark import OffsetWatermark
from knarr.errors import FatalError
from knarr.observability import events, metrics
from knarr.observability.logging import get_logger
from knarr.sinks.delivery import SinkManager

IDLE_WAKEUP_SECONDS = 1.0


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
        self.watermark = OffsetWatermark()
        self.log = get_logger(partition=partition, topic=topic)
        self._queue: deque[SourceMessage] = deque()
        self._arrived = asyncio.Event()
        self._settled = asyncio.Event()
        self._settled.set()
        self._windows: set[Window] = set()
        self._pending: dict[str, ExecutorTask] = {}
        self._children: set[asyncio.Task] = set()
        self._loop_task: asyncio.Task | None = None
        self.inflight_tasks = 0
        self._label = str(partition)
        self._consumed = metrics.messages_consumed.labels(self._label)
        self._queue_size = metrics.queue_size.labels(self._label)

    # --- input -----------------------------------------------------------------------------
    def enqueue(self, messages: list[SourceMessage]) -> None:
        self._queue.extend(messages)
        self._settled.clear()
        self._arrived.set()
        self._consumed.inc(len(messages))
        self._queue_size.set(len(self._queue))

    @property
    def load(self) -> int:
        """Queued messages plus in-flight tasks: what backpressure counts."""
        return len(self._queue) + self.inflight_tasks

    @property
    def is_settled(self) -> bool:
        return not self._queue and not self._windows

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._run(), name=f"knarr-partition-{self.partition}")

    async def _run(self) -> None:
        try:
            while True:
                window = await self._collect()
                if window:
                    await self._process_window(window)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug in the engine: stop the worker loudly
            self.on_fatal(exc)

    async def _collect(self) -> list[SourceMessage]:
        if not self._queue:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), IDLE_WAKEUP_SECONDS)
            except TimeoutError:
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
                try:
                    await asyncio.wait_for(self._arrived.wait(), remaining)
                except TimeoutError:
                    break
        take = min(size, len(self._queue))
        window = [self._queue.popleft() for _ in range(take)]
        self._queue_size.set(len(self._queue))
        return window

    # --- windows ---------------------------------------------------------------------------
    async def _process_window(self, messages: list[SourceMessage]) -> None:
        window = Window(self.partition, messages)
        self._windows.add(window)
        for msg in messages:
            self.watermark.register(msg.offset)
            try:
                self.handler.deserialize_message(msg)
            except Exception as exc:
                msg.payload = None
                msg.parse_error = f"deserialize_message raised {type(exc).__name__}: {exc}"
        pending = PendingContext.model_construct(
            pending_tasks=list(self._pending.values()), pending_task_ids=set(self._pending)
        )
        started = time.monotonic()
        try:
            tasks = await self.handler.arrange(messages, pending)
            if tasks is None:
                tasks = []
            if not isinstance(tasks, list) or not all(isinstance(t, ExecutorTask) for t in tasks):
                raise TypeError(f"arrange() must return list[ExecutorTask], got {type(tasks).__name__}")
        except Exception as exc:
            metrics.hook_errors.labels("arrange").inc()
            await self._dead_letter_window(window, exc)
            return
        finally:
            metrics.labelled(metrics.handler_duration, "arrange").observe(time.monotonic() - started)

        runs = window.schedule(tasks)  # every group counts every task before any starts
        window.arranged = True
        if window.untracked_offsets:
            metrics.untracked_offsets.inc(window.untracked_offsets)
        for run in runs:
            self._track(run)
        empty = window.groups_without_tasks()
        window.mark_fired(empty)
        for run in runs:
            self._spawn(self._execute(run))
        if empty:
            self._spawn(self._close_groups(window, empty))

    async def _dead_letter_window(self, window: Window, exc: Exception) -> None:
        """arrange() failed: dead-letter the window's messages so the partition moves on and nothing is lost."""
        reason = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        self.log.error("arrange() raised; the window's messages go to the DLQ", error=reason, offsets=[m.offset for m in window.messages])
        error = DeliveryError(
            sink_name="arrange", sink_type="handler", error=reason,
            payloads=[m.value for m in window.messages], attempt=1, partition=self.partition,
        )
        try:
            await self.sinks.dead_letter(error, self.partition)
        except Exception as dlq_exc:
            self.on_fatal(dlq_exc)
            return
        window.arranged = True
        trackers = list(window.trackers.values())
        window.mark_fired(trackers)
        for tracker in trackers:
            self._complete_offset(window, tracker)
        self._maybe_finish_window(window)

    def _track(self, run: TaskRun) -> None:
        self.stats.tasks += 1
        task_id = run.task.task_id
        if task_id in self._pending:
            self.log.warning("duplicate task_id in flight", task_id=task_id)
        self._pending[task_id] = run.task
        self.inflight_tasks += 1
        metrics.tasks_in_flight.inc()

    def _untrack(self, run: TaskRun) -> None:
        self._pending.pop(run.task.task_id, None)
        self.inflight_tasks -= 1
        metrics.tasks_in_flight.dec()
        self.on_progress()

    def _spawn(self, coro) -> None:
        child = asyncio.create_task(coro)
        self._children.add(child)
        child.add_done_callback(self._children.discard)

    # --- tasks -----------------------------------------------------------------------------
    async def _execute(self, run: TaskRun) -> None:
        window = run.window
        try:
            outcome, run.attempt = await self.executor.run(run.task, self.partition, run.attempt)
            if isinstance(outcome, Succeeded):
                done = await self._on_success(run, outcome)
            elif isinstance(outcome, Replaced):
                self.stats.replaced += 1
                new_runs, done = window.replace(run, outcome.tasks)
                if window.untracked_offsets:
                    metrics.untracked_offsets.inc(window.untracked_offsets)
                    window.untracked_offsets = 0
                for new in new_runs:
                    self._track(new)
                for new in new_runs:
                    self._spawn(self._execute(new))
            else:
                assert isinstance(outcome, Failed)
                self.stats.failed += 1
                done = window.fail(run, outcome.error)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.on_fatal(exc)
            return
        self._untrack(run)
        if done:
            await self._close_groups(window, done)
        else:
            self._maybe_finish_window(window)

    async def _on_success(self, run: TaskRun, outcome: Succeeded) -> list[MessageTracker]:
        result = outcome.result
        started = time.monotonic()
        collect, exc = await call_hook(
            "on_task_complete", self.handler.on_task_complete, result, log=self.log,
            on_raise="on_task_complete raised; the task counts as failed", task_id=run.task.task_id,
        )
        if exc is not None:
            error = ExecutorError.model_construct(
                task=run.task, exit_code=result.exit_code, stderr=result.stderr, pid=result.pid,
                exception=f"on_task_complete raised {type(exc).__name__}: {exc}", reason="hook",
                attempt=run.attempt, result=result,
            )
            self.stats.failed += 1
            return run.window.fail(run, error)
        delivered = await self._deliver(collect)
        events.emit(
            "task_complete", partition=self.partition, task_id=run.task.task_id,
            duration=round(time.monotonic() - started, 6), output_message_count=delivered,
        )
        self.stats.succeeded += 1
        return run.window.succeed(run, result)

    async def _deliver(self, collect: CollectResult | None) -> int:
        if collect is None:
            return 0
        if not isinstance(collect, CollectResult):
            raise FatalError(f"hooks must return CollectResult or None, got {type(collect).__name__}")
        try:
            delivered = await self.sinks.deliver(collect, self.partition)
            self.stats.outputs += delivered
            return delivered
        except ValueError as exc:  # sink resolution: a handler bug, fail fast without committing
            raise FatalError(str(exc)) from exc

    # --- groups and offsets ----------------------------------------------------------------
    async def _close_groups(self, window: Window, trackers: list[MessageTracker]) -> None:
        for tracker in trackers:
            group = tracker.group()
            started = time.monotonic()
            collect, _ = await call_hook(
                "on_message_complete", self.handler.on_message_complete, group, log=self.log,
                on_raise="on_message_complete raised; the offset completes anyway",
                offset=tracker.message.offset, label=self.handler.message_label(tracker.message),
            )
            try:
                delivered = await self._deliver(collect)
            except Exception as exc:
                self.on_fatal(exc)
                return
            outcome = "empty" if group.is_empty else "succeeded" if group.all_succeeded else "failed" if group.succeeded == 0 else "partial"
            metrics.labelled(metrics.messages_completed, outcome).inc()
            events.emit(
                "message_complete", partition=self.partition, offset=tracker.message.offset,
                task_count=group.total, succeeded=group.succeeded, failed=group.failed, replaced=group.replaced,
                duration=round(time.monotonic() - started, 6), output_message_count=delivered,
            )
            self._complete_offset(window, tracker)
        self._maybe_finish_window(window)

    def _complete_offset(self, window: Window, tracker: MessageTracker) -> None:
        self.stats.messages += 1
        if not tracker.tasks:
            self.stats.empty_messages += 1
        self.watermark.complete(tracker.message.offset)
        window.group_closed()
        self.on_progress()

    def _maybe_finish_window(self, window: Window) -> None:
        if window.is_complete:
            window.completed = True
            self._windows.discard(window)
            if window.total:
                self._spawn(self._finish_window(window))
            self._update_settled()

    async def _finish_window(self, window: Window) -> None:
        collect, _ = await call_hook(
            "on_window_complete", self.handler.on_window_complete, list(window.results), window.messages,
            log=self.log, on_raise="on_window_complete raised", window_id=window.id,
        )
        try:
            delivered = await self._deliver(collect)
        except Exception as exc:
            self.on_fatal(exc)
            return
        events.emit(
            "window_complete", partition=self.partition, window_id=window.id, task_count=window.total,
            duration=round(time.monotonic() - window.created_at, 6), output_message_count=delivered,
        )

    def _update_settled(self) -> None:
        if self.is_settled:
            self._settled.set()

    # --- drain and stop --------------------------------------------------------------------
    async def drain(self, timeout: float) -> bool:
        """Finish queued and in-flight work; True if everything settled within ``timeout``."""
        self._update_settled()
        try:
            await asyncio.wait_for(self._settled.wait(), timeout)
        except TimeoutError:
            self.log.warning("drain timed out; uncommitted offsets will be replayed", timeout=timeout,
                             queued=len(self._queue), inflight=self.inflight_tasks)
            return False
        # Window hooks that were already spawned should finish too (they may deliver).
        window_hooks = [c for c in self._children if not c.done()]
        if window_hooks:
            await asyncio.wait(window_hooks, timeout=timeout)
        return True

    async def stop(self) -> None:
        """Cancel everything still running (subprocess groups are killed by their runners)."""
        tasks = [t for t in [self._loop_task, *self._children] if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        metrics.tasks_in_flight.dec(self.inflight_tasks)
        self.inflight_tasks = 0
        self._queue_size.set(0)
