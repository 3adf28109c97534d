"""Persistent executors: long-lived programs that run many tasks each (docs/task-protocol.md).

Spawning a process per task costs a fork, an exec and the program's own start-up; for a tiny
task (a lookup, a regex, a small model call) that is the whole cost. Here a program starts
once and runs task after task, one at a time, exchanging frames on its stdin and stdout.

- **One program per pool slot.** A task holds a slot (the SlotScheduler's) while its program
  runs it, so no more programs are busy than there are slots; starting a new one when the
  worker already has ``max_executors`` alive stops an idle one of another command first.
- **Reuse last in, first out.** The programs that work stay warm; the extra ones a burst
  started reach ``max_idle_seconds`` and are stopped.
- **Registered once.** A program's stdout, stderr and pidfd are registered with the event loop
  when it starts, not per task: a task costs one write and, usually, one read.
- **Failures replace the program, never the worker.** A task past its deadline, a program
  that dies mid-task or writes something that is no frame: the program's process group is
  killed and the task fails (reasons ``timeout``, ``crash``, ``protocol``) through the usual
  ``on_error`` path; the next task starts a new program, after a delay that grows while
  programs keep failing (``restart_backoff_*``) and resets on the first task that succeeds.
- **Contained like tasks.** A program runs in a session of its own with the worker's task
  environment (the ``env_inherit`` allow-list, ``executor.env`` and ``KNARR_TASK_TAG``, which
  the guard of containment.py scans for), so the subreaper, the cgroup and the guard cover
  it. It also starts through a short trampoline that sets ``PR_SET_PDEATHSIG`` (SIGKILL)
  before exec'ing it: a per-task cost spawn mode cannot afford (containment.py) is nothing
  once per program. The parent-death signal follows the thread that spawned the program, so
  programs are spawned on the event loop's thread, which lives as long as the worker (and
  starts are rare: once per program, not per task).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Mapping

from knarr.api.tasks import ExecutorTask
from knarr.config.models import ExecutorConfig, PersistentConfig
from knarr.engine import processes
from knarr.engine.backoff import retry_delay
from knarr.engine.capture import decode_head
from knarr.engine.frames import PROTOCOL_VERSION, Decoder, Frame, FrameError, encode
from knarr.engine.processes import ProcessOutcome, launch_problem
from knarr.observability import metrics
from knarr.observability.logging import get_logger

log = get_logger(component="persistent")

STDERR_TAIL_BYTES = 4096  # a program's own stderr (outside frames): the last of it, for crash messages
_READ_BYTES = 1 << 16
_PAGE = os.sysconf("SC_PAGE_SIZE")

# Runs in `python -I -S -c`: the parent-death signal, then exec the program (same pid).
_TRAMPOLINE = r"""
import ctypes, os, sys
ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG = 1, SIGKILL = 9
if os.getppid() != int(sys.argv[1]):
    os._exit(70)  # the worker was gone before the signal was armed
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    os.write(2, f"cannot exec {sys.argv[2]!r}: {exc.strerror}\n".encode())
    os._exit(127)
"""


class ProgramFailure(Exception):
    """Why a program could not answer: ``reason`` is timeout, crash, protocol or launch."""

    def __init__(self, reason: str, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.exit_code = exit_code


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


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def rss_bytes(pid: int) -> int | None:
    """Resident memory of one process, from /proc/<pid>/statm; None once it is gone."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


