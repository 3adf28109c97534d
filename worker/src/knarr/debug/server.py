"""The debug web server: the UI's static files, its JSON API, the live WebSocket feed, the db download.

aiohttp, because it is already installed (kopf depends on it), it serves HTTP and WebSockets
from the worker's own event loop with no extra thread, and it is mature. Every ``/api`` route
answers JSON, bounded by ``debug.max_ui_rows``; with ``debug.token`` set, every ``/api`` request
and the WebSocket need ``Authorization: Bearer <token>`` (or ``?token=``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from knarr.config.masking import masked
from knarr.config.root import KnarrConfig, dump_config
from knarr.debug import fleet, queries
from knarr.debug.links import links
from knarr.debug.recorder import FlightRecorder
from knarr.observability.logging import get_logger

log = get_logger(component="debug")
STATIC_DIR = Path(__file__).parent / "static"
CHUNK = 256 * 1024


def bad_request(reason: str) -> web.HTTPBadRequest:
    """A 400 answer saying what is wrong with the request, as JSON like every other answer."""
    return web.HTTPBadRequest(text=_json_text({"error": reason}), content_type="application/json")


class DebugServer:
    def __init__(self, config: KnarrConfig, recorder: FlightRecorder, overview: Callable[[], dict[str, Any]],
                 handler: Any = None) -> None:
        self.config = config
        self.debug = config.debug
        self.recorder = recorder
        self.overview = overview
        self.handler = handler
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self._sockets: set[web.WebSocketResponse] = set()

    @property
    def url(self) -> str:
        host = self.debug.host
        if host in ("0.0.0.0", "::", ""):
            host = socket.gethostname()
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth, self._errors], client_max_size=16 * 1024 * 1024)
        api = [
            web.get("/api/overview", self.get_overview),
            web.get("/api/events", self.get_events),
            web.get("/api/trace/{partition}/{offset}", self.get_trace),
            web.get("/api/tasks/slow", self.get_slow),
            web.get("/api/tasks/failed", self.get_failed),
            web.get("/api/dlq", self.get_dlq),
            web.get("/api/config", self.get_config),
            web.get("/api/links", self.get_links),
            web.get("/api/fleet", self.get_fleet),
            web.get("/api/fleet/events", self.get_fleet_events),
            web.get("/api/db", self.get_db),
            web.get("/api/ws", self.websocket),
            web.post("/api/probe", self.post_probe),
            web.get("/", self.index),
        ]
        app.add_routes(api)
        if STATIC_DIR.is_dir():
            app.router.add_static("/static/", STATIC_DIR)
        app.on_shutdown.append(self._close_sockets)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.debug.host, self.debug.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # port 0: the one picked
        log.info("debug UI listening", host=self.debug.host, port=self.port, token=bool(self.debug.token))

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _close_sockets(self, _app: web.Application) -> None:
        for ws in list(self._sockets):
            await ws.close(code=1001, message=b"worker stopping")

    # --- middleware ------------------------------------------------------------------------------
    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        token = self.debug.token
        if token and request.path.startswith("/api/"):
            given = request.headers.get("Authorization", "")
            given = given[7:].strip() if given[:7].lower() == "bearer " else request.query.get("token", "")
            if not hmac.compare_digest(given.encode(), token.encode()):
                return web.json_response({"error": "this debug UI needs its token: send 'Authorization: Bearer "
                                                   "<debug.token>' (or ?token=<debug.token>)"}, status=401,
                                         headers={"WWW-Authenticate": 'Bearer realm="knarr debug"'})
        return await handler(request)

    @web.middleware
    async def _errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except Exception as exc:  # a failed query must answer, not drop the connection
            log.exception("debug API request failed", path=request.path)
            return web.json_response({"error": f"{type(exc).__name__}: {exc}"}, status=500)

    # --- pages -----------------------------------------------------------------------------------
    async def index(self, _request: web.Request) -> web.StreamResponse:
        page = STATIC_DIR / "index.html"
        if not page.is_file():
            return web.Response(text="knarr debug UI: no pages installed; the JSON API is under /api/",
                                content_type="text/plain")
        return web.FileResponse(page)

    # --- the JSON API ----------------------------------------------------------------------------
    async def get_overview(self, _request: web.Request) -> web.Response:
        return web.json_response(self.overview(), dumps=_json_text)

    async def get_events(self, request: web.Request) -> web.Response:
        return web.json_response(await self.recorder.read(queries.events, _filters(request), self._limit(request)),
                                 dumps=_json_text)

    async def get_trace(self, request: web.Request) -> web.Response:
        partition = _int(request.match_info["partition"], "partition")
        offset = _int(request.match_info["offset"], "offset")
        await self.recorder.flush()  # a message just processed is in the trace
        return web.json_response(await self.recorder.read(queries.trace, partition, offset, self._limit(request)),
                                 dumps=_json_text)

    async def get_slow(self, request: web.Request) -> web.Response:
        min_ms = _number(request.query.get("min_ms"), "min_ms", self.debug.log_min_duration_ms)
        return web.json_response(await self.recorder.read(queries.slow_tasks, min_ms, self._limit(request)),
                                 dumps=_json_text)

    async def get_failed(self, request: web.Request) -> web.Response:
        return web.json_response(await self.recorder.read(queries.failed_tasks, self._limit(request)), dumps=_json_text)

    async def get_dlq(self, request: web.Request) -> web.Response:
        return web.json_response(await self.recorder.read(queries.dead_letters, self._limit(request)), dumps=_json_text)

    async def get_config(self, _request: web.Request) -> web.Response:
        return web.json_response(masked(dump_config(self.config)), dumps=_json_text)

    async def get_links(self, _request: web.Request) -> web.Response:
        return web.json_response(links(self.debug, self.recorder.worker, self.recorder.cluster), dumps=_json_text)

    async def get_fleet(self, _request: web.Request) -> web.Response:
        await self.recorder.flush()
        return web.json_response(await fleet.describe(self.recorder, self.overview()), dumps=_json_text)

    async def get_fleet_events(self, request: web.Request) -> web.Response:
        await self.recorder.flush()
        return web.json_response(await fleet.read(self.recorder, queries.events, _filters(request), self._limit(request)),
                                 dumps=_json_text)

    async def get_db(self, request: web.Request) -> web.StreamResponse:
        """The current recorder database, copied consistently (SQLite's backup API) and streamed."""
        fd, path = tempfile.mkstemp(prefix="knarr-recorder-download-", suffix=".db")
        os.close(fd)
        try:
            await self.recorder.backup(path)
            response = web.StreamResponse(headers={
                "Content-Type": "application/vnd.sqlite3",
                "Content-Disposition": f'attachment; filename="knarr-recorder-{_safe(self.recorder.worker)}.db"',
                "Content-Length": str(os.path.getsize(path)),
            })
            await response.prepare(request)
            with open(path, "rb") as f:
                while chunk := await asyncio.to_thread(f.read, CHUNK):
                    await response.write(chunk)
            await response.write_eof()
            return response
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    async def websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(heartbeat=30)
        await ws.prepare(request)
        self._sockets.add(ws)
        queue = self.recorder.subscribe()
        await ws.send_json({"type": "hello", "worker": self.recorder.worker, "cluster": self.recorder.cluster,
                            "ws_min_duration_ms": self.debug.ws_min_duration_ms}, dumps=_json_text)

        async def push() -> None:
            while True:
                await ws.send_json(await queue.get(), dumps=_json_text)

        sender = asyncio.create_task(push())
        try:
            async for msg in ws:  # the client says nothing the server needs; this waits for its close
                if msg.type == WSMsgType.ERROR:
                    break
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await sender
            self.recorder.unsubscribe(queue)
            self._sockets.discard(ws)
        return ws

    async def post_probe(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            raise bad_request("the body must be JSON: {\"message\": {\"key\": ..., \"value\": ...}}") from None
        if not isinstance(body, dict) or not isinstance(body.get("message"), dict):
            raise bad_request("the body must be {\"message\": {\"key\": ..., \"value\": ..., \"headers\"?: {...}}}")
        try:
            from knarr.debug.probe import run_probe
        except ModuleNotFoundError as exc:
            if exc.name != "knarr.debug.probe":
                raise
            return web.json_response({"error": "the message probe (module knarr.debug.probe) is not part of this build"},
                                     status=501)
        if self.handler is None:
            return web.json_response({"error": "this server has no handler to probe with"}, status=501)
        report = await run_probe(self.config, self.handler, body["message"])
        return web.json_response(report, dumps=_json_text)

    def _limit(self, request: web.Request) -> int:
        cap = self.debug.max_ui_rows
        given = request.query.get("limit")
        return cap if given is None else max(1, min(cap, _int(given, "limit")))


def _filters(request: web.Request) -> dict[str, Any]:
    query = request.query
    out: dict[str, Any] = {}
    for name in queries.FILTERS:
        value = query.get(name)
        if value in (None, ""):
            continue
        out[name] = _int(value, name) if name in ("partition", "offset", "since_id") else value
    return out


def _int(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise bad_request(f"{name} must be a whole number, got {value[:50]!r}") from None


def _number(value: str | None, name: str, default: float) -> float:
    if value in (None, ""):
        return default
    try:
        return float(value)
    except ValueError:
        raise bad_request(f"{name} must be a number, got {value[:50]!r}") from None


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _json_text(data: Any) -> str:
    from knarr.debug.schema import dumps

    return dumps(data)
