"""HTTP sink: one request per payload (its data as the JSON body), a delivery's requests sent side by side.

Each payload is one ``method`` request to ``url``; up to ``max_concurrency`` requests of the sink
are in flight at once, so the server sees a delivery's payloads in no particular order. A
delivery is confirmed when every request got a 2xx.

A request that meets a connection error, a timeout, 408, 429 or a 5xx is tried again up to
``max_retries`` times with backoff (or after the server's ``Retry-After``). If it still fails, the
server is taken to be down or overloaded: :class:`TransientSinkError`, and the delivery waits like
any outage (nothing is dead-lettered for it). Requests already answered with a 2xx are not sent
again by the next attempt. Any other answer (400, 404, 422, a redirect, ...) refuses that payload
alone: :class:`PermanentSinkError` naming it, with the status and the head of the response body.

At startup (:meth:`HttpSink.connect`) the sink sends one ``OPTIONS`` request to ``url``: any HTTP
answer, even 404 or 405, shows the server is there; no answer (refused, unknown host, TLS
failure, timeout) stops startup with exit code 3 naming the sink.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from dataclasses import dataclass
from typing import Any

import httpx

from knarr.config.masking import mask_value
from knarr.config.models import HttpSinkConfig
from knarr.config.root import KnarrConfig
from knarr.runtime.backoff import retry_delay
from knarr.sinks.base import PermanentSinkError, SinkConnectError, TransientSinkError
from knarr.sinks.progress import PayloadProgress

RETRY_BASE_SECONDS = 0.5
RETRY_MAX_SECONDS = 10.0
# A Retry-After longer than this is not waited for inside one attempt: the delivery hands it to
# the SinkManager, which waits for the sink like for any outage.
RETRY_AFTER_MAX_SECONDS = 30.0
CONNECT_CHECK_MAX_SECONDS = 10.0
EXCERPT_CHARS = 300
READ_LIMIT = 64 * 1024  # the most of a response body read (a refusal's excerpt; the rest is dropped)
NOT_SUPPORTED = frozenset({501, 505})  # 5xx that say "never", not "not now"


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delay-seconds or an HTTP date), None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


def is_passing(status: int) -> bool:
    """Whether an HTTP status says "try later" (timeout, rate limit, server trouble) rather than "no"."""
    return status in (408, 429) or (status >= 500 and status not in NOT_SUPPORTED)


@dataclass(slots=True)
class _Failure:
    reason: str
    passing: bool  # the server is down or overloaded: the payload waits, it is not refused
    retry_after: float | None = None


@dataclass(slots=True)
class _Sent:
    done: bool = False


class HttpSink:
    sink_type = "http"

    def __init__(self, name: str, config: HttpSinkConfig) -> None:
        self.name = name
        self.config = config
        self.url = mask_value(config.url)  # for messages: never a password in the URL
        self._client: httpx.AsyncClient | None = None
        self._slots: asyncio.Semaphore | None = None
        self._progress: PayloadProgress[_Sent] = PayloadProgress(lambda _: _Sent())

    @classmethod
    def from_config(cls, name: str, config: HttpSinkConfig, root: KnarrConfig) -> HttpSink:
        return cls(name, config)

    async def connect(self) -> None:
        cfg = self.config
        headers = dict(cfg.headers)
        if not any(name.lower() == "content-type" for name in headers):
            headers["Content-Type"] = "application/json"
        self._client = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(cfg.timeout_seconds), follow_redirects=False,
            limits=httpx.Limits(max_connections=cfg.max_concurrency, max_keepalive_connections=cfg.max_concurrency),
        )
        self._slots = asyncio.Semaphore(cfg.max_concurrency)
        timeout = min(cfg.timeout_seconds, CONNECT_CHECK_MAX_SECONDS)
        try:
            async with self._client.stream("OPTIONS", cfg.url, timeout=timeout) as response:
                await _head(response, READ_LIMIT)
        except httpx.TimeoutException:
            raise SinkConnectError(f"http sink {self.name!r} ({self.url}): no answer within {timeout:g}s; "
                                   f"check the URL and that the server is up") from None
        except (httpx.TransportError, httpx.InvalidURL) as exc:
            raise SinkConnectError(f"http sink {self.name!r} ({self.url}): cannot reach the server: "
                                   f"{_describe(exc)}; check the URL and that the server is up") from None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def deliver(self, payloads: list[Any]) -> None:
        todo = [p for p in payloads if not self._progress.of(p).done]
        failures = await asyncio.gather(*(self._send(p) for p in todo))
        failed = [(p, f) for p, f in zip(todo, failures) if f is not None]
        passing = [f for _, f in failed if f.passing]
        if passing:
            hints = [f.retry_after for f in passing if f.retry_after is not None]
            raise TransientSinkError(f"{self.url}: {len(passing)} of {len(todo)} request(s) failed: {passing[0].reason}",
                                     retry_after=max(hints) if hints else None)
        if failed:
            shown = "; ".join(f.reason for _, f in failed[:5])
            more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
            raise PermanentSinkError(f"{self.url} refused {len(failed)} of {len(todo)} request(s): {shown}{more}",
                                     payloads=[p for p, _ in failed])
        self._progress.forget(payloads)

    async def _send(self, payload: Any) -> _Failure | None:
        """Send one payload, with quick retries for passing failures; None once the server took it."""
        try:
            body = payload.data_json().encode()
        except (TypeError, ValueError) as exc:  # bytes data that is not UTF-8, an unencodable value
            return _Failure(f"payload data cannot be sent as JSON: {exc}", passing=False)
        attempt = 0
        while True:
            failure = await self._request(body)
            if failure is None:
                self._progress.of(payload).done = True
                return None
            attempt += 1
            if not failure.passing or attempt > self.config.max_retries:
                return failure
            delay = retry_delay(attempt, RETRY_BASE_SECONDS, RETRY_MAX_SECONDS)
            if failure.retry_after is not None:
                if failure.retry_after > RETRY_AFTER_MAX_SECONDS:
                    return failure
                delay = max(delay, failure.retry_after)
            await asyncio.sleep(delay)

    async def _request(self, body: bytes) -> _Failure | None:
        assert self._client is not None and self._slots is not None, "connect() first"
        async with self._slots:
            try:
                async with self._client.stream(self.config.method, self.config.url, content=body) as response:
                    head = await _head(response, READ_LIMIT)
            except httpx.TimeoutException:
                return _Failure(f"no answer within {self.config.timeout_seconds:g}s", passing=True)
            except httpx.TransportError as exc:
                return _Failure(_describe(exc), passing=True)
        status = response.status_code
        if 200 <= status < 300:
            return None
        excerpt = " ".join(head.decode("utf-8", errors="replace").split())[:EXCERPT_CHARS]
        reason = f"HTTP {status} {response.reason_phrase}" + (f": {excerpt}" if excerpt else "")
        if is_passing(status):
            return _Failure(reason, passing=True,
                            retry_after=parse_retry_after(response.headers.get("Retry-After"), time.time()))
        if 300 <= status < 400:
            reason += f" (redirects are not followed; set the final address as sinks.http.{self.name}.url)"
        return _Failure(reason, passing=False)


async def _head(response: httpx.Response, limit: int) -> bytes:
    """Up to ``limit`` bytes of the body (reading it whole when it is small keeps the connection reusable)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return b"".join(chunks)[:limit]


def _describe(exc: BaseException) -> str:
    """The error and, under httpx's generic words, the operating system's reason (refused, unknown host)."""
    text = f"{type(exc).__name__}: {exc}"
    root = exc
    while root.__cause__ or root.__context__:
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    if root is not exc and str(root) and str(root) not in text:
        text += f" ({root})"
    return mask_value(text)[:500]
