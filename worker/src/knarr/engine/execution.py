"""One task's life up to a terminal outcome: wait, expire, take a slot, run, retry or hand off.

The executor knows nothing of windows or groups: it returns what happened (``Succeeded``,
``Failed`` or ``Replaced``, the ledger's outcomes) and the ledger does the accounting.
"""

from __future__ import annotations

import asyncio
import os
import time
from functools import partial
from typing import Any

from knarr.api.handler import BaseHandler
from knarr.api.tasks import ErrorAction, ExecutorError, ExecutorResult, ExecutorTask
from knarr.api.trusted import trusted, trusted_builder
from knarr.config.models import ExecutorConfig
from knarr.engine import containment, native
from knarr.engine.environment import task_environment
from knarr.engine.ledger import Failed, Outcome, Replaced, Succeeded
from knarr.engine.persistent import ProgramPool, program_command
from knarr.engine.processes import ProcessOutcome, RunnerSlot, binary_problem, pidfd_problem, run_process
from knarr.engine.scheduling import SlotScheduler, priority_key
from knarr.errors import ConfigError
from knarr.observability import metrics
from knarr.observability.logging import get_logger
from knarr.observability.task_failures import task_failures
from knarr.observability.task_labels import TaskLabelCounter
from knarr.runtime.backoff import is_expired, retry_delay, start_time
from knarr.runtime.hooks import call_hook, call_sync_hook, defines

log = get_logger(component="executor")
_completed = metrics.tasks.labels("completed")
_result = trusted_builder(ExecutorResult)  # every task's
_task_duration = metrics.task_duration.labels()
_failed = metrics.tasks.labels("failed")
_DEFAULT_PRIORITY = priority_key(0)
# executor.spawn_ahead unset: hold no more tasks than the running ones clear in about this long, at
# their recent mean duration, so a later, more urgent task (or another partition's) waits at most
# about this long behind held ones. Tasks of a few milliseconds gain from holding; long ones do not.
# It also bounds how late the loop hears of an ended task while tasks are held (wake_up).
HOLD_BUDGET_SECONDS = 0.02
_MEAN_WEIGHT = 0.05  # of each ended task's duration in the running mean


