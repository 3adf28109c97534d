"""Running one subprocess: exec without a shell, capture output, enforce the deadline, reap.

Each task runs in its own session (process group), so a timeout or shutdown kills the
whole tree it started, not just the direct child; the group is also swept after a normal
exit so background stragglers cannot outlive their task.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from dataclasses import dataclass


@dataclass(slots=True)
class ProcessOutcome:
    exit_code: int
    stdout: str
    stderr: str
    pid: int | None
    duration_seconds: float
    timed_out: bool = False
    launch_error: str | None = None


def install_child_watcher() -> None:
    """Python 3.11's default child watcher starts a thread per child; pidfd needs none."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        watcher = asyncio.PidfdChildWatcher()
        watcher.attach_loop(asyncio.get_running_loop())
        asyncio.set_child_watcher(watcher)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def run_process(
    argv: list[str], *, stdin: str | None, env: dict[str, str] | None, timeout: float
) -> ProcessOutcome:
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        reason = exc.strerror or str(exc)
        message = f"cannot start {argv[0]!r}: {reason}; check executor.binary_path or the task's binary_path"
        return ProcessOutcome(-1, "", message, None, round(time.monotonic() - started, 3), launch_error=message)

    pid = proc.pid
    try:
        out, err = await asyncio.wait_for(
            proc.communicate(stdin.encode() if stdin is not None else None), timeout
        )
    except TimeoutError:
        _kill_group(pid)
        await proc.wait()
        return ProcessOutcome(
            -1, "", f"task timed out after {timeout:g}s; its process group was killed", pid,
            round(time.monotonic() - started, 3), timed_out=True,
        )
    except BaseException:
        # Cancelled (shutdown) or anything unexpected: never leave the tree running.
        _kill_group(pid)
        raise
    _kill_group(pid)
    return ProcessOutcome(
        proc.returncode if proc.returncode is not None else -1,
        out.decode("utf-8", errors="replace"),
        err.decode("utf-8", errors="replace"),
        pid,
        round(time.monotonic() - started, 3),
    )
