"""One persistent program: its process, pipes and pidfd, and the frames it exchanges (docs/task-protocol.md).

A program runs one task at a time. Its stdout, stderr and pidfd are registered with the event
loop once, when it starts, not per task: a task costs one write and, usually, one read. What
goes wrong — a deadline passed, an exit mid-task, bytes that are no frame — kills its process
group and fails the waiting task with a ``ProgramFailure`` naming the reason; the pool
(persistent.py) decides what happens next.

A program runs in a session of its own with the worker's task environment (the
``env_inherit`` allow-list, ``executor.env`` and ``KNARR_TASK_TAG``, which the guard of
containment.py scans for), so the subreaper, the cgroup and the guard cover it. It also
starts through a short trampoline that sets ``PR_SET_PDEATHSIG`` (SIGKILL) before exec'ing
it: a per-task cost spawn mode cannot afford (containment.py) is nothing once per program.
The parent-death signal follows the thread that spawned the program, so programs are spawned
from a thread of the loop's default executor (off the event loop, and alive until the loop
closes), never from a short-lived one.

The trampoline also puts the program under Linux's SCHED_BATCH policy (where the kernel allows
it): the same share of CPU, but no preemption on wake-up. A request written to a program's
stdin wakes it, and a pipe's wake-up hints that the writer is about to sleep, so the program
used to take the event loop's core at once, while the loop had other tasks to feed; under
SCHED_BATCH it waits for the loop's time slice, or runs on a free core. Four alternated pairs of
persistent-mode runs (W1, 20,000 messages): 7,674 against 6,971 tasks/s (medians), 108 against
117 us of worker CPU per task. Task processes in spawn mode keep the default policy: there it
measured slower (1,562 and 1,582 against 1,663 and 1,664 tasks/s).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Mapping

from knarr.engine import processes
from knarr.engine.spawner import RESET_SIGNALS, leaders, listing
from knarr.engine.frames import Decoder, Frame, FrameError
from knarr.observability import metrics

STDERR_TAIL_BYTES = 4096  # a program's own stderr (outside frames): the last of it, for crash messages
_READ_BYTES = 1 << 16
_PAGE = os.sysconf("SC_PAGE_SIZE")
_TIMER_SLACK = 0.001  # a loop's timer may run up to a millisecond before its time (uvloop counts in ms)

# Runs in `python -I -S -c`: the parent-death signal, then exec the program (same pid). That
# Python ignores SIGPIPE and SIGXFSZ again at start-up, so it puts the spawner's RESET_SIGNALS back before the exec.
_TRAMPOLINE = r"""
import ctypes, os, signal, sys
ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG = 1, SIGKILL = 9
try:
    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))  # see the module's docstring
except OSError:
    pass
for number in RESET:
    signal.signal(number, signal.SIG_DFL)
if os.getppid() != int(sys.argv[1]):
    os._exit(70)  # the worker was gone before the signal was armed
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    os.write(2, f"cannot exec {sys.argv[2]!r}: {exc.strerror}\n".encode())
    os._exit(127)
