"""A task's usual life through callbacks, without an asyncio task of its own.

Most tasks go one way: a slot, then either an idle persistent program and its answer or a spawn
through the native runner and its end event, exit code 0, ``on_task_complete`` returning at
once, outputs for one Kafka sink, the broker's confirmation. On this path each step is a
callback of the one before rather than an await in a chain of coroutines: no asyncio task, slot
future or coroutine per task, which is a quarter of persistent mode's event loop time per task
and a sixth of spawn mode's (docs/performance.md). The steps themselves are the engine's usual
ones, called from here: the scheduler's order (a held place included, for the runner), the pool's
programs or the runner's spawn (processes.py), the executor's outcome, the hook door, the sink
manager, the ledger.

The moment a task leaves that way it goes on in an asyncio task of its own, through the same code
as every other task (processor.py, execution.py), from where it is:

- no idle program when its slot comes (one is starting): the attempt, holding its slot;
- a failed attempt (exit code, timeout, crash, protocol, a launch error): retries and ``on_error``,
  from that outcome;
- ``on_task_complete`` waiting on something: the rest of that call, then delivery and settling;
- outputs for several sinks, or a sink that confirms through no future: the sink manager's delivery;
- a delivery that fails: the sink manager's handling of that failure (retries, outage waits, DLQ).

What needs more from the start takes the asyncio task from the start (``TaskExecutor.direct_start``):
the spawner thread (no native runner), a precomputed result, a delay or an expiry, a missing binary
or program. The flight recorder's task events are recorded on either path alike. ``stop`` gives up
what is on this path as cancelling the asyncio tasks gives up the rest: a waiting task leaves the
queue, a program mid-task is killed and its slot freed, a spawned or held task is killed (or
dropped from the runner's queue) and reaped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, Protocol

from knarr.api.handler import BaseHandler
from knarr.api.tasks import ExecutorError, ExecutorResult
from knarr.engine.execution import TaskExecutor, task_context
from knarr.engine.ledger import Failed, Ledger, Outcome, Run, Succeeded
from knarr.engine.native import Ended, NativeJob
from knarr.engine.processes import ProcessOutcome, native_outcome, native_success, submit_native
from knarr.engine.programs import Program, ProgramFailure
from knarr.runtime.hooks import Called, start_hook
from knarr.runtime.stats import RunStats
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
    ledger: Ledger

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
        if run.attempt != 1:
            return False
        start = self.executor.direct_start(run.task)
        if start is None:
            return False
        command, argv = start
        if command is not None:
            return _InProgram(self, run, command).begin()
        return _Spawned(self, run, argv).begin()

    def stop(self) -> None:
        """Give up every task on the path: the waiting ones first, so no slot freed here goes to one of them."""
        tasks = sorted(self.tasks, key=lambda task: task.running)
        for task in tasks:
            task.cancel()


class _Direct:
    """One task on the direct path: waiting for a slot, running (``_InProgram``, ``_Spawned``), or delivering."""

    __slots__ = ("path", "run", "timeout", "started", "queued", "waiting", "cancelled", "outcome", "completing",
                 "sink", "payloads", "sent")

    def __init__(self, path: DirectPath, run: Run) -> None:
        self.path, self.run = path, run
        self.waiting = self.cancelled = False
        self.timeout = run.task.timeout_seconds or path.executor.config.task_timeout_seconds

    @property
    def running(self) -> bool:
        raise NotImplementedError

    # --- a slot --------------------------------------------------------------------------
    def _queue(self, priority: tuple, can_hold: bool) -> None:
        """A slot (or, ``can_hold``, a held place) now, or a place in the scheduler's order."""
        processor = self.path.processor
        scheduler, partition = processor.executor.scheduler, processor.partition
        self.path.tasks.add(self)
        if processor.executor.recorder is not None:
            self.queued = time.monotonic()  # (its slot wait, for task_started)
        if scheduler.take(partition):
            self._granted(False)
        elif can_hold and scheduler.take_held(partition):
            self._granted(True)
        else:
            self.waiting = True
            scheduler.wait(partition, priority, self, can_hold)

    def done(self) -> bool:
        """(For the scheduler:) no longer waiting for a slot."""
        return not self.waiting

    def set_result(self, held: bool) -> None:
        """(For the scheduler:) the slot (``held``: a held place) is this task's."""
        self.waiting = False
        self._granted(held)

    def _granted(self, held: bool) -> None:
        raise NotImplementedError

    def _record_start(self, held: bool) -> None:
        """The flight recorder's task_started, when it is on (the attempt is under way)."""
        processor = self.path.processor
        executor = processor.executor
        if executor.recorder is not None:
            executor.record_start(self.run.task, processor.partition, self.run.first_offset,
                                  time.monotonic() - self.queued, 1, held)

    def _attempted(self, outcome: ExecutorResult | ExecutorError) -> None:
        """The attempt's outcome: on to on_task_complete, or (failed) retries and on_error in a task of its own
        (which records the attempt's end, as for its later attempts)."""
        if isinstance(outcome, ExecutorError):
            self._hand_over(self.path.processor.run_task(self.run, first=outcome))
            return
        self._succeeded(outcome)

    def _succeeded(self, result: ExecutorResult) -> None:
        """The attempt's result (exit code 0): its end recorded, on to on_task_complete."""
        processor = self.path.processor
        if processor.executor.recorder is not None:
            processor.executor.record_attempt(self.run.task, processor.partition, self.run.first_offset, result)
        self._complete(Succeeded(result))

    def _complete(self, outcome: Succeeded) -> None:
        processor, run = self.path.processor, self.run
        self.outcome, self.completing = outcome, time.monotonic()
        if not processor.completes_tasks:
            self._settle(0)
            return
        called = start_hook("on_task_complete", processor.handler.on_task_complete, outcome.result,
                            log=processor.log, context=task_context(run.task))
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
        processor.ledger.delivering_from(run)
        sink, payloads = plan[0]
        if len(plan) > 1 or not hasattr(sink, "begin"):
            self._hand_over(processor.deliver_and_settle(run, outcome, self.completing,
                                                         processor.sinks.deliver_plan(plan, self._origin())))
            return
        self.sink, self.payloads, self.sent = sink, payloads, time.monotonic()
        try:
            confirmed = sink.begin(payloads)
        except Exception as exc:  # refused at once (a record too large, say)
            self._redeliver(sink.failure(exc))
            return
        confirmed.add_done_callback(self._delivered)

    def _origin(self) -> Origin:
        """Where the outputs come from, made when something needs it (a failed delivery, the flight recorder)."""
        processor, run = self.path.processor, self.run
        return Origin.of(processor.partition, [group.message for group in run.groups], "task", run.task.task_id)

    # --- the sink's confirmation ---------------------------------------------------------
    def _delivered(self, confirmed: asyncio.Future) -> None:
        failure = None if confirmed.cancelled() else confirmed.exception()  # (taken even when given up)
        if self.cancelled:
            return
        try:
            if failure is not None:
                self._redeliver(self.sink.failure(failure))
                return
            sinks = self.path.processor.sinks
            sinks.delivered(self.sink, self.payloads, None if sinks.recorder is None else self._origin(), self.sent)
            self._settle(len(self.payloads))
        except Exception as exc:
            self._crash(exc)

    def _redeliver(self, failure: Exception) -> None:
        """The sink refused the first try: its failure handling goes on in a task of its own."""
        processor = self.path.processor
        delivering = _counted(processor.sinks.deliver_to(self.sink, self.payloads, self._origin(), failure),
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
        self._abandon()

    def _abandon(self) -> None:
        """Give up the running task (``stop``), as cancelling its attempt would."""
        raise NotImplementedError


class _InProgram(_Direct):
    """A task run by an idle persistent program."""

    __slots__ = ("command", "request", "program", "answer")

    def __init__(self, path: DirectPath, run: Run, command: tuple[str, ...]) -> None:
        super().__init__(path, run)
        self.command = command
        self.program: Program | None = None

    @property
    def running(self) -> bool:
        return self.program is not None

    def begin(self) -> bool:
        executor, task = self.path.processor.executor, self.run.task
        request = executor.programs.request(self.command, task, self.timeout, time.monotonic())
        if isinstance(request, ProcessOutcome):  # no frame carries this task: the attempt says why
            return False
        self.request = request
        self._queue(executor.priority(task), False)
        return True

    def _granted(self, held: bool) -> None:
        processor = self.path.processor
        try:
            program = processor.executor.programs.take_idle(self.command)
            if program is None:  # none idle (one is starting, or was replaced): the attempt, with its slot
                self._hand_over(processor.run_task(self.run, granted=True))
                return
            self.program, self.started = program, time.monotonic()  # its duration counts from here, not the wait
            self._record_start(False)
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
            self._attempted(executor.outcome_of(task, 1, proc))
        except Exception as exc:
            self._crash(exc)

    def _abandon(self) -> None:
        program = self.program
        if program is not None:  # mid-task: killed, as a cancelled attempt's program is, and its slot freed
            self.program = None
            self.answer.cancel()  # as a cancelled attempt's wait is: the program's exit has no one to fail
            program.deadlines.stop(program)
            executor = self.path.processor.executor
            executor.programs.abandon(program)
            executor.scheduler.release(self.path.processor.partition)


class _Spawned(_Direct):
    """A task spawned by the native runner (processes.py's submit_native and native_outcome)."""

    __slots__ = ("argv", "slot", "job")

    def __init__(self, path: DirectPath, run: Run, argv: list[str]) -> None:
        super().__init__(path, run)
        self.argv = argv
        self.job: NativeJob | None = None

    @property
    def running(self) -> bool:
        return self.job is not None

    def begin(self) -> bool:
        executor = self.path.processor.executor
        self._queue(executor.priority(self.run.task), executor.holds)
        return True

    def _granted(self, held: bool) -> None:
        processor = self.path.processor
        executor, partition, task = processor.executor, processor.partition, self.run.task
        try:
            self.slot = slot = executor.runner_slot(partition, held, None)  # None: no held places, released here
            self._record_start(held)
            self.started = time.monotonic()
            job = submit_native(executor.runner, self.argv, task.stdin, executor.env_for(task), self.timeout,
                                executor.config.max_output_bytes, slot, self.started, on_end=self._ended)
            if isinstance(job, ProcessOutcome):  # exec cannot take it: the grant goes back, the attempt failed
                executor.scheduler.give_back(partition, held if slot is None else slot.held)
                self._attempted(executor.outcome_of(task, 1, job))
                return
            self.job = job
        except Exception as exc:
            self._crash(exc)

    def _ended(self, end: Ended) -> None:
        if self.cancelled:
            return
        processor = self.path.processor
        executor, slot = processor.executor, self.slot
        try:
            self.job = None
            if slot is None:  # (else the runner's event settled the grant)
                executor.scheduler.release(processor.partition)
            duration = native_success(end, self.started)
            if duration is not None:  # exit code 0, in time, the output whole: a result at once
                executor.spawned(duration)
                self._succeeded(executor.succeeded(self.run.task, 1, end.stdout, end.stderr, duration, end.pid))
                return
            proc = native_outcome(end, self.argv, self.timeout, self.started, slot is not None and slot.held)
            executor.spawned(proc.duration_seconds)
            self._attempted(executor.outcome_of(self.run.task, 1, proc))
        except Exception as exc:
            self._crash(exc)

    def _abandon(self) -> None:
        job = self.job
        if job is not None:  # running or held: killed and reaped, as a cancelled attempt's is
            self.job = None
            executor = self.path.processor.executor
            executor.runner.kill(job, wait=True)
            if self.slot is None:  # (else the runner's event settles the grant)
                executor.scheduler.release(self.path.processor.partition)


async def _counted(delivering: Any, count: int) -> int:
    await delivering
    return count
