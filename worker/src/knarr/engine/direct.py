"""A persistent task's usual life through callbacks, without an asyncio task of its own.

Most tasks in persistent mode go one way: a slot, an idle program, an answer with exit code 0,
``on_task_complete`` returning at once, outputs for one Kafka sink, the broker's confirmation. On
this path each step is a callback of the one before rather than an await in a chain of
coroutines: no asyncio task, slot future or coroutine per task, which is a quarter of the event
loop's time per task (docs/performance.md). The steps themselves are the engine's usual ones,
called from here: the scheduler's order, the pool's programs, the executor's outcome, the hook
door, the sink manager, the ledger.

The moment a task leaves that way it goes on in an asyncio task of its own, through the same code
as every other task (processor.py, execution.py), from where it is:

- no idle program when its slot comes (one is starting): the attempt, holding its slot;
- a failed attempt (exit code, timeout, crash, protocol): retries and ``on_error``, from that outcome;
- ``on_task_complete`` waiting on something: the rest of that call, then delivery and settling;
- outputs for several sinks, or a sink that confirms through no future: the sink manager's delivery;
- a delivery that fails: the sink manager's handling of that failure (retries, outage waits, DLQ).

What needs more from the start takes the asyncio task from the start (``TaskExecutor.direct_command``):
spawn mode, a precomputed result, a delay or an expiry, and every task while the flight recorder
is on. ``stop`` gives up what is on this path as cancelling the asyncio tasks gives up the rest:
a waiting task leaves the queue, a program mid-task is killed and its slot freed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, Protocol

from knarr.api.handler import BaseHandler
from knarr.api.tasks import ExecutorError, ExecutorResult
from knarr.engine.execution import TaskExecutor, task_context
from knarr.engine.hooks import Called, start_hook
from knarr.engine.ledger import Failed, Outcome, Run, Succeeded
from knarr.engine.processes import ProcessOutcome
from knarr.engine.programs import Program, ProgramFailure
from knarr.engine.stats import RunStats
from knarr.sinks.delivery import Origin, SinkManager


class Partition(Protocol):
    """What the path takes from its partition's processor (processor.py): the parts it shares, and
    the usual path's steps, to hand a task over to or to end it with."""

    partition: int
    handler: BaseHandler
    executor: TaskExecutor
    sinks: SinkManager
    stats: RunStats
    log: Any
    completes_tasks: bool

    def run_task(self, run: Run, granted: bool = False, first: Any = None) -> Coroutine[Any, Any, None]: ...

    def complete(self, run: Run, outcome: Succeeded, hook: Any) -> Coroutine[Any, Any, None]: ...

    def deliver_and_settle(self, run: Run, outcome: Succeeded, started: float,
                           delivering: Coroutine[Any, Any, int]) -> Coroutine[Any, Any, None]: ...

    def plan(self, collect: Any) -> list[tuple[Any, list[Any]]] | None: ...

    def hook_failed(self, run: Run, result: ExecutorResult, error: BaseException | None) -> Failed: ...

    def task_completed(self, run: Run, started: float, delivered: int) -> None: ...

    def settle(self, run: Run, outcome: Outcome) -> None: ...

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None: ...

    def crashed(self, exc: Exception) -> None: ...


class DirectPath:
    """One partition's tasks on the direct path."""

    def __init__(self, processor: Partition) -> None:
        self.processor = processor
        self.executor = processor.executor
        self.tasks: set[_Direct] = set()

    def start(self, run: Run) -> bool:
        """Take ``run`` on the direct path; False when it needs its own asyncio task from the start."""
        command = self.executor.direct_command(run.task) if run.attempt == 1 else None
        return command is not None and _Direct(self, run, command).begin()

    def stop(self) -> None:
        """Give up every task on the path: the waiting ones first, so no slot freed here goes to one of them."""
        tasks = sorted(self.tasks, key=lambda task: task.program is not None)
        for task in tasks:
            task.cancel()