""".replace("RESET", repr(tuple(int(number) for number in RESET_SIGNALS)))


class ProgramFailure(Exception):
    """Why a program could not answer: ``reason`` is timeout, crash, protocol or launch."""

    def __init__(self, reason: str, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.exit_code = exit_code


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


def _spawn(command: tuple[str, ...], env: dict[str, str]) -> tuple[int, int, int, int]:
    """Start the program through the trampoline, in a session of its own: (pid, stdin, stdout, stderr).

    Runs in a thread of the loop's default executor: those live until the loop closes, and the
    parent-death signal follows the thread that spawned (a thread that exits would kill the program).
    """
    fds: list[int] = []
    try:
        in_r, stdin = os.pipe2(os.O_CLOEXEC)
        fds += [in_r, stdin]
        stdout, out_w = os.pipe2(os.O_CLOEXEC)
        fds += [stdout, out_w]
        stderr, err_w = os.pipe2(os.O_CLOEXEC)
        fds += [stderr, err_w]
        argv = [sys.executable, "-I", "-S", "-c", _TRAMPOLINE, str(os.getpid()), *command]
        actions = [(os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)]
        with listing:  # listed before containment's reaper can see it: the reaper leaves it to us
            pid = os.posix_spawn(sys.executable, argv, env, file_actions=actions, setsid=True,
                                 setsigdef=RESET_SIGNALS)
            leaders.add(pid)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    for fd in (stdin, stdout, stderr):
        os.set_blocking(fd, False)
    return pid, stdin, stdout, stderr


def _discard(pipes: tuple[int, int, int, int]) -> None:
    """Kill and reap a program that was spawned but will never be used."""
    pid = pipes[0]
    processes._kill_group(pid)
    os.waitpid(pid, 0)
    leaders.discard(pid)
    for fd in pipes[1:]:
        os.close(fd)


class Deadlines:
    """The waits of a pool's programs, each with its deadline, on one timer armed for the earliest.

    A wait used to arm a timer of its own and cancel it when the answer came: 1.3 us a task on
    uvloop, for a timer that almost never fires. Here a wait sets its program's entry and the
    answer drops it; the one timer fires at the earliest deadline it was armed for, fails every
    wait that is due then, and arms itself for the next. Deadlines that keep the same timeout
    only grow, so under a steady flow it fires about once per timeout, and a wait's deadline is
    kept as exactly as a timer of its own would keep it.
    """

    __slots__ = ("_waits", "_timer", "_at", "_loop")

    def __init__(self) -> None:
        self._waits: dict[Program, tuple[float, asyncio.Future, float, str]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._at = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None  # the timer's

    def start(self, program: Program, waiter: asyncio.Future, timeout: float, what: str) -> None:
        loop = program.loop
        when = loop.time() + timeout
        self._waits[program] = (when, waiter, timeout, what)
        if self._timer is None or when < self._at or loop is not self._loop:
            self._arm(loop, when)

    def stop(self, program: Program) -> None:
        self._waits.pop(program, None)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None and self._loop is loop:  # (a closed loop's timer is gone with it)
            self._timer.cancel()
        self._timer, self._at, self._loop = loop.call_at(when, self._fire, loop), when, loop

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time()
        for program, (when, waiter, timeout, what) in list(self._waits.items()):
            if program.loop is not loop:  # a wait left on a loop that has closed since: nothing awaits it
                del self._waits[program]
            elif when <= now + _TIMER_SLACK:
                del self._waits[program]
                program.expire(waiter, timeout, what)
        if self._waits:
            self._arm(loop, min(wait[0] for wait in self._waits.values()))


class Program:
    """One running program: its pipes and pidfd, the frame decoder, and the task it is answering."""

    def __init__(self, command: tuple[str, ...], pipes: tuple[int, int, int, int], keep: int,
                 deadlines: Deadlines) -> None:
        self.command = command
        self.deadlines = deadlines
        self.pid, self.stdin, self.stdout, self.stderr = pipes
        self.loop = asyncio.get_running_loop()
        self.decoder = Decoder(keep)
        self.waiter: asyncio.Future[Frame] | None = None
        self.asked = "task"  # what the waiter waits for: "task", or the start's "waiting for its hello frame"
        self.exited: asyncio.Future[int] = self.loop.create_future()
        self.tail = bytearray()
        self.tasks = 0
        self.idle_since = 0.0
        self.gone: str | None = None  # why it takes no more tasks (set once, with the kill or retirement)
        self._pending: memoryview | None = None
        self._kill_timer: asyncio.TimerHandle | None = None
        try:
            self.pidfd = os.pidfd_open(self.pid)
        except OSError as exc:  # what launch failures say: the kernel's refusal, and what it would take
            raise OSError(exc.errno, f"pidfd_open: {exc.strerror}; {processes.PIDFD_NEEDS}") from None
        self.loop.add_reader(self.stdout, self._on_stdout)
        self.loop.add_reader(self.stderr, self._on_stderr)
        self.loop.add_reader(self.pidfd, self._on_exit)
        metrics.persistent_programs.inc()
        metrics.persistent_starts.inc()

    @classmethod
    async def start(cls, command: tuple[str, ...], env: Mapping[str, str], keep: int, deadlines: Deadlines) -> Program:
        """Spawn the program (off the event loop) and watch its pipes; it has not said hello yet."""
        spawning = asyncio.get_running_loop().run_in_executor(None, _spawn, command, dict(env))
        try:
            pipes = await asyncio.shield(spawning)
        except asyncio.CancelledError:  # the spawn goes on in its thread: undo it once it is done
            spawning.add_done_callback(lambda done: done.exception() is None and _discard(done.result()))
            raise
        try:
            return cls(command, pipes, keep, deadlines)
        except BaseException:
            _discard(pipes)
            raise

    # --- asking -------------------------------------------------------------------------------
    async def ask(self, frame: bytes, timeout: float, what: str) -> Frame:
        """Send ``frame`` and wait for the program's next one; ProgramFailure if it cannot answer in time."""
        if self.gone is not None:
            raise ProgramFailure("crash", f"the program {self.gone} before it could answer")
        try:
            return await self.send(frame, timeout, what)
        finally:
            self.deadlines.stop(self)

    def send(self, frame: bytes, timeout: float, what: str) -> asyncio.Future[Frame]:
        """Send ``frame``; the future gets the program's next frame, or fails with ProgramFailure if it
        cannot answer within ``timeout``. Whoever takes the answer stops its deadline (``deadlines.stop``)."""
        waiter = self.waiter = self.loop.create_future()
        self.asked = what
        self.deadlines.start(self, waiter, timeout, what)
        if frame:
            self._write(frame)
        return waiter

    def expire(self, waiter: asyncio.Future, timeout: float, what: str) -> None:
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
        data = _read_ready(self.stdout)
        if data is None:
            return
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
        data = _read_ready(self.stderr)
        if data is None:
            return
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
        leaders.discard(self.pid)
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
                         f"while {'running the task' if self.asked == 'task' else self.asked}{self.stderr_tail()}",
                code))
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


def _read_ready(fd: int) -> bytes | None:
    """What a readable pipe holds: None when nothing after all, b'' at its end (or when it failed)."""
    try:
        return os.read(fd, _READ_BYTES)
    except BlockingIOError:
        return None
    except OSError:
        return b""
