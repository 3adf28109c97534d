"""Persistent executors: long-lived programs that run many tasks each (docs/task-protocol.md).

Spawning a process per task costs a fork, an exec and the program's own start-up; for a tiny
task (a lookup, a regex, a small model call) that is the whole cost. Here a program
(programs.py) starts once and runs task after task, one at a time; this module is the pool.

- **One program per pool slot.** A task holds a slot (the SlotScheduler's) while its program
  runs it, so no more programs are busy than there are slots; starting a new one when the
  worker already has ``max_executors`` alive stops an idle one of another command first.
- **Reuse last in, first out.** The programs that work stay warm; the extra ones a burst
  started reach ``max_idle_seconds`` and are stopped.
- **Failures replace the program, never the worker.** A task past its deadline, a program
  that dies mid-task or writes something that is no frame: the program is killed and the task
  fails (reasons ``timeout``, ``crash``, ``protocol``) through the usual ``on_error`` path;
  the next task starts a new program, after a delay that grows while programs keep failing
  (``restart_backoff_*``) and resets on the first task that succeeds.
- **A program that cannot start fails no task of the worker's own command.** At the worker's
  start (``prestart``), if no program of ``executor.persistent.command`` can start, the worker
  does not start either. Later, a task that needs one waits, holding its slot, while starts
  are tried after the restart backoff (``stall`` says why, and the worker's readiness fails);
  it goes on once one starts. Only a task's own ``persistent_command`` failing to start fails
  that task (reason ``launch``).
- **Limits checked after each task**: ``max_tasks_per_process`` and ``max_rss_mb`` retire a
  program once the task it was running has finished.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from knarr.api.tasks import ExecutorTask
from knarr.config.models import ExecutorConfig, PersistentConfig
from knarr.engine.capture import decode_head
from knarr.engine.frames import PROTOCOL_VERSION, Frame, FrameError, encode
from knarr.engine.processes import ProcessOutcome, launch_problem
from knarr.engine.programs import Deadlines, Program, ProgramFailure, rss_bytes
from knarr.errors import ConfigError
from knarr.observability import metrics
from knarr.observability.logging import get_logger
from knarr.runtime.backoff import retry_delay

log = get_logger(component="persistent")


def program_command(task: ExecutorTask, config: ExecutorConfig) -> tuple[str, ...] | None:
    """The program a task runs in, or None for spawn mode. An empty tuple: persistent asked, none configured."""
    if task.persistent is False:
        return None
    if task.persistent_command:
        return tuple(task.persistent_command)
    default = config.persistent.command if config.persistent is not None else None
    if task.persistent:
        return tuple(default) if default else ()
    if default and task.binary_path is None:
        return tuple(default)
    return None


class ProgramPool:
    """The worker's persistent programs, by command: started on demand, reused, replaced, stopped."""

    def __init__(self, config: ExecutorConfig, env: Mapping[str, str]) -> None:
        self.settings: PersistentConfig = config.persistent or PersistentConfig()
        self.keep = config.max_output_bytes
        self.slots = config.max_executors
        self.env = dict(env)
        self._idle: dict[tuple[str, ...], list[Program]] = {}
        self._live: set[Program] = set()
        self._failures = 0  # consecutive program failures (crash, protocol, launch): the restart backoff
        self._next_start = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._deadlines = Deadlines()  # every program's wait for an answer, on one timer
        command = self.settings.command
        self._configured: tuple[str, ...] | None = tuple(command) if command else None
        self.stall: str | None = None  # set while no program of the configured command can start: tasks wait
        self._waiting = 0  # tasks waiting for a program of it meanwhile
        self._stalled_since = 0.0

    @property
    def live(self) -> int:
        return len(self._live)

    async def run(self, command: tuple[str, ...], task: ExecutorTask, timeout: float) -> ProcessOutcome:
        """Run one task in a program of ``command``; the outcome reads like spawn mode's."""
        started = time.monotonic()
        request = self.request(command, task, timeout, started)
        if isinstance(request, ProcessOutcome):
            return request
        program = await self._take_or_wait(command, task.expires_at)
        if isinstance(program, ProgramFailure):
            return _launch_failure(command, program.message, started)
        if program is None:  # its expires_at passed while it waited for a program: never run
            return ProcessOutcome(-1, "", "", None, 0.0, expired=True)
        try:
            frame = await program.ask(request, timeout, "task")
        except ProgramFailure as exc:
            return self.answered(program, task, started, failure=exc)
        except BaseException:  # cancelled (shutdown, revoke): it is mid-task, so it cannot be reused
            self.abandon(program)
            raise
        return self.answered(program, task, started, frame=frame)

    def request(self, command: tuple[str, ...], task: ExecutorTask, timeout: float,
                started: float) -> bytes | ProcessOutcome:
        """The task's request frame, or the launch failure of a task no frame can carry."""
        try:
            return encode({"type": "task", "id": task.task_id, "args": task.args, "env": task.env,
                           "timeout_seconds": timeout}, (task.stdin or "").encode())
        except (UnicodeEncodeError, FrameError) as exc:
            problem = launch_problem(task.args, task.env, task.stdin) or str(exc)
            return _launch_failure(command, problem, started)

    def take_idle(self, command: tuple[str, ...]) -> Program | None:
        """A running program of ``command`` with nothing to do, if there is one (the last one idle first)."""
        idle = self._idle.get(command)
        while idle:
            program = idle.pop()
            if program.gone is None:
                return program
        return None

    def answered(self, program: Program, task: ExecutorTask, started: float, frame: Frame | None = None,
                 failure: ProgramFailure | None = None) -> ProcessOutcome:
        """The task's outcome from the program's answer (``frame``) or its ``failure``; the program goes
        back to the idle ones, or is replaced when it failed."""
        if failure is None:
            header = frame.header
            problem = _result_problem(header, task.task_id)
            if problem:
                program.fail("protocol", problem)
                failure = ProgramFailure("protocol", f"the program answered with a malformed result: {problem}")
        if failure is not None:
            self._forget(program, failure.reason)
            duration = round(time.monotonic() - started, 3)
            if failure.reason == "timeout":
                return ProcessOutcome(-1, "", failure.message, program.pid, duration, timed_out=True)
            self._failed()
            log.warning("persistent program failed", reason=failure.reason, error=failure.message,
                        task_id=task.task_id)
            code = failure.exit_code if failure.exit_code is not None else -1
            return ProcessOutcome(code, "", failure.message, program.pid, duration, failure=failure.reason)
        elapsed = time.monotonic() - started
        reported = header.get("duration_seconds")
        duration = reported if type(reported) in (int, float) and 0 <= reported <= elapsed else elapsed
        self._failures = 0
        program.tasks += 1
        self._release(program)
        stdout, stderr = frame.parts
        out_cut, err_cut = frame.truncated
        return ProcessOutcome(header["exit_code"], decode_head(stdout, out_cut), decode_head(stderr, err_cut),
                              program.pid, round(duration, 3), stdout_truncated=out_cut, stderr_truncated=err_cut)

    def abandon(self, program: Program) -> None:
        """The task it runs was cancelled (shutdown, revoke): mid-task, it cannot be reused."""
        program.kill("was stopped mid-task")
        self._forget(program, "cancelled")

    # --- programs in and out ----------------------------------------------------------------------
    async def prestart(self) -> None:
        """One program of the configured command per slot, started before any task needs it (``prestart``).

        When none of them can start, the worker must not either: ProgramsCannotStart says why, before
        a message is taken (otherwise every task would fail with reason ``launch``, and ``on_error``'s
        default skips it). When only some cannot, that is logged and counts as a failed start (the
        restart backoff); tasks start programs again when they need them, as without ``prestart``."""
        command = self._configured
        if not command or not self.settings.prestart or self._closed:
            return
        begun = time.monotonic()
        results = await asyncio.gather(*(self._start(command) for _ in range(self.slots - len(self._live))),
                                       return_exceptions=True)
        started = [program for program in results if isinstance(program, Program)]
        for program in started:
            self._release(program)
        failures = [result for result in results if isinstance(result, ProgramFailure)]
        if failures and not started:
            raise ProgramsCannotStart(command, failures[0].message)
        if failures:
            self._failed()
            log.warning("persistent programs failed to start; tasks will start them when they need them",
                        command=list(command), failed=len(failures), started=len(started), error=failures[0].message)
        else:
            log.info("persistent programs started", command=list(command), programs=len(started),
                     seconds=round(time.monotonic() - begun, 3))
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, ProgramFailure):
                raise result  # cancelled (a stop during start-up): the started ones are live, close() stops them

    async def _take_or_wait(self, command: tuple[str, ...], expires_at: float | None) -> Program | ProgramFailure | None:
        """A program of ``command`` for a task. When the configured command's cannot start, the task
        waits, holding its slot, and the start is tried again after the restart backoff until one
        starts (``stall`` says why meanwhile): the command is the worker's, not the task's, so its
        failing is an outage, not the task's failure. None: the task's ``expires_at`` passed while
        it waited. A task's own ``persistent_command`` that cannot start is that task's launch
        failure (returned). The stall lasts while a task waits: it ends when a program starts, or
        when the last task waiting leaves otherwise (expired, or cancelled by a revoke or a stop)."""
        waited = False
        try:
            while True:
                try:
                    program = await self._take(command)
                except ProgramFailure as exc:
                    self._failed()
                    if command != self._configured:
                        return exc
                    if not waited:
                        waited = True
                        self._waiting += 1
                    self._stalled(exc.message)
                    if not await self._backoff_within(expires_at):
                        return None
                    continue  # the restart backoff is over: start again
                if command == self._configured:
                    self._unstalled("persistent programs start again; waiting tasks go on")
                return program
        finally:
            if waited:
                self._waiting -= 1
                if not self._waiting:
                    self._unstalled("no task waits for a persistent program any more")

    async def _backoff_within(self, expires_at: float | None) -> bool:
        """Wait out the restart backoff, or until ``expires_at`` if that comes first (False then: a
        waiting task expires on time, not up to a backoff late)."""
        wait = self._next_start - time.monotonic()
        left = None if expires_at is None else expires_at - time.time()
        if left is not None and left <= max(wait, 0.0):
            await asyncio.sleep(max(left, 0.0))
            return False
        if wait > 0:
            await asyncio.sleep(wait)
        return True

    def _stalled(self, why: str) -> None:
        if self.stall is None:
            self._stalled_since = time.monotonic()
            metrics.persistent_stalled.set(1)
            log.warning("no persistent program can start; tasks wait for one (nothing fails, nothing is committed), "
                        "retrying with backoff", command=list(self._configured), error=why)
        self.stall = f"executor.persistent.command {list(self._configured)} cannot start, tasks wait for it: {why}"

    def _unstalled(self, what: str) -> None:
        if self.stall is not None:
            self.stall = None
            metrics.persistent_stalled.set(0)
            log.info(what, command=list(self._configured), stalled_seconds=round(time.monotonic() - self._stalled_since, 1))

    async def _take(self, command: tuple[str, ...]) -> Program:
        program = self.take_idle(command)
        if program is not None:
            return program
        if len(self._live) >= self.slots:
            self._evict_idle()
        wait = self._next_start - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)  # the restart backoff (holding the slot: its program is what failed)
        return await self._start(command)

    async def _start(self, command: tuple[str, ...]) -> Program:
        """A started program of ``command``, that has said hello; ProgramFailure (counted) if none could start."""
        try:
            return await self._launch(command)
        except ProgramFailure:
            metrics.persistent_start_failures.inc()
            raise

    async def _launch(self, command: tuple[str, ...]) -> Program:
        try:
            program = await Program.start(command, self.env, self.keep, self._deadlines)
        except OSError as exc:
            raise ProgramFailure("launch", exc.strerror or str(exc)) from None
        self._live.add(program)
        program.exited.add_done_callback(lambda _: self._live.discard(program))
        try:
            frame = await program.ask(b"", self.settings.start_timeout_seconds, "waiting for its hello frame")
        except ProgramFailure as exc:
            program.kill("failed to start")
            tail = "" if exc.reason == "crash" else program.stderr_tail()  # a crash's message has it already
            raise ProgramFailure("launch", f"no hello frame: {exc.message}{tail}") from None
        except BaseException:
            program.kill("was stopped while starting")
            raise
        header = frame.header
        if header.get("type") != "hello" or header.get("protocol") != PROTOCOL_VERSION:
            program.fail("protocol", "bad hello")
            raise ProgramFailure("launch", f"its first frame must be a hello speaking protocol {PROTOCOL_VERSION}, "
                                           f"got {_shown(header)}")
        log.debug("persistent program started", command=list(command), pid=program.pid)
        return program

    def _release(self, program: Program) -> None:
        settings = self.settings
        if program.gone is not None or self._closed:
            self._forget(program, "shutdown")
            return
        if settings.max_tasks_per_process is not None and program.tasks >= settings.max_tasks_per_process:
            self._retire(program, "max_tasks")
            return
        if settings.max_rss_mb is not None:
            rss = rss_bytes(program.pid)
            if rss is not None and rss > settings.max_rss_mb * 1024 * 1024:
                log.info("persistent program over max_rss_mb; replacing it", pid=program.pid,
                         rss_mb=round(rss / 1024 / 1024, 1), max_rss_mb=settings.max_rss_mb)
                self._retire(program, "max_rss")
                return
        program.idle_since = time.monotonic()
        self._idle.setdefault(program.command, []).append(program)
        if self._idle_timer is None:
            self._arm_idle_timer()

    def _retire(self, program: Program, reason: str) -> None:
        metrics.labelled(metrics.persistent_exits, reason).inc()
        program.retire(reason, self.settings.stop_grace_seconds)

    def _forget(self, program: Program, reason: str) -> None:
        metrics.labelled(metrics.persistent_exits, reason).inc()

    def _failed(self) -> None:
        self._failures += 1
        settings = self.settings
        self._next_start = time.monotonic() + retry_delay(
            self._failures, settings.restart_backoff_base_seconds, settings.restart_backoff_max_seconds)

    def _evict_idle(self) -> None:
        """Stop the idle program that has waited longest (of another command: there is none of this one)."""
        oldest: list[Program] | None = None
        for idle in self._idle.values():
            idle[:] = [program for program in idle if program.gone is None]
            if idle and (oldest is None or idle[0].idle_since < oldest[0].idle_since):
                oldest = idle
        if oldest:
            self._retire(oldest.pop(0), "evicted")

    def _arm_idle_timer(self) -> None:
        firsts = [idle[0].idle_since for idle in self._idle.values() if idle]
        if not firsts:
            self._idle_timer = None
            return
        delay = max(0.0, min(firsts) + self.settings.max_idle_seconds - time.monotonic())
        self._idle_timer = asyncio.get_running_loop().call_later(delay, self._reap_idle)

    def _reap_idle(self) -> None:
        limit = time.monotonic() - self.settings.max_idle_seconds
        for idle in self._idle.values():
            while idle and (idle[0].gone is not None or idle[0].idle_since <= limit):
                program = idle.pop(0)
                if program.gone is None:
                    self._retire(program, "max_idle")
        self._arm_idle_timer()

    async def close(self) -> None:
        """Stop every program: stdin closed, ``stop_grace_seconds`` to exit, then its group killed; all reaped."""
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._idle.clear()
        live = list(self._live)
        for program in live:
            self._retire(program, "shutdown")
        if live:
            await asyncio.gather(*(asyncio.shield(p.exited) for p in live), return_exceptions=True)


