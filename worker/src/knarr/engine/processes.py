"""Running one subprocess: exec without a shell, capture output, enforce the deadline, reap.

Each task runs in its own session (process group), so a timeout or shutdown kills the
whole tree it started, not just the direct child; the group is also swept after a normal
exit so background stragglers cannot outlive their task.

Spawning is the hot path of a CPU-heavy pipeline, so this does not go through asyncio's
subprocess transports (about 300 µs of worker CPU per process): ``posix_spawnp`` (vfork
under the hood, no page-table copy) and a pidfd that becomes readable when the child exits.
The spawn never runs on the event loop. By default the native runner (native.py, a C thread)
spawns, keeps the output to its cap, enforces the deadline, waits on the pidfds, sweeps the
group, reaps the leader and reads the output, and the loop gets one event per ended task,
output included; with ``executor.spawner: thread`` (or where the runner is not built) the
spawner thread (spawner.py) spawns and the loop does the rest, as described below.

The child's stdout and stderr are memfds (anonymous in-memory files), not pipes. Nobody has
to drain them while the task runs, so the pidfd is the only thing registered with the event
loop (one registration per task instead of three) and the output is read once, when the task
has ended — at most ``max_output_bytes`` of each stream, which also bounds the memfds while
the task runs (capture.py). Likewise stdin data is written into a memfd before the spawn and
the child gets it as a regular file already rewound to the start: no pipe, no writer
callbacks. Without stdin data the child reads /dev/null.

When the pidfd fires, the group is swept (the exited leader is not reaped yet, so its id
still names our group) and the leader is reaped. A timeout only kills the group; the pidfd
then fires and the same path finishes. One timer per task serves both the deadline and the
output cap's checks (the native runner's thread does the same checks). On cancellation the
group is killed and the leader reaped before the cancellation goes on, which is quick since it
was sent SIGKILL.

Arguments, environment and stdin that exec cannot take (a NUL byte in an argument taken from
a message, a name with '=') fail the task as a ``launch`` error naming the culprit, like a
missing binary: bad input fails its task, never the worker.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from knarr.engine import containment, native
from knarr.engine.capture import FIRST_CHECK_SECONDS, CapturedStream, next_check_delay
from knarr.engine.spawner import SpawnerFailed, leaders, listing, spawner

DEFAULT_MAX_OUTPUT_BYTES = 8 * 1024 * 1024


@dataclass(slots=True)
class ProcessOutcome:
    exit_code: int
    stdout: str
    stderr: str
    pid: int | None
    duration_seconds: float
    timed_out: bool = False
    launch_error: str | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    failure: str | None = None  # persistent mode: "crash" (the program died mid-task) or "protocol" (a malformed frame)
    expired: bool = False  # its expires_at passed while it waited (the native runner's held queue, a program that could not start): never started


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _shown(value: str, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _text_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return f"is a {type(value).__name__}, not text"
    nul = value.find("\0")
    if nul >= 0:
        return f"contains a NUL byte at position {nul}"
    try:
        os.fsencode(value)
    except UnicodeEncodeError as exc:
        return f"holds a character that cannot be encoded ({exc.reason}) at position {exc.start}"
    return None


def launch_problem(argv: Sequence[object], env: Mapping[object, object] | None, stdin: object = None) -> str | None:
    """Why exec cannot take these arguments, environment or stdin — naming which one — or None.

    exec takes C strings: no NUL bytes, environment names without '='. Checked only once a
    spawn has refused them, so the common path pays nothing.
    """
    for index, arg in enumerate(argv):
        problem = _text_problem(arg)
        if problem:
            what = f"the binary path {_shown(str(arg))}" if index == 0 else f"argument {index} ({_shown(str(arg))})"
            return f"{what} {problem}; arguments must be text without NUL bytes (escape or drop them in arrange())"
    for name, value in (env or {}).items():
        problem = _text_problem(name)
        if problem is None and (not name or "=" in name):
            problem = "is empty or contains '='"
        if problem:
            return f"environment variable name {_shown(str(name))} {problem}; check executor.env and the task's env"
        problem = _text_problem(value)
        if problem:
            return f"environment variable {name} {problem}; check executor.env and the task's env"
    if isinstance(stdin, str):  # NUL bytes are fine on stdin: it is data, not a C string
        try:
            stdin.encode()
        except UnicodeEncodeError as exc:
            return f"stdin holds a character that cannot be encoded ({exc.reason}) at position {exc.start}"
    return None


def binary_problem(binary: str | None, setting: str = "executor.binary_path") -> str | None:
    """Why the program ``setting`` names cannot run on this machine, or None (also when it is unset).
    Looked up as a program is started: a path as it is, a bare name in the worker's PATH."""
    if not binary or shutil.which(binary) is not None:
        return None
    where = "" if "/" in binary else " (searched in $PATH)"
    return f"{setting} {binary!r} is not an executable file on this machine{where}"


