"""A real HTTP server process for the http sink's tests (``tests/programs/http_sink_server.py``).

Each test gets its own server on a free loopback port (it starts in well under a second). The
server records every request to a JSONL file that outlives restarts, and can be told to answer
429 / 503 / 400 or to hang for the next N requests; ``stop()`` and ``start()`` take it away and
bring it back on the same port, as an outage would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.services.jsonl import written_lines

SERVER = Path(__file__).resolve().parents[1] / "programs" / "http_sink_server.py"


class HttpServerUnavailable(RuntimeError):
    """The test HTTP server did not start."""


class HttpSinkServer:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.record = workdir / "requests.jsonl"
        self.log = workdir / "server.log"
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "/ingest") -> str:
        return self.base + path

    def start(self) -> HttpSinkServer:
        """Start it: on a free port the first time, on the same port afterwards."""
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(SERVER), "--record", str(self.record), "--port", str(self.port)],
                stdout=subprocess.PIPE, stderr=log, text=True,
            )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT="):
            self.proc.kill()
            raise HttpServerUnavailable(f"the test HTTP server did not start (exit {self.proc.wait()}):\n"
                                        f"{self.log.read_text(errors='replace')[-3000:]}")
        self.port = int(line.removeprefix("PORT=").strip())
        return self

    def stop(self) -> None:
        """Kill it (connections are refused until start())."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def fail(self, status: int, count: int = 1, *, retry_after: str | int | None = None, match: str = "",
             hang: float = 0, body: str | None = None, method: str | None = None) -> None:
        """Answer the next ``count`` requests (-1: all) whose body contains ``match`` with ``status``."""
        rule: dict[str, Any] = {"status": status, "count": count, "match": match, "hang": hang}
        if method is not None:
            rule["method"] = method
        if retry_after is not None:
            rule["retry_after"] = str(retry_after)
        if body is not None:
            rule["body"] = body
        httpx.post(self.base + "/_control/faults", json=rule, timeout=5).raise_for_status()

    def reset(self) -> None:
        httpx.post(self.base + "/_control/reset", timeout=5).raise_for_status()

    def requests(self, method: str | None = "POST") -> list[dict[str, Any]]:
        """Every recorded request (of ``method``), across restarts, in arrival order."""
        entries = written_lines(self.record)  # (the server appends to it meanwhile)
        return [e for e in entries if method is None or e["method"] == method]

    def accepted(self) -> list[Any]:
        """The JSON bodies of the requests answered with a 2xx."""
        return [json.loads(e["body"]) for e in self.requests() if 200 <= e["status"] < 300]


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[HttpSinkServer]:
    """A recording HTTP server of this test's own, stopped at its end."""
    workdir = tmp_path / "http-server"
    workdir.mkdir()
    server = HttpSinkServer(workdir)
    try:
        server.start()
    except HttpServerUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()