class Program:
    """One running program: its pipes and pidfd, the frame decoder, and the task it is answering."""

    def __init__(self, command: tuple[str, ...], env: Mapping[str, str], keep: int) -> None:
        self.command = command
        self.loop = asyncio.get_running_loop()
        self.decoder = Decoder(keep)
        self.waiter: asyncio.Future[Frame] | None = None
        self.exited: asyncio.Future[int] = self.loop.create_future()
        self.tail = bytearray()
        self.tasks = 0
        self.idle_since = 0.0
        self.gone: str | None = None  # why it takes no more tasks (set once, with the kill or retirement)
        self._pending: memoryview | None = None
        self._kill_timer: asyncio.TimerHandle | None = None
        fds: list[int] = []
        try:
            in_r, self.stdin = os.pipe2(os.O_CLOEXEC)
            fds += [in_r, self.stdin]
            self.stdout, out_w = os.pipe2(os.O_CLOEXEC)
            fds += [self.stdout, out_w]
            self.stderr, err_w = os.pipe2(os.O_CLOEXEC)
            fds += [self.stderr, err_w]
            argv = [sys.executable, "-I", "-S", "-c", _TRAMPOLINE, str(os.getpid()), *command]
            actions = [(os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)]
            self.pid = os.posix_spawn(sys.executable, argv, dict(env), file_actions=actions, setsid=True)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        processes._leaders.add(self.pid)  # containment's reaper leaves it to us
        for fd in (in_r, out_w, err_w):
            os.close(fd)
        for fd in (self.stdin, self.stdout, self.stderr):
            os.set_blocking(fd, False)
        self.pidfd = os.pidfd_open(self.pid)
        self.loop.add_reader(self.stdout, self._on_stdout)
        self.loop.add_reader(self.stderr, self._on_stderr)
        self.loop.add_reader(self.pidfd, self._on_exit)
        metrics.persistent_programs.inc()
        metrics.persistent_starts.inc()

    # --- asking -------------------------------------------------------------------------------
    async def ask(self, frame: bytes, timeout: float, what: str) -> Frame:
        """Send ``frame`` and wait for the program's next one; ProgramFailure if it cannot answer in time."""
        if self.gone is not None:
            raise ProgramFailure("crash", f"the program {self.gone} before it could answer")
        waiter = self.waiter = self.loop.create_future()
        timer = self.loop.call_later(timeout, self._expire, waiter, timeout, what)
        try:
            if frame:
                self._write(frame)
            return await waiter
        finally:
            timer.cancel()

    def _expire(self, waiter: asyncio.Future, timeout: float, what: str) -> None:
        if not waiter.done():
            self.fail("timeout", f"{what} timed out after {timeout:g}s; the program's process group was killed")

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            view = view[os.write(self.stdin, view):]
        except BlockingIOError:
            pass
        except OSError:  # it closed its stdin or died: its exit, seen on the pidfd, fails the task
            self.kill("closed its stdin")
            return
        if view:
            self._pending = view
            self.loop.add_writer(self.stdin, self._on_writable)

    def _on_writable(self) -> None:
        view = self._pending
        try:
            view = view[os.write(self.stdin, view):] if view else view
        except BlockingIOError:
            return
        except OSError:
            view = None
            self.kill("closed its stdin")
        if not view:
            self._pending = None
            if self.stdin >= 0:
                self.loop.remove_writer(self.stdin)
        else:
            self._pending = view

    # --- what the program says ------------------------------------------------------------------
    def _on_stdout(self) -> None:
        try:
            data = os.read(self.stdout, _READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.loop.remove_reader(self.stdout)
            self.kill("closed its stdout")  # the exit, on the pidfd, fails a waiting task as a crash
            return
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except FrameError as exc:
            self.fail("protocol", f"the program wrote a malformed frame: {exc}")
            return
        for frame in frames:
            waiter = self.waiter
            if waiter is None or waiter.done():
                self.fail("protocol", f"the program wrote a {frame.header['type']!r} frame while no task was waiting")
                return
            self.waiter = None
            waiter.set_result(frame)

    def _on_stderr(self) -> None:
        try:
            data = os.read(self.stderr, _READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.loop.remove_reader(self.stderr)
            return
        self.tail += data
        del self.tail[:-STDERR_TAIL_BYTES]

    def stderr_tail(self) -> str:
        text = self.tail.decode(errors="replace").strip()
        return f"; its stderr ends: {text[-1000:]}" if text else ""

    def _on_exit(self) -> None:
        """The program exited: take what it still wrote, reap it, and fail the task it was running."""
        for fd, handler in ((self.stdout, self._feed), (self.stderr, None)):
            for _ in range(64):  # what it wrote just before exiting (a grandchild may keep writing: bounded)
                try:
                    data = os.read(fd, _READ_BYTES)
                except OSError:
                    break
                if not data:
                    break
                if handler is not None and self.gone is None:
                    handler(data)
                elif handler is None:
                    self.tail += data
                    del self.tail[:-STDERR_TAIL_BYTES]
        for fd in (self.stdout, self.stderr, self.pidfd):
            self.loop.remove_reader(fd)
        if self._pending is not None:
            self.loop.remove_writer(self.stdin)
        processes._kill_group(self.pid)  # its stragglers
        _, status = os.waitpid(self.pid, 0)
        processes._leaders.discard(self.pid)
        code = os.waitstatus_to_exitcode(status)
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        for fd in (self.stdin, self.stdout, self.stderr, self.pidfd):
            if fd >= 0:
                os.close(fd)
        self.stdin = -1
        metrics.persistent_programs.dec()
        if self.gone is None:
            self.gone = describe_exit(code)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            self.waiter = None
            waiter.set_exception(ProgramFailure(
                "crash", f"the persistent program {list(self.command)} (pid {self.pid}) {describe_exit(code)} "
                         f"while running the task{self.stderr_tail()}", code))
        self.exited.set_result(code)

    # --- ending ----------------------------------------------------------------------------------
    def fail(self, reason: str, message: str) -> None:
        """Kill the program; the task waiting for it, if any, fails with ``reason``."""
        self.kill(message)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            self.waiter = None
            waiter.set_exception(ProgramFailure(reason, message))

    def kill(self, why: str) -> None:
        if self.gone is None:
            self.gone = why
        if not self.exited.done():
            processes._kill_group(self.pid)

    def retire(self, why: str, grace: float) -> None:
        """Ask it to stop (its stdin closes: end of tasks), and kill its group if it is still there after ``grace``."""
        if self.gone is None:
            self.gone = why
        if self.exited.done():
            return
        if self._pending is not None:
            self.loop.remove_writer(self.stdin)
            self._pending = None
        if self.stdin >= 0:
            os.close(self.stdin)
            self.stdin = -1
        if grace <= 0:
            processes._kill_group(self.pid)
        elif self._kill_timer is None:
            self._kill_timer = self.loop.call_later(grace, processes._kill_group, self.pid)


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

    @property
    def live(self) -> int:
        return len(self._live)

    async def run(self, command: tuple[str, ...], task: ExecutorTask, timeout: float) -> ProcessOutcome:
        """Run one task in a program of ``command``; the outcome reads like spawn mode's."""
        started = time.monotonic()
        try:
            request = encode({"type": "task", "id": task.task_id, "args": task.args, "env": task.env,
                              "timeout_seconds": timeout}, (task.stdin or "").encode())
        except (UnicodeEncodeError, FrameError) as exc:
            problem = launch_problem(task.args, task.env, task.stdin) or str(exc)
            return _launch_failure(command, problem, started)
        try:
            program = await self._take(command)
        except ProgramFailure as exc:
            self._failed()
            return _launch_failure(command, exc.message, started)
        try:
            frame = await program.ask(request, timeout, "task")
            header = frame.header
            problem = _result_problem(header, task.task_id)
            if problem:
                program.fail("protocol", problem)
                raise ProgramFailure("protocol", f"the program answered with a malformed result: {problem}")
        except ProgramFailure as exc:
            self._forget(program, exc.reason)
            duration = round(time.monotonic() - started, 3)
            if exc.reason == "timeout":
                return ProcessOutcome(-1, "", exc.message, program.pid, duration, timed_out=True)
            self._failed()
            log.warning("persistent program failed", reason=exc.reason, error=exc.message, task_id=task.task_id)
            code = exc.exit_code if exc.exit_code is not None else -1
            return ProcessOutcome(code, "", exc.message, program.pid, duration, failure=exc.reason)
        except BaseException:  # cancelled (shutdown, revoke): it is mid-task, so it cannot be reused
            program.kill("was stopped mid-task")
            self._forget(program, "cancelled")
            raise
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

    # --- programs in and out ----------------------------------------------------------------------
    async def _take(self, command: tuple[str, ...]) -> Program:
        idle = self._idle.get(command)
        while idle:
            program = idle.pop()
            if program.gone is None:
                return program
        if len(self._live) >= self.slots:
            self._evict_idle()
        wait = self._next_start - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)  # the restart backoff (holding the slot: its program is what failed)
        return await self._start(command)

    async def _start(self, command: tuple[str, ...]) -> Program:
        try:
            program = Program(command, self.env, self.keep)
        except OSError as exc:
            raise ProgramFailure("launch", exc.strerror or str(exc)) from None
        self._live.add(program)
        program.exited.add_done_callback(lambda _: self._live.discard(program))
        try:
            frame = await program.ask(b"", self.settings.start_timeout_seconds, "waiting for its hello frame")
        except ProgramFailure as exc:
            program.kill("failed to start")
            raise ProgramFailure("launch", f"no hello frame: {exc.message}{program.stderr_tail()}") from None
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
