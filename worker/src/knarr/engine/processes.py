"""Running one subprocess: exec without a shell, capture output, enforce the deadline, reap.

Each task runs in its own session (process group), so a timeout or shutdown kills the
whole tree it started, not just the direct child; the group is also swept after a normal
exit so background stragglers cannot outlive their task.

Spawning is the hot path of a CPU-heavy pipeline, so this does not go through asyncio's
subprocess transports (about 300 µs of worker CPU per process): ``posix_spawnp`` (vfork
under the hood, no page-table copy), close-on-exec pipes read by the event loop, and a
pidfd that becomes readable when the child exits. About half the CPU per task.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass

_PIPE_CHUNK = 1 << 16


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


class _Child:
    """One spawned process and its pipes, driven by event-loop callbacks."""

    __slots__ = ("loop", "pid", "pidfd", "out", "err", "stdin_fd", "stdin_data", "chunks", "open_pipes",
                 "status", "future", "timed_out")

    def __init__(self, loop: asyncio.AbstractEventLoop, argv: list[str], stdin: bytes | None, env) -> None:
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        self.timed_out = False
        self.status: int | None = None
        out_r, out_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        err_r, err_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        in_r = in_w = -1
        try:
            os.set_blocking(out_w, True)
            os.set_blocking(err_w, True)
            if stdin is not None:
                in_r, in_w = os.pipe2(os.O_CLOEXEC)
                first = (os.POSIX_SPAWN_DUP2, in_r, 0)
            else:
                first = (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)
            actions = [first, (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)]
            self.pid = os.posix_spawnp(argv[0], argv, os.environ if env is None else env,
                                       file_actions=actions, setsid=True)
        except BaseException:
            for fd in (out_r, err_r, in_w):
                if fd >= 0:
                    os.close(fd)
            raise
        finally:
            for fd in (out_w, err_w, in_r):
                if fd >= 0:
                    os.close(fd)
        self.out, self.err = out_r, err_r
        self.chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
        self.open_pipes = 2
        self.pidfd = os.pidfd_open(self.pid)
        loop.add_reader(out_r, self._read, out_r)
        loop.add_reader(err_r, self._read, err_r)
        loop.add_reader(self.pidfd, self._exited)
        self.stdin_fd = in_w
        self.stdin_data = memoryview(stdin) if stdin is not None else None
        if in_w >= 0:
            os.set_blocking(in_w, False)
            self._write_stdin()

    def _write_stdin(self) -> None:
        data, fd = self.stdin_data, self.stdin_fd
        try:
            while data:
                data = data[os.write(fd, data[:_PIPE_CHUNK]):]
        except BlockingIOError:
            self.stdin_data = data
            self.loop.add_writer(fd, self._continue_stdin)
            return
        except (BrokenPipeError, OSError):
            pass  # the child exited or closed stdin without reading it all
        self._close_stdin()

    def _continue_stdin(self) -> None:
        self.loop.remove_writer(self.stdin_fd)
        self._write_stdin()

    def _close_stdin(self) -> None:
        if self.stdin_fd >= 0:
            self.loop.remove_writer(self.stdin_fd)
            os.close(self.stdin_fd)
            self.stdin_fd = -1
            self.stdin_data = None

    def _read(self, fd: int) -> None:
        try:
            data = os.read(fd, _PIPE_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.chunks[fd].append(data)
            return
        self.loop.remove_reader(fd)
        os.close(fd)
        self.open_pipes -= 1
        self._maybe_done()

    def _exited(self) -> None:
        self.loop.remove_reader(self.pidfd)
        os.close(self.pidfd)
        _, self.status = os.waitpid(self.pid, 0)
        # Stragglers in the group would keep our pipes open (and outlive the task): sweep them.
        _kill_group(self.pid)
        self._close_stdin()
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self.open_pipes == 0 and self.status is not None and not self.future.done():
            self.future.set_result(None)

    def timeout(self) -> None:
        self.timed_out = True
        _kill_group(self.pid)
        # A descendant that left the group could hold our pipes open forever: stop waiting for EOF.
        self.loop.call_later(2.0, self._abandon_pipes)

    def _abandon_pipes(self) -> None:
        for fd in (self.out, self.err):
            if fd in self.chunks and self.open_pipes and _is_open(fd):
                self.loop.remove_reader(fd)
                os.close(fd)
                self.open_pipes -= 1
        self._maybe_done()

    def output(self, fd: int) -> str:
        return b"".join(self.chunks[fd]).decode("utf-8", errors="replace")


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


async def run_process(
    argv: list[str], *, stdin: str | None, env: dict[str, str] | None, timeout: float
) -> ProcessOutcome:
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    try:
        child = _Child(loop, argv, stdin.encode() if stdin is not None else None, env)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        message = f"cannot start {argv[0]!r}: {reason}; check executor.binary_path or the task's binary_path"
        return ProcessOutcome(-1, "", message, None, round(time.monotonic() - started, 3), launch_error=message)

    deadline = loop.call_later(timeout, child.timeout)
    try:
        await child.future
    except BaseException:
        # Cancelled (shutdown): never leave the tree running; the callbacks still reap it.
        _kill_group(child.pid)
        raise
    finally:
        deadline.cancel()
    duration = round(time.monotonic() - started, 3)
    if child.timed_out:
        return ProcessOutcome(-1, child.output(child.out), f"task timed out after {timeout:g}s; its process group was killed",
                              child.pid, duration, timed_out=True)
    assert child.status is not None
    return ProcessOutcome(os.waitstatus_to_exitcode(child.status), child.output(child.out), child.output(child.err),
                          child.pid, duration)