class TaskExecutor:
    """Runs tasks for every partition through one shared slot scheduler."""

    def __init__(self, handler: BaseHandler, scheduler: SlotScheduler, config: ExecutorConfig) -> None:
        self.handler = handler
        self.scheduler = scheduler
        self.config = config
        contained = containment.active()
        self._marker = contained.task_env if contained else {}
        if contained:
            log.info("task processes contained", **contained.describe())
        # A plain dict, built once: posix_spawn converting os.environ (bytes-backed, decoded per
        # access) on every spawn cost about 40 us of worker CPU per task.
        self._base_env = task_environment(config.env_inherit, os.environ, config.env, always=self._marker)
        self._labels = TaskLabelCounter(config.metric_labels, config.metric_label_values_max)
        self.recorder: Any = None  # the flight recorder, or None (debug off)
        metrics.pool_active.set_function(lambda: scheduler.in_use)  # read at scrape time, not twice per task
        metrics.pool_held.set_function(lambda: scheduler.held)
        # Persistent programs get the same base environment; a task's own env travels in its request.
        self.programs = ProgramPool(config, self._base_env)
        self._runner = native.for_config(config.spawner)  # None: the spawner thread
        # Held places: tasks the native runner keeps ready to start the moment a running one ends.
        self._holds = self._runner is not None and scheduler.held_max > 0
        self._held_cap = scheduler.held_max
        self._mean_duration: float | None = None  # of spawned tasks, while spawn_ahead adapts (unset)
        self._adapts = self._holds and config.spawn_ahead is None
        self._hold_budget = config.max_executors * HOLD_BUDGET_SECONDS  # task-seconds the held ones may take
        if self._holds:
            self._owner = owner = self._runner.new_owner()
            scheduler.pass_slot = lambda: self._runner.pass_slot(owner)
            self._hold_at_most(0 if self._adapts else scheduler.held_max)  # adapting: none until a duration is known
        self._prioritizes = defines(handler, "task_priority")  # else every task has the default priority

    async def start(self) -> None:
        """Check and start what runs tasks, before the first one: ``executor.binary_path`` must be a program
        this machine can run (else every task falling back to it would fail with reason ``launch``, and
        ``on_error``'s default skips it), and the persistent programs start (``persistent.prestart``)."""
        problem = binary_problem(self.config.binary_path)
        if problem:
            raise ConfigError(f"{problem}. The worker took no message. Fix the path, or the image it runs in, "
                              "or unset it and give each task its own binary_path.")
        persistent = self.config.persistent
        if self._runner is None or (persistent is not None and persistent.command):
            problem = pidfd_problem()
            if problem:
                raise ConfigError(f"{problem}. The worker took no message. Run it on a newer kernel, or allow "
                                  "pidfd_open in the container's seccomp profile.")
        await self.programs.prestart()

    async def close(self) -> None:
        """Stop the persistent programs (spawned tasks end with their own runs)."""
        await self.programs.close()

    def _count(self, status: str, task: ExecutorTask) -> None:
        metrics.labelled(metrics.tasks, status).inc()
        self._labels.count(status, task.labels)

    def spawned(self, duration: float) -> None:
        """A task the native runner spawned (with held places) has ended after ``duration`` seconds: while
        ``spawn_ahead`` is unset, hold as many tasks as the running ones clear in HOLD_BUDGET_SECONDS at
        their mean duration."""
        if not self._adapts:
            return
        mean = self._mean_duration
        mean = duration if mean is None else mean + (duration - mean) * _MEAN_WEIGHT
        self._mean_duration = mean
        held = min(self._held_cap, int(self._hold_budget / max(mean, 1e-4)))
        if held != self.scheduler.held_max:
            self._hold_at_most(held)

    def _hold_at_most(self, held: int) -> None:
        """The scheduler's held places, and the runner's wake-up batch that follows them (wake_up)."""
        self.scheduler.held_max = held
        self._runner.set_batch(*wake_up(held, self.config.max_executors))

    def runner_slot(self, partition: int, held: bool, expires_at: float | None) -> RunnerSlot | None:
        """A task's grant as the native runner takes it (its event settles the grant), or None without held places."""
        if not self._holds:
            return None
        return RunnerSlot(held, expires_at, partial(self.scheduler.settle, partition), self.scheduler.take_free,
                          self._owner)

    def env_for(self, task: ExecutorTask) -> dict[str, str]:
        if not task.env:
            return self._base_env
        return task_environment((), {}, self._base_env, task.env, always=self._marker)

    def _priority(self, task: ExecutorTask) -> tuple:
        return priority_key(self.handler.task_priority(task))

    def max_attempts(self, task: ExecutorTask) -> int:
        return task.max_attempts if task.max_attempts is not None else self.config.max_retries + 1

    async def run(self, task: ExecutorTask, partition: int, attempt: int = 1, offset: int | None = None,
                  granted: bool = False, first: ExecutorResult | ExecutorError | None = None) -> tuple[Outcome, int]:
        """Run ``task`` until it succeeds, fails for good or is replaced; returns the outcome and attempts made.

        ``offset``: the first message the task works for, which the flight recorder files its events under.
        ``granted``: the first attempt already holds its slot (direct.py handed it over). ``first``: the
        first attempt's outcome, already come (direct.py hands over what it does not carry on).
        """
        while True:
            if first is not None:
                outcome, first = first, None
            else:
                outcome = await self._attempt(task, partition, attempt, offset, granted)
                granted = False
            if self.recorder is not None:
                self.record_attempt(task, partition, offset, outcome)
            if isinstance(outcome, ExecutorResult):
                return Succeeded(outcome), attempt
            error = outcome
            if error.reason == "expired":
                self._count("expired", task)
                task_failures.failed(task, error, partition, "dropped: expired before it could start")
                return Failed(error), attempt
            _failed.inc()
            self._labels.count("failed", task.labels)
            decision = await self._on_error(task, error)
            if isinstance(decision, list):
                self._count("replaced", task)
                if self.recorder is not None:
                    self.recorder.record("task_replaced", partition, offset, task.task_id, task.parent_task_id,
                                         data={"replacements": [t.task_id for t in decision], "attempt": attempt})
                log.debug("task failed; replaced by on_error", replacements=len(decision), **task_context(task))
                return Replaced(error, decision), attempt
            if decision is ErrorAction.RETRY and attempt < self.max_attempts(task):
                self._count("retried", task)
                delay = retry_delay(attempt, self.config.retry_backoff_base_seconds, self.config.retry_backoff_max_seconds)
                task_failures.failed(task, error, partition, f"retry {attempt + 1} of {self.max_attempts(task)} in {delay:.2f}s")
                await asyncio.sleep(delay)  # without holding a slot, so other tasks use the pool meanwhile
                attempt += 1
                continue
            if decision is ErrorAction.RETRY:
                task_failures.failed(task, error, partition, f"retries exhausted after {attempt} attempt(s)")
                return Failed(error, retries_exhausted=True), attempt
            task_failures.failed(task, error, partition, "skipped")
            return Failed(error), attempt

    async def _attempt(self, task: ExecutorTask, partition: int, attempt: int,
                       offset: int | None = None, granted: bool = False) -> ExecutorResult | ExecutorError:
        if task.precomputed is not None:
            pre = task.precomputed
            result = trusted(
                ExecutorResult, task=task, exit_code=pre.exit_code, stdout=pre.stdout, stderr=pre.stderr,
                duration_seconds=pre.duration_seconds, pid=None, attempt=attempt,
            )
            self._count("precomputed", task)
            if pre.exit_code == 0:
                return result
            return task_error(task, attempt, result, exit_code=pre.exit_code, stderr=pre.stderr)

        if attempt == 1:
            begin = start_time(time.time(), task.delay_seconds, task.not_before)
            wait = begin - time.time()
            if wait > 0:
                await asyncio.sleep(wait)  # no slot held while delayed
        if is_expired(time.time(), task.expires_at):
            return _expired(task, attempt)

        command = program_command(task, self.config)
        binary = task.binary_path or self.config.binary_path
        if command == ():
            message = ("the task asks for a persistent program (persistent=True) but none is set: "
                       "set executor.persistent.command in the config or persistent_command on the task")
            result = _synthetic(task, attempt, message)
            return task_error(task, attempt, result, stderr=message, exception=message, reason="launch")
        if command is None and not binary:
            message = "no binary to run: set executor.binary_path in the config or binary_path on the task"
            result = _synthetic(task, attempt, message)
            return task_error(task, attempt, result, stderr=message, exception=message, reason="launch")

        waiting_since = time.monotonic() if self.recorder is not None else 0.0
        native_run = command is None and self._holds and self._runner.claim(asyncio.get_running_loop())
        held = False if granted else await self.scheduler.acquire(partition, self.priority(task), can_hold=native_run)
        slot = None
        if self.recorder is not None:
            self.record_start(task, partition, offset, time.monotonic() - waiting_since, attempt, held)
        try:
            if is_expired(time.time(), task.expires_at):  # expired while waiting for a slot: never run
                return _expired(task, attempt)
            timeout = task.timeout_seconds or self.config.task_timeout_seconds
            if command is not None:  # persistent mode: a program that is already running takes the task
                proc = await self.programs.run(command, task, timeout)
            else:
                if native_run:  # the runner's event settles the grant (SlotScheduler.settle)
                    slot = self.runner_slot(partition, held, task.expires_at)
                proc = await run_process([binary, *task.args], stdin=task.stdin, env=self.env_for(task),
                                         timeout=timeout, max_output_bytes=self.config.max_output_bytes,
                                         runner=self._runner, slot=slot)
        finally:
            if slot is None or not slot.submitted:
                self.scheduler.give_back(partition, held if slot is None else slot.held)
        if proc.expired:  # it waited (in the runner's held queue, or for a program) past its expires_at: never run
            return _expired(task, attempt)
        if native_run:
            self.spawned(proc.duration_seconds)
        return self.outcome_of(task, attempt, proc)

    def record_start(self, task: ExecutorTask, partition: int, offset: int | None, waited: float, attempt: int,
                     held: bool) -> None:
        """The flight recorder's task_started: after ``waited`` seconds for a slot, or (``held``) a held place."""
        data = {"slot_wait_ms": round(waited * 1000, 3), "attempt": attempt, "args": task.args}
        if held:  # handed to the native runner, which starts it when a running task ends
            data["held"] = True
        self.recorder.record("task_started", partition, offset, task.task_id, task.parent_task_id, data=data)

    def record_attempt(self, task: ExecutorTask, partition: int, offset: int | None,
                       outcome: ExecutorResult | ExecutorError) -> None:
        """The flight recorder's end of an attempt (task_finished or task_failed)."""
        _record_attempt(self.recorder, task, partition, offset, outcome)

    def priority(self, task: ExecutorTask) -> tuple:
        """The task's place in the slot order: task_priority's answer, or the default."""
        if not self._prioritizes:
            return _DEFAULT_PRIORITY
        return call_sync_hook("task_priority", self._priority, task, log=log, default=_DEFAULT_PRIORITY,
                              **task_context(task)).value

    def direct_start(self, task: ExecutorTask) -> tuple[tuple[str, ...] | None, list[str] | None] | None:
        """How a first attempt may start on direct.py's path: ``(command, None)`` in the persistent
        program ``command``, or ``(None, argv)`` spawned with ``argv`` by the native runner on this
        loop; None when the task needs what only this coroutine path does: a precomputed result, a
        delay, an expiry, a missing program or binary, or no native runner (the spawner thread)."""
        if task.precomputed is not None or task.delay_seconds or task.not_before or task.expires_at is not None:
            return None
        command = program_command(task, self.config)
        if command is not None:
            return (command, None) if command else None
        runner = self._runner
        binary = task.binary_path or self.config.binary_path
        if runner is None or not binary or not runner.claim(asyncio.get_running_loop()):
            return None
        return None, [binary, *task.args]

    @property
    def runner(self) -> native.NativeRunner | None:
        """The native runner tasks are spawned through (None: the spawner thread)."""
        return self._runner

    @property
    def holds(self) -> bool:
        """Whether spawned tasks may be granted held places (the native runner, ``spawn_ahead`` not 0)."""
        return self._holds

    def outcome_of(self, task: ExecutorTask, attempt: int, proc: ProcessOutcome) -> ExecutorResult | ExecutorError:
        """What a run's process outcome makes of the attempt: its result (exit 0), or why it failed."""
        if proc.exit_code == 0 and not proc.failure:
            return self.succeeded(task, attempt, proc.stdout, proc.stderr, proc.duration_seconds, proc.pid,
                                  proc.stdout_truncated, proc.stderr_truncated)
        result = trusted(
            ExecutorResult, task=task, exit_code=proc.exit_code, stdout=proc.stdout, stderr=proc.stderr,
            duration_seconds=proc.duration_seconds, pid=proc.pid, attempt=attempt,
            stdout_truncated=proc.stdout_truncated, stderr_truncated=proc.stderr_truncated,
        )
        _task_duration.observe(proc.duration_seconds)
        if proc.stdout_truncated or proc.stderr_truncated:
            metrics.task_output_truncated.inc()
        if proc.failure:  # persistent mode: the program died mid-task (crash) or broke the protocol (even
            # an exit with code 0 mid-task is no answer)
            return task_error(task, attempt, result, exit_code=proc.exit_code, stderr=proc.stderr, pid=proc.pid,
                              exception=proc.stderr, reason=proc.failure)
        if proc.timed_out:
            metrics.task_timeouts.inc()
            return task_error(task, attempt, result, pid=proc.pid, stderr=proc.stderr, exception=proc.stderr, reason="timeout")
        if proc.launch_error:
            return task_error(task, attempt, result, stderr=proc.stderr, exception=proc.launch_error, reason="launch")
        return task_error(task, attempt, result, exit_code=proc.exit_code, stderr=proc.stderr, pid=proc.pid,
                          stderr_truncated=proc.stderr_truncated)

    def succeeded(self, task: ExecutorTask, attempt: int, stdout: str, stderr: str, duration: float,
                  pid: int | None, stdout_truncated: bool = False, stderr_truncated: bool = False) -> ExecutorResult:
        """The result of an attempt whose process exited 0, counted."""
        result = _result(task=task, exit_code=0, stdout=stdout, stderr=stderr, duration_seconds=duration, pid=pid,
                         attempt=attempt, stdout_truncated=stdout_truncated, stderr_truncated=stderr_truncated)
        _task_duration.observe(duration)
        if stdout_truncated or stderr_truncated:
            metrics.task_output_truncated.inc()
        _completed.inc()
        self._labels.count("completed", task.labels)
        return result

    async def _on_error(self, task: ExecutorTask, error: ExecutorError) -> ErrorAction | list[ExecutorTask]:
        called = await call_hook("on_error", self.handler.on_error, task, error, log=log, **task_context(task))
        if called.raised:
            return ErrorAction.SKIP
        decision = called.value
        if isinstance(decision, ErrorAction):
            return decision
        if isinstance(decision, list) and all(isinstance(t, ExecutorTask) for t in decision):
            return decision
        if isinstance(decision, str) and decision in ("retry", "skip"):
            return ErrorAction(decision)
        log.error(
            "on_error returned something that is neither ErrorAction nor list[ExecutorTask]; the task is skipped",
            returned=repr(decision)[:200], **task_context(task),
        )
        return ErrorAction.SKIP