PIDFD_NEEDS = ("knarr watches each task's process through a pidfd, which needs Linux 5.3 or later and, in a "
               "container, a seccomp profile that allows pidfd_open")


def pidfd_problem() -> str | None:
    """Why this machine gives no pidfds (``pidfd_open``), or None. The spawner thread and persistent
    programs need them; the native runner takes its pidfds from ``clone`` itself."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except AttributeError:
        return f"this Python has no os.pidfd_open: {PIDFD_NEEDS}"
    except OSError as exc:
        return f"the kernel refused pidfd_open ({exc.strerror or exc}): {PIDFD_NEEDS}"
    return None


def _spawn_error(exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR):
        return f"{reason}; check executor.binary_path or the task's binary_path"
    if exc.errno == errno.E2BIG:
        return f"{reason}: the arguments and environment together are over the kernel's limit; pass bulk data on stdin"
    return reason


def _launch_failure(argv: list[str], reason: str, started: float) -> ProcessOutcome:
    message = f"cannot start {_shown(str(argv[0]))}: {reason}"
    return ProcessOutcome(-1, "", message, None, round(time.monotonic() - started, 3), launch_error=message)


def _refused(argv: list[str], env: Mapping[str, str] | None, stdin: str | None, exc: Exception) -> str:
    return launch_problem(argv, env, stdin) or f"{type(exc).__name__}: {exc}"


class _Watch:
    """One timer per task does both: keep its output to the cap, and enforce its deadline (``kill`` on expiry)."""

    __slots__ = ("loop", "deadline", "out", "err", "kill", "ended", "timed_out", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float, out: CapturedStream, err: CapturedStream,
                 kill: Callable[[], None], ended: asyncio.Future) -> None:
        self.loop, self.out, self.err, self.kill, self.ended = loop, out, err, kill, ended
        self.deadline = loop.time() + timeout
        self.timed_out = False
        self.timer = self._schedule(FIRST_CHECK_SECONDS)

    def _schedule(self, delay: float) -> asyncio.TimerHandle:
        at = self.loop.time() + delay
        if at >= self.deadline:
            return self.loop.call_at(self.deadline, self._tick, delay, True)
        return self.loop.call_at(at, self._tick, delay, False)

    def _tick(self, delay: float, expired: bool) -> None:
        if self.ended.done():
            return
        if expired:
            self.timed_out = True
            self.kill()  # the exit follows once the leader is dead, and finishes the task
            return
        grown = self.out.limit() + self.err.limit()
        self.timer = self._schedule(next_check_delay(delay, grown))

    def cancel(self) -> None:
        self.timer.cancel()


class _Sweeps:
    """When a task's end sweeps for detached orphans: at most every SWEEP_EVERY_SECONDS. A sweep costs
    the loop a few system calls (about 3.5 µs), which every task paid before; a skipped one is made up
    that long later, so an orphan that has exited is still reaped within SWEEP_EVERY_SECONDS of a task's end."""

    __slots__ = ("next_at", "pending")

    def __init__(self) -> None:
        self.next_at = 0.0
        self.pending: asyncio.AbstractEventLoop | None = None  # the loop a made-up sweep waits on

    def due(self) -> bool:
        now = time.monotonic()
        if now >= self.next_at:
            self.next_at = now + SWEEP_EVERY_SECONDS
            return True
        loop = asyncio.get_running_loop()
        if self.pending is not loop:  # none yet (or on a loop that has closed since, where it never runs)
            self.pending = loop
            loop.call_later(self.next_at - now, self._made_up)
        return False

    def _made_up(self) -> None:
        self.pending = None
        self.next_at = time.monotonic() + SWEEP_EVERY_SECONDS
        _sweep_now()