class _Direct:
    """One task on the direct path: waiting for a slot, running in a program, or delivering."""

    __slots__ = ("path", "run", "command", "request", "timeout", "started", "program", "answer", "waiting",
                 "cancelled", "outcome", "completing", "sink", "payloads", "origin", "sent")

    def __init__(self, path: DirectPath, run: Run, command: tuple[str, ...]) -> None:
        self.path, self.run, self.command = path, run, command
        self.program: Program | None = None
        self.waiting = self.cancelled = False

    # --- a slot --------------------------------------------------------------------------
    def begin(self) -> bool:
        processor = self.path.processor
        executor, task = processor.executor, self.run.task
        self.timeout = task.timeout_seconds or executor.config.task_timeout_seconds
        request = executor.programs.request(self.command, task, self.timeout, time.monotonic())
        if isinstance(request, ProcessOutcome):  # no frame carries this task: the attempt says why
            return False
        self.request = request
        priority = executor.priority(task)
        self.path.tasks.add(self)
        if executor.scheduler.take(processor.partition):
            self._granted()
        else:
            self.waiting = True
            executor.scheduler.wait(processor.partition, priority, self)
        return True

    def done(self) -> bool:
        """(For the scheduler:) no longer waiting for a slot."""
        return not self.waiting

    def set_result(self, held: bool) -> None:
        """(For the scheduler:) the slot is this task's."""
        self.waiting = False
        self._granted()

    def _granted(self) -> None:
        processor = self.path.processor
        try:
            program = processor.executor.programs.take_idle(self.command)
            if program is None:  # none idle (one is starting, or was replaced): the attempt, with its slot
                self._hand_over(processor.run_task(self.run, granted=True))
                return
            self.program, self.started = program, time.monotonic()  # its duration counts from here, not the wait
            self.answer = program.send(self.request, self.timeout, "task")
            self.answer.add_done_callback(self._answered)
        except Exception as exc:
            self._crash(exc)

    # --- the program's answer ------------------------------------------------------------
    def _answered(self, answer: asyncio.Future) -> None:
        if self.cancelled:
            return
        processor = self.path.processor
        executor, program, task = processor.executor, self.program, self.run.task
        try:
            program.deadlines.stop(program)
            self.program = None
            failure = answer.exception()
            if failure is not None and not isinstance(failure, ProgramFailure):
                raise failure
            if failure is None:
                proc = executor.programs.answered(program, task, self.started, frame=answer.result())
            else:
                proc = executor.programs.answered(program, task, self.started, failure=failure)
            executor.scheduler.release(processor.partition)
            outcome = executor.outcome_of(task, 1, proc)
            if isinstance(outcome, ExecutorError):  # retries and on_error, from this outcome
                self._hand_over(processor.run_task(self.run, first=outcome))
                return
            self._complete(Succeeded(outcome))
        except Exception as exc:
            self._crash(exc)

    def _complete(self, outcome: Succeeded) -> None:
        processor, run = self.path.processor, self.run
        self.outcome, self.completing = outcome, time.monotonic()
        if not processor.completes_tasks:
            self._settle(0)
            return
        called = start_hook("on_task_complete", processor.handler.on_task_complete, outcome.result,
                            log=processor.log, **task_context(run.task))
        if not isinstance(called, Called):  # it waits on something: the rest in a task of its own
            self._hand_over(processor.complete(run, outcome, hook=called))
            return
        if called.raised:
            self._settle_as(processor.hook_failed(run, outcome.result, called.error))
            return
        plan = processor.plan(called.value)
        if plan is None:
            self._settle(0)
            return
        origin = Origin.of(processor.partition, [group.message for group in run.groups], "task", run.task.task_id)
        sink, payloads = plan[0]
        if len(plan) > 1 or not hasattr(sink, "begin"):
            self._hand_over(processor.deliver_and_settle(run, outcome, self.completing,
                                                         processor.sinks.deliver_plan(plan, origin)))
            return
        self.sink, self.payloads, self.origin, self.sent = sink, payloads, origin, time.monotonic()
        try:
            confirmed = sink.begin(payloads)
        except Exception as exc:  # refused at once (a record too large, say)
            self._redeliver(sink.failure(exc))
            return
        confirmed.add_done_callback(self._delivered)

    # --- the sink's confirmation ---------------------------------------------------------
    def _delivered(self, confirmed: asyncio.Future) -> None:
        failure = None if confirmed.cancelled() else confirmed.exception()  # (taken even when given up)
        if self.cancelled:
            return
        try:
            if failure is not None:
                self._redeliver(self.sink.failure(failure))
                return
            self.path.processor.sinks.delivered(self.sink, self.payloads, self.origin, self.sent)
            self._settle(len(self.payloads))
        except Exception as exc:
            self._crash(exc)

    def _redeliver(self, failure: Exception) -> None:
        """The sink refused the first try: its failure handling goes on in a task of its own."""
        processor = self.path.processor
        delivering = _counted(processor.sinks.deliver_to(self.sink, self.payloads, self.origin, failure),
                              len(self.payloads))
        self._hand_over(processor.deliver_and_settle(self.run, self.outcome, self.completing, delivering))

    # --- the end -------------------------------------------------------------------------
    def _settle(self, delivered: int) -> None:
        processor = self.path.processor
        processor.stats.outputs += delivered
        processor.task_completed(self.run, self.completing, delivered)
        self._settle_as(self.outcome)

    def _settle_as(self, outcome: Any) -> None:
        self.path.tasks.discard(self)
        self.path.processor.settle(self.run, outcome)

    def _hand_over(self, rest: Any) -> None:
        self.path.tasks.discard(self)
        self.path.processor.spawn(rest)

    def _crash(self, exc: Exception) -> None:
        self.path.tasks.discard(self)
        self.path.processor.crashed(exc)

    def cancel(self) -> None:
        self.cancelled = True
        self.path.tasks.discard(self)
        if self.waiting:
            self.waiting = False  # done: the scheduler drops it
            return
        program = self.program
        if program is not None:  # mid-task: killed, as a cancelled attempt's program is, and its slot freed
            self.program = None
            self.answer.cancel()  # as a cancelled attempt's wait is: the program's exit has no one to fail
            program.deadlines.stop(program)
            executor = self.path.processor.executor
            executor.programs.abandon(program)
            executor.scheduler.release(self.path.processor.partition)


async def _counted(delivering: Any, count: int) -> int:
    await delivering
    return count
