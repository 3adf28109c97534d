"""Running one subprocess: exec without a shell, capture output, enforce the deadline, reap.

Each task runs in its own session (process group), so a timeout or shutdown kills the
whole tree it started, not just the direct child; the group is also swept after a normal
exit so background stragglers cannot outlive their task.

Spawning is the hot path of a CPU-heavy pipeline, so this does not go through asyncio's
subprocess transports (about 300 µs of worker CPU per process): ``posix_spawnp`` (vfork
under the hood, no page-table copy) and a pidfd that becomes readable when the child exits.

The child's stdout and stderr are memfds (anonymous in-memory files), not pipes. Nobody has
to drain them while the task runs, so the pidfd is the only thing registered with the event
loop (one registration per task instead of three) and the output is read once, in one go,
when the task has ended. Likewise stdin data is written into a memfd before the spawn and
the child gets it as a regular file already rewound to the start: no pipe, no writer
callbacks. Without stdin data the child reads /dev/null.

When the pidfd fires, the group is swept (the exited leader is not reaped yet, so its id
still names our group) and the leader is reaped. A timeout only kills the group; the pidfd
then fires and the same path finishes. On cancellation the group is killed and the leader
reaped at once, which is quick since it was sent SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass

_STDIN_DEVNULL = (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)


@dataclass(slots=True)
class ProcessOutcome:
    exit_code: int
    stdout: str
    stderr: str
    pid: int | None
    duration_seconds: float
    timed_out: bool = False
    launch_error: str | None = None


def seal_inherited_fds() -> None:
    """Prepare this process for spawning tasks: children must inherit only stdin/out/err.

    posix_spawn does not close descriptors the way ``close_fds=True`` does, and everything
    this process opens is close-on-exec already (Python and librdkafka both ask for it) —
    but descriptors inherited from whoever started the worker are not. Mark them once.
    """
    try:
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass  # the listing's own descriptor, already closed


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _spawn(argv: list[str], stdin: str | None, env: dict[str, str] | None, out: int, err: int) -> int:
    inp = -1
    try:
        if stdin is None:
            first = _STDIN_DEVNULL
        else:
            inp = os.memfd_create("knarr-stdin", os.MFD_CLOEXEC)
            data = memoryview(stdin.encode())
            while data:
                data = data[os.write(inp, data):]
            os.lseek(inp, 0, os.SEEK_SET)
            first = (os.POSIX_SPAWN_DUP2, inp, 0)
        actions = (first, (os.POSIX_SPAWN_DUP2, out, 1), (os.POSIX_SPAWN_DUP2, err, 2))
        return os.posix_spawnp(argv[0], argv, os.environ if env is None else env, file_actions=actions, setsid=True)
    finally:
        if inp >= 0:
            os.close(inp)  # the child has its own descriptor for it


def _read_all(fd: int) -> str:
    size = os.fstat(fd).st_size
    if not size:
        return ""
    chunks, offset = [], 0
    while offset < size:
        chunk = os.pread(fd, size - offset, offset)
        if not chunk:
            break  # shrunk under us: a descendant that left the group truncated it
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _launch_failure(argv: list[str], exc: OSError, started: float) -> ProcessOutcome:
    reason = exc.strerror or str(exc)
    message = f"cannot start {argv[0]!r}: {reason}; check executor.binary_path or the task's binary_path"
    return ProcessOutcome(-1, "", message, None, round(time.monotonic() - started, 3), launch_error=message)


async def run_process(
    argv: list[str], *, stdin: str | None, env: dict[str, str] | None, timeout: float
) -> ProcessOutcome:
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    memfds: list[int] = []
    try:
        try:
            memfds.append(os.memfd_create("knarr-stdout", os.MFD_CLOEXEC))
            memfds.append(os.memfd_create("knarr-stderr", os.MFD_CLOEXEC))
            out, err = memfds
            pid = _spawn(argv, stdin, env, out, err)
        except OSError as exc:
            return _launch_failure(argv, exc, started)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:
            _kill_group(pid)
            os.waitpid(pid, 0)
            return _launch_failure(argv, exc, started)

        exited: asyncio.Future[None] = loop.create_future()
        timed_out = False

        def on_exit() -> None:
            if not exited.done():  # the task may have been cancelled while the exit was pending
                exited.set_result(None)

        def expire() -> None:
            nonlocal timed_out
            if not exited.done():
                timed_out = True
                _kill_group(pid)  # the pidfd fires once the leader is dead; on_exit finishes

        loop.add_reader(pidfd, on_exit)
        deadline = loop.call_later(timeout, expire)
        try:
            await exited
        finally:
            # Normally the leader has exited: this sweeps its stragglers. Cancelled (shutdown):
            # this kills the tree, and the blocking waitpid returns as soon as SIGKILL lands.
            deadline.cancel()
            loop.remove_reader(pidfd)
            os.close(pidfd)
            _kill_group(pid)
            _, status = os.waitpid(pid, 0)
        duration = round(time.monotonic() - started, 3)
        if timed_out:
            return ProcessOutcome(-1, _read_all(out), f"task timed out after {timeout:g}s; its process group was killed",
                                  pid, duration, timed_out=True)
        return ProcessOutcome(os.waitstatus_to_exitcode(status), _read_all(out), _read_all(err), pid, duration)
    finally:
        for fd in memfds:
            os.close(fd)
