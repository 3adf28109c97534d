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
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

from knarr.engine.frames import PREFIX, PROTOCOL_VERSION, FrameError, check_prefix, encode, parse_header

__all__ = ["FrameError", "Request", "Result", "read_request", "serve", "write_hello", "write_result"]


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


def serve(run: Callable[[Request], object], inp: BinaryIO | None = None, out: BinaryIO | None = None) -> None:
    """Answer requests with ``run`` until stdin closes.

    The frames go to the original stdout; the program's file descriptor 1 (and ``sys.stdout``)
    is pointed at stderr, so stray prints cannot corrupt them.
    """
    if out is None:
        sys.stdout.flush()
        out = os.fdopen(os.dup(1), "wb")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    if inp is None:
        inp = sys.stdin.buffer
    write_hello(out)
    while (request := read_request(inp)) is not None:
        started = time.perf_counter()
        try:
            result = _as_result(run(request))
        except Exception:
            result = Result(exit_code=1, stderr=traceback.format_exc())
        write_result(out, request.id, result, time.perf_counter() - started)