SWEEP_EVERY_SECONDS = 0.05
_sweeps = _Sweeps()


def _sweep_detached() -> None:
    """At a task's end, reap detached orphans that have exited (containment.py), now or a moment later (_Sweeps)."""
    if containment.active() is not None and _sweeps.due():
        _sweep_now()


def _sweep_now() -> None:
    """Reap detached orphans that have exited, never a task process a runner will reap.

    Not while a spawn is under way (its child may exist, unlisted): a later task's end sweeps.
    """
    if containment.active() is None or not listing.acquire(blocking=False):
        return
    try:
        runner = native.started()
        if runner is None:
            containment.reap_detached(leaders)
        elif runner.pause():
            try:
                containment.reap_detached(_Leaders(runner))
            finally:
                runner.resume()
    finally:
        listing.release()


class _Leaders:
    """The task processes a runner will reap: the spawner thread's and programs' (``leaders``), the native runner's."""

    __slots__ = ("runner",)

    def __init__(self, runner: native.NativeRunner) -> None:
        self.runner = runner

    def __contains__(self, pid: object) -> bool:
        return pid in leaders or (isinstance(pid, int) and self.runner.owns(pid))


def _ended(pid: int | None, status: int, stdout: str, stderr: str, cuts: tuple[bool, bool], timed_out: bool,
           timeout: float, started: float, ended: float | None = None) -> ProcessOutcome:
    """The outcome of a process that ran from ``started`` to ``ended`` (None: now), CLOCK_MONOTONIC."""
    duration = round((time.monotonic() if ended is None else ended) - started, 3)
    if timed_out:
        return ProcessOutcome(-1, stdout, f"task timed out after {timeout:g}s; its process group was killed",
                              pid, duration, timed_out=True, stdout_truncated=cuts[0])
    return ProcessOutcome(os.waitstatus_to_exitcode(status), stdout, stderr, pid, duration,
                          stdout_truncated=cuts[0], stderr_truncated=cuts[1])


class RunnerSlot:
    """A task's place with the native runner, as the pool scheduler granted it: ``held`` when the task
    waits in the runner's held queue for a running task's slot. Once the runner has the task
    (``submitted``), its event tells ``on_slot`` what became of the slot (native.SLOT_*); before
    that, the caller gives the grant back itself."""

    __slots__ = ("held", "expires_at", "on_slot", "take_free", "owner", "submitted")

    def __init__(self, held: bool, expires_at: float | None, on_slot: Callable[[int], None],
                 take_free: Callable[[], bool], owner: int) -> None:
        self.held, self.expires_at, self.on_slot, self.take_free = held, expires_at, on_slot, take_free
        self.owner = owner  # the scheduler's number with the runner (NativeRunner.new_owner)
        self.submitted = False


async def run_process(
    argv: list[str], *, stdin: str | None, env: dict[str, str] | None, timeout: float,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES, runner: native.NativeRunner | None = None,
    slot: RunnerSlot | None = None,
) -> ProcessOutcome:
    """Run ``argv`` to its end; through ``runner`` (the native runner) when given and free for this loop.

    ``slot``: the task's grant, for the native runner (none: it starts at once, and nobody hears of its slot).
    """
    loop = asyncio.get_running_loop()
    if runner is not None and runner.claim(loop):
        return await _run_native(runner, argv, stdin, env, timeout, max_output_bytes, slot)
    started = time.monotonic()
    try:
        spawned = await spawner().spawn(argv, stdin, env, max_output_bytes)
    except OSError as exc:
        return _launch_failure(argv, _spawn_error(exc), started)
    except (ValueError, TypeError) as exc:  # exec refused the arguments themselves (e.g. a NUL byte)
        return _launch_failure(argv, _refused(argv, env, stdin, exc), started)
    except SpawnerFailed as exc:
        return _launch_failure(argv, str(exc), started)
    pid, pidfd, out, err = spawned.pid, spawned.pidfd, spawned.out, spawned.err
    try:
        exited: asyncio.Future[None] = loop.create_future()

        def on_exit() -> None:
            if not exited.done():  # the task may have been cancelled while the exit was pending
                exited.set_result(None)

        loop.add_reader(pidfd, on_exit)
        watch = _Watch(loop, timeout, out, err, lambda: _kill_group(pid), exited)
        try:
            await exited
        finally:
            # Normally the leader has exited: this sweeps its stragglers. Cancelled (shutdown):
            # this kills the tree, and the blocking waitpid returns as soon as SIGKILL lands.
            watch.cancel()
            loop.remove_reader(pidfd)
            os.close(pidfd)
            _kill_group(pid)
            _, status = os.waitpid(pid, 0)
            leaders.discard(pid)
            _sweep_detached()
        stdout, stderr = out.read(), err.read()
        return _ended(pid, status, stdout, stderr, (out.truncated, err.truncated), watch.timed_out, timeout, started)
    finally:
        out.close()
        err.close()