class ProgramsCannotStart(ConfigError):
    """No program of ``executor.persistent.command`` could start when the worker did (``prestart``)."""

    def __init__(self, command: tuple[str, ...], reason: str) -> None:
        super().__init__(
            f"executor.persistent.command {list(command)} cannot start: {reason}. The worker took no message. "
            "Fix the command or the image it runs in (`knarr check` looks for the program), or raise "
            "executor.persistent.start_timeout_seconds if it only starts slowly; with "
            "executor.persistent.prestart: false the worker starts anyway, and its tasks wait until a program "
            "can start.")
        self.command = command
        self.reason = reason


def _result_problem(header: dict, task_id: str) -> str | None:
    if header.get("type") != "result":
        return f"expected a 'result' frame, got {_shown(header)}"
    if header.get("id") != task_id:
        return f"the result's id {header.get('id')!r} is not the running task's {task_id!r}"
    code = header.get("exit_code")
    if type(code) is not int or not -255 <= code <= 255:
        return f"exit_code must be an integer from -255 to 255, got {code!r}"
    return None


def _shown(header: dict) -> str:
    text = repr(header)
    return text if len(text) <= 200 else text[:196] + "...}"


def _launch_failure(command: tuple[str, ...], reason: str, started: float) -> ProcessOutcome:
    message = f"cannot start persistent program {list(command)}: {reason}"
    return ProcessOutcome(-1, "", message, None, round(time.monotonic() - started, 3), launch_error=message)
