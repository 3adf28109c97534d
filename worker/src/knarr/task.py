"""Writing a persistent task program in Python: read a request, write a result (docs/task-protocol.md).

A whole program::

    from knarr.task import Result, serve

    def run(request):
        word = request.args[0]
        return Result(stdout=word.upper() + "\\n")

    serve(run)

``serve`` says hello, then answers requests until the worker closes stdin. What the function
returns becomes the result: a :class:`Result`, or ``str``/``bytes`` for stdout with exit code 0.
An exception becomes exit code 1 with the traceback on the result's stderr, and the program
goes on with the next request. While the function runs, anything printed — by ``print``, a
library or a subprocess — goes to the program's stderr, never into the frames on stdout.

``read_request`` and ``write_result`` are the lower level, for a loop of your own.

``serve(run, poll_seconds=0.002)`` keeps looking for the next request for that long after each
answer, every ``poll_interval_seconds``, before it blocks on stdin. While it looks, the worker's
write of a request wakes nobody: a program asleep in ``read()`` has to be woken, which costs the
worker's event loop a few microseconds a task, and more on virtual machines where a wake-up across
CPUs is dear (on the 2-core VM of docs/performance.md, about 8 us, 13 % of the loop's time per task).
The price is the program's CPU: a check every interval while it looks. Under a steady flow of
tasks it never blocks; once tasks stop it blocks after ``poll_seconds``. Off (0) by default.
"""

from __future__ import annotations

import os
import select
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

from knarr.engine.frames import PREFIX, PROTOCOL_VERSION, FrameError, check_prefix, encode, parse_header

POLL_INTERVAL_SECONDS = 50e-6  # serve's poll_interval_seconds: the sleep between two looks at stdin

__all__ = ["FrameError", "PolledInput", "Request", "Result", "read_request", "serve", "write_hello", "write_result"]


@dataclass(slots=True)
class Request:
    """One task: its id, arguments, stdin and the environment variables it adds (``env``, a delta)."""

    id: str
    args: list[str]
    stdin: bytes = b""
    env: dict[str, str] = field(default_factory=dict)
    timeout_seconds: float | None = None
    header: dict = field(default_factory=dict)  # the whole request header, unknown keys included

    @property
    def text(self) -> str:
        """stdin as text (UTF-8)."""
        return self.stdin.decode("utf-8", errors="replace")

    def environ(self) -> dict[str, str]:
        """The program's environment with the task's variables on top: what a spawned task would have seen."""
        return {**os.environ, **self.env}


@dataclass(slots=True)
class Result:
    exit_code: int = 0
    stdout: str | bytes = ""
    stderr: str | bytes = ""


def _read_exactly(stream: BinaryIO, size: int, what: str) -> bytes:
    data = stream.read(size) if size else b""
    if len(data) != size:
        raise FrameError(f"the stream ended inside a frame ({what}: {len(data)} of {size} bytes)")
    return data


def write_hello(out: BinaryIO) -> None:
    out.write(encode({"type": "hello", "protocol": PROTOCOL_VERSION, "pid": os.getpid()}))
    out.flush()


def read_request(inp: BinaryIO) -> Request | None:
    """The next task, or None when the worker has closed stdin (time to exit)."""
    prefix = inp.read(PREFIX.size)
    if not prefix:
        return None
    if len(prefix) != PREFIX.size:
        raise FrameError(f"the stream ended inside a frame prefix ({len(prefix)} of {PREFIX.size} bytes)")
    header_len, body_len = check_prefix(prefix)
    header = parse_header(_read_exactly(inp, header_len, "header"))
    body = _read_exactly(inp, body_len, "body")
    if header["type"] != "task":
        raise FrameError(f"expected a 'task' frame, got {header['type']!r}")
    return Request(id=str(header.get("id", "")), args=list(header.get("args") or []), stdin=body,
                   env=dict(header.get("env") or {}), timeout_seconds=header.get("timeout_seconds"), header=header)


def _bytes(value: str | bytes) -> bytes:
    return value.encode("utf-8", errors="surrogateescape") if isinstance(value, str) else bytes(value)


def write_result(out: BinaryIO, request_id: str, result: Result, duration_seconds: float | None = None) -> None:
    stdout, stderr = _bytes(result.stdout), _bytes(result.stderr)
    header: dict = {"type": "result", "id": request_id, "exit_code": int(result.exit_code), "stdout_bytes": len(stdout)}
    if duration_seconds is not None:
        header["duration_seconds"] = round(duration_seconds, 6)
    out.write(encode(header, stdout + stderr))
    out.flush()


def _as_result(value: object) -> Result:
    if isinstance(value, Result):
        return value
    if isinstance(value, (str, bytes, bytearray)):
        return Result(stdout=bytes(value) if isinstance(value, bytearray) else value)
    if value is None:
        return Result()
    raise TypeError(f"a task function returns a knarr.task.Result, str or bytes, not {type(value).__name__}")


class PolledInput:
    """A stream over a file descriptor whose ``read(n)``, when it has to wait, first looks for data
    every ``interval`` seconds for ``poll_seconds`` and only then blocks (see the module's docstring).
    ``read(n)`` returns ``n`` bytes, fewer only at end of file, as a buffered reader's does."""

    def __init__(self, fd: int, poll_seconds: float, interval: float = POLL_INTERVAL_SECONDS) -> None:
        self.fd = fd
        self.poll_seconds = poll_seconds
        self.interval = interval
        self._buffer = bytearray()
        self._ended = False
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)

    def read(self, size: int) -> bytes:
        buffer = self._buffer
        while len(buffer) < size and not self._ended:
            self._fill()
        taken = bytes(buffer[:size])
        del buffer[:size]
        return taken

    def _fill(self) -> None:
        deadline = time.monotonic() + self.poll_seconds
        while not self._ready() and time.monotonic() < deadline:
            time.sleep(self.interval)
        data = os.read(self.fd, 1 << 16)  # blocks only once the looking is over
        if data:
            self._buffer += data
        else:
            self._ended = True

    def _ready(self) -> bool:
        """Something to read (or the end of the file), without waiting."""
        return bool(self._poller.poll(0))


def serve(run: Callable[[Request], object], inp: BinaryIO | None = None, out: BinaryIO | None = None, *,
          poll_seconds: float = 0.0, poll_interval_seconds: float = POLL_INTERVAL_SECONDS) -> None:
    """Answer requests with ``run`` until stdin closes.

    The frames go to the original stdout; the program's file descriptor 1 (and ``sys.stdout``)
    is pointed at stderr, so stray prints cannot corrupt them. ``poll_seconds`` > 0: after each
    answer, look for the next request that long before blocking (the module's docstring says when
    that pays).
    """
    if poll_seconds < 0 or poll_interval_seconds <= 0:
        raise ValueError(f"poll_seconds must be 0 or more and poll_interval_seconds more than 0, "
                         f"got {poll_seconds} and {poll_interval_seconds}")
    if out is None:
        sys.stdout.flush()
        out = os.fdopen(os.dup(1), "wb")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    if inp is None:
        inp = sys.stdin.buffer
    if poll_seconds > 0:
        inp = PolledInput(inp.fileno(), poll_seconds, poll_interval_seconds)
    write_hello(out)
    while (request := read_request(inp)) is not None:
        started = time.perf_counter()
        try:
            result = _as_result(run(request))
        except Exception:
            result = Result(exit_code=1, stderr=traceback.format_exc())
        write_result(out, request.id, result, time.perf_counter() - started)
