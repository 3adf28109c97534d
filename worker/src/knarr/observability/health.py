"""/metrics, /healthz and /readyz on one small asyncio HTTP server.

It runs on the worker's own event loop on purpose: if the loop is blocked, /healthz stops
answering and Kubernetes' liveness probe restarts the pod.

It listens on the pod's network, so it must not be the thing that takes a worker down:
a request is a GET of one short head (request line and headers, at most
``MAX_HEAD_BYTES``, received within ``head_timeout`` seconds, no body), and at most
``max_connections`` connections are open at once. A new connection past that evicts the
oldest one still sending its head: an idle or trickling client can hold a slot only until
someone else needs it, so a probe (which sends its request at once) is always answered.
"""

from __future__ import annotations

import asyncio
import errno
import json
import socket
import time
from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from knarr.errors import UnavailableError
from knarr.observability import metrics

HEARTBEAT_SECONDS = 1.0
STALE_AFTER_SECONDS = 10.0
MAX_HEAD_BYTES = 8 * 1024  # request line + headers; real probes and scrapers send a few hundred bytes
HEAD_TIMEOUT_SECONDS = 5.0  # for the whole head, not per line, so a trickle cannot stretch it
WRITE_TIMEOUT_SECONDS = 10.0  # a client that stops reading the answer is dropped
_READING, _ANSWERING = "reading", "answering"


class ProbeServerError(UnavailableError):
    """The probe server cannot listen where the config says; the message names the key and what to do."""


