"""/metrics, /healthz and /readyz on one small asyncio HTTP server.

It runs on the worker's own event loop on purpose: if the loop is blocked, /healthz stops
answering and Kubernetes' liveness probe restarts the pod.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

HEARTBEAT_SECONDS = 1.0
STALE_AFTER_SECONDS = 10.0


class HealthServer:
    def __init__(self, port: int, readiness: Callable[[], tuple[bool, str]], host: str = "0.0.0.0") -> None:
        self.host = host
        self.port = port
        self.readiness = readiness
        self._server: asyncio.Server | None = None
        self._beat = time.monotonic()
        self._beat_task: asyncio.Task | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._beat_task = asyncio.create_task(self._heartbeat())

    async def _heartbeat(self) -> None:
        while True:
            self._beat = time.monotonic()
            await asyncio.sleep(HEARTBEAT_SECONDS)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = request.decode("latin-1").split()
            path = parts[1].split("?")[0] if len(parts) >= 2 else "/"
            status, ctype, body = self._route(path)
            head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    def _route(self, path: str) -> tuple[str, str, bytes]:
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest()
        if path == "/healthz":
            age = time.monotonic() - self._beat
            ok = age < STALE_AFTER_SECONDS
            return _json("200 OK" if ok else "503 Service Unavailable", {"alive": ok, "loop_heartbeat_age_seconds": round(age, 3)})
        if path == "/readyz":
            ready, reason = self.readiness()
            return _json("200 OK" if ready else "503 Service Unavailable", {"ready": ready, "reason": reason})
        return _json("404 Not Found", {"error": f"no such endpoint {path!r}; try /metrics, /healthz or /readyz"})

    async def stop(self) -> None:
        if self._beat_task is not None:
            self._beat_task.cancel()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


def _json(status: str, data: dict) -> tuple[str, str, bytes]:
    return status, "application/json", json.dumps(data).encode()