def _record_attempt(recorder: Any, task: ExecutorTask, partition: int, offset: int | None,
                    outcome: ExecutorResult | ExecutorError) -> None:
    """One attempt's end in the flight recorder: task_finished (exit 0) or task_failed, with its output."""
    if isinstance(outcome, ExecutorResult):
        recorder.record("task_finished", partition, offset, task.task_id, task.parent_task_id,
                        outcome.duration_seconds * 1000, {
                            "exit_code": outcome.exit_code, "args": task.args, "attempt": outcome.attempt,
                            "pid": outcome.pid, "stdout": outcome.stdout, "stderr": outcome.stderr})
        return
    result = outcome.result
    recorder.record("task_failed", partition, offset, task.task_id, task.parent_task_id,
                    result.duration_seconds * 1000 if result is not None else None, {
                        "reason": outcome.reason, "exit_code": outcome.exit_code, "args": task.args,
                        "attempt": outcome.attempt, "pid": outcome.pid, "stderr": outcome.stderr,
                        "stdout": result.stdout if result is not None else None, "error": outcome.exception})


def wake_up(held: int, max_executors: int) -> tuple[int, float]:
    """While ``held`` tasks may be held: how many ended tasks the runner lets gather before it wakes the
    loop, and for how long at most.

    Each wake-up of the loop costs it more than the ended task it brings, so it should bring many: the
    loop is woken once all but 2 x max_executors of the held tasks could have started (those cover its
    way back to the runner), after 1.5 x max_executors ended tasks at the least, and HOLD_BUDGET_SECONDS
    after the first at the latest. Without held tasks the loop is woken at once, whatever this says.
    """
    return max(1, max_executors + max_executors // 2, held - 2 * max_executors), HOLD_BUDGET_SECONDS


def task_context(task: ExecutorTask) -> dict[str, object]:
    """What names a task in a log line: its id, and its labels when it has any."""
    if task.labels:
        return {"task_id": task.task_id, "labels": task.labels}
    return {"task_id": task.task_id}


def _synthetic(task: ExecutorTask, attempt: int, stderr: str) -> ExecutorResult:
    return trusted(
        ExecutorResult, task=task, exit_code=-1, stdout="", stderr=stderr, duration_seconds=0.0, pid=None, attempt=attempt
    )


def task_error(task: ExecutorTask, attempt: int, result: ExecutorResult | None, **fields: object) -> ExecutorError:
    """Why a task's attempt failed: ``reason`` 'failed' unless given, the rest from ``fields`` or their defaults."""
    fields.setdefault("reason", "failed")
    return ExecutorError.model_construct(
        task=task, attempt=attempt, result=result,
        exit_code=fields.get("exit_code"), stderr=fields.get("stderr", ""), exception=fields.get("exception"),
        pid=fields.get("pid"), reason=fields["reason"], stderr_truncated=fields.get("stderr_truncated", False),
    )


def _expired(task: ExecutorTask, attempt: int) -> ExecutorError:
    message = f"task expired at {task.expires_at} before it could start; it was never run"
    return task_error(task, attempt, None, stderr=message, exception=message, reason="expired")