class HealthServer:
    def __init__(
        self,
        port: int,
        readiness: Callable[[], tuple[bool, str]],
        host: str = "0.0.0.0",
        max_connections: int = 32,
        head_timeout: float = HEAD_TIMEOUT_SECONDS,
        failure: Callable[[], str | None] = lambda: None,
        exposition: Callable[[], Awaitable[bytes]] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.readiness = readiness
        self.failure = failure  # a reason the worker cannot recover by itself: /healthz fails so it is restarted
        self.exposition = exposition  # what /metrics serves; None: this process's registry
        self.max_connections = max_connections
        self.head_timeout = head_timeout
        self._server: asyncio.Server | None = None
        self._beat = time.monotonic()
        self._beat_task: asyncio.Task | None = None
        self._open: dict[asyncio.StreamWriter, str] = {}  # in arrival order
        self._handlers: set[asyncio.Task] = set()

    @property
    def open_connections(self) -> int:
        return len(self._open)

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self.port, limit=MAX_HEAD_BYTES)
        except OSError as exc:
            raise ProbeServerError(bind_problem(exc, self.host, self.port)) from None
        self.port = self._server.sockets[0].getsockname()[1]
        self._beat_task = asyncio.create_task(self._heartbeat())

    async def _heartbeat(self) -> None:
        while True:
            self._beat = time.monotonic()
            await asyncio.sleep(HEARTBEAT_SECONDS)

    # --- one connection ----------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        if not self._make_room():
            metrics.probe_connections_dropped.labels("busy").inc()
            writer.transport.abort()
            return
        self._open[writer] = _READING
        try:
            try:
                answer = await asyncio.wait_for(self._read_request(reader), self.head_timeout)
            except TimeoutError:
                metrics.probe_connections_dropped.labels("slow").inc()
                answer = _json("408 Request Timeout", {"error": f"request head not received within {self.head_timeout:g} s"})
            if answer is None:
                return  # the client went away (or was evicted) before finishing its request
            self._open[writer] = _ANSWERING
            writer.write(answer)
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_SECONDS)
        except (TimeoutError, ConnectionError):
            pass
        finally:
            self._open.pop(writer, None)
            writer.close()

    def _make_room(self) -> bool:
        """Evict the oldest connection still sending its head if the server is full; False if none can go."""
        if len(self._open) < self.max_connections:
            return True
        for writer, state in self._open.items():
            if state == _READING:
                del self._open[writer]
                metrics.probe_connections_dropped.labels("evicted").inc()
                writer.transport.abort()  # its reader sees end-of-stream; its handler ends
                return True
        return False

    async def _read_request(self, reader: asyncio.StreamReader) -> bytes | None:
        """The whole answer to one request, or None when the client left without asking."""
        try:
            request_line = await reader.readline()
        except ValueError:
            metrics.probe_connections_dropped.labels("oversize").inc()
            return _json("414 URI Too Long", {"error": f"request line longer than {MAX_HEAD_BYTES} bytes"})
        if not request_line.endswith(b"\n"):
            return None
        size = len(request_line)
        headers: dict[str, str] = {}
        while True:
            try:
                line = await reader.readline()
            except ValueError:
                line = b"x" * (MAX_HEAD_BYTES + 1)
            size += len(line)
            if size > MAX_HEAD_BYTES:
                metrics.probe_connections_dropped.labels("oversize").inc()
                return _json("431 Request Header Fields Too Large", {"error": f"request head larger than {MAX_HEAD_BYTES} bytes"})
            if not line.endswith(b"\n"):
                return None
            if line in (b"\r\n", b"\n"):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        parts = request_line.decode("latin-1").split()
        method = parts[0] if parts else ""
        path = parts[1].split("?")[0] if len(parts) >= 2 else "/"
        if method not in ("GET", "HEAD"):
            return _json("405 Method Not Allowed", {"error": "only GET and HEAD are served"}, extra="Allow: GET, HEAD\r\n")
        if headers.get("content-length", "0") not in ("", "0") or "transfer-encoding" in headers:
            metrics.probe_connections_dropped.labels("oversize").inc()
            return _json("413 Content Too Large", {"error": "this endpoint takes no request body"})
        if path == "/metrics":
            body = generate_latest() if self.exposition is None else await self.exposition()
            answer = _response("200 OK", CONTENT_TYPE_LATEST, body)
        else:
            answer = _json(*self._route(path))
        return answer.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n" if method == "HEAD" else answer

    def _route(self, path: str) -> tuple[str, dict]:
        if path == "/healthz":
            age = time.monotonic() - self._beat
            failure = self.failure()
            ok = age < STALE_AFTER_SECONDS and failure is None
            body: dict = {"alive": ok, "loop_heartbeat_age_seconds": round(age, 3)}
            if failure is not None:
                body["failed"] = failure
            return "200 OK" if ok else "503 Service Unavailable", body
        if path == "/readyz":
            ready, reason = self.readiness()
            return "200 OK" if ready else "503 Service Unavailable", {"ready": ready, "reason": reason}
        return "404 Not Found", {"error": f"no such endpoint {path!r}; try /metrics, /healthz or /readyz"}

    async def stop(self) -> None:
        if self._beat_task is not None:
            self._beat_task.cancel()
        if self._server is not None:
            self._server.close()
        for writer in list(self._open):
            writer.transport.abort()  # each handler sees end-of-stream and ends
        self._open.clear()
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=WRITE_TIMEOUT_SECONDS)
        if self._server is not None:
            await self._server.wait_closed()


def bind_problem(exc: OSError, host: str, port: int) -> str:
    """Why the probe server cannot listen, for people: the key, the cause, what to do."""
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"metrics.port {port} is already in use on {host} (another worker or program on this host listens "
            f"there); stop it, set metrics.port to a free port (0 picks one), or set metrics.enabled: false"
        )
    if exc.errno == errno.EACCES:
        return f"metrics.port {port}: not allowed to listen on {where} (ports below 1024 need privileges); use a port above 1023"
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return f"metrics.host {host!r} is not an address of this machine; use 0.0.0.0 (every interface), :: or 127.0.0.1"
    return f"cannot listen on {where} (metrics.host, metrics.port): {exc.strerror or exc}"


def _json(status: str, data: dict, extra: str = "") -> bytes:
    return _response(status, "application/json", json.dumps(data).encode(), extra)


def _response(status: str, ctype: str, body: bytes, extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
    return head.encode() + body