async def _run_native(
    runner: native.NativeRunner, argv: list[str], stdin: str | None, env: dict[str, str] | None, timeout: float,
    cap: int, slot: RunnerSlot | None = None,
) -> ProcessOutcome:
    """The same run through the native runner: its thread writes stdin's memfd, spawns, keeps the
    output to the cap, kills the group at the deadline (counted from the process's start), sweeps,
    reaps and reads the output; the loop only hands it the task."""
    started = time.monotonic()
    job = submit_native(runner, argv, stdin, env, timeout, cap, slot, started)
    if isinstance(job, ProcessOutcome):
        return job
    try:
        end = await job.ended
    except BaseException:  # cancelled (shutdown), or closed unfinished: kill the tree, reaped before going on
        runner.kill(job, wait=True)
        raise
    return native_outcome(end, argv, timeout, started, slot is not None and slot.held)


def submit_native(runner: native.NativeRunner, argv: list[str], stdin: str | None, env: dict[str, str] | None,
                  timeout: float, cap: int, slot: RunnerSlot | None, started: float,
                  on_end: Callable[[native.Ended], None] | None = None) -> native.NativeJob | ProcessOutcome:
    """Hand a task to the native runner (``slot``: its grant, see RunnerSlot; none: it starts at
    once and nobody hears of its slot; ``on_end``: see NativeRunner.submit); the launch failure
    instead when exec cannot take it."""
    try:
        data = stdin.encode() if stdin is not None else None
        if slot is None:
            return runner.submit(argv, env, data, timeout, cap, on_end=on_end)
        if slot.held and slot.take_free():  # a slot came free since the grant: no need to wait
            slot.held = False
        job = runner.submit(argv, env, data, timeout, cap, hold=slot.held, expires_at=slot.expires_at,
                            on_slot=slot.on_slot, owner=slot.owner, on_end=on_end)
        slot.submitted = True
        return job
    except (ValueError, TypeError) as exc:  # exec cannot take the arguments (e.g. a NUL byte), nor stdin its text
        return _launch_failure(argv, _refused(argv, env, stdin, exc), started)
    except OSError as exc:
        return _launch_failure(argv, _spawn_error(exc), started)


def native_success(end: native.Ended, started: float) -> float | None:
    """The duration of a run (submitted at ``started``) whose event says it exited 0 in time with its
    output whole, the usual end; None for any other, which ``native_outcome`` makes an outcome of."""
    if end.status or end.flags:
        return None
    _sweep_detached()
    if end.started_ns > 0:
        started = end.started_ns / 1e9  # as in native_outcome
    return round(end.ended_ns / 1e9 - started, 3)


def native_outcome(end: native.Ended, argv: list[str], timeout: float, started: float, held: bool) -> ProcessOutcome:
    """What the native runner's event for a task (submitted at ``started``, ``held`` or not) makes of its run."""
    if end.started_ns > 0:
        started = end.started_ns / 1e9  # the process's own start (a held task waited before it): CLOCK_MONOTONIC
    status = end.status
    if status < 0:
        if status == -errno.ETIME and held:
            return ProcessOutcome(-1, "", "", None, 0.0, expired=True)
        return _launch_failure(argv, _spawn_error(OSError(-status, os.strerror(-status), argv[0])), started)
    _sweep_detached()
    flags = end.flags
    cuts = (bool(flags & native.OUT_CUT), bool(flags & native.ERR_CUT))
    return _ended(end.pid, status, end.stdout, end.stderr, cuts, bool(flags & native.TIMED_OUT), timeout, started,
                  end.ended_ns / 1e9)
