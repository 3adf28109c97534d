"""The shared tier: one Redis server every worker reaches, for the cluster and global scopes.

Pods share no disk, so entries meant for other workers go to a server they all reach. Keys are
``<key_prefix>c:<cluster>:<key>`` (cluster scope) and ``<key_prefix>g:<key>`` (global scope); the
value is the entry's JSON text and Redis expires it with the entry's TTL.

The tier is an optimisation, never a dependency: a server that does not answer within
``socket_timeout_seconds`` opens an outage (one log line, a counter), during which reads skip
the tier and the pipeline goes on with the local tiers. After ``retry_after_seconds`` the next
read or write tries again; the first one that works closes the outage (one more log line).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rex
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from knarr.api.cache import CacheScope
from knarr.config.masking import mask_value
from knarr.observability import metrics
from knarr.runtime.stopping import wait_event

CLOSE_TIMEOUT = 1.0  # each of: the last writes, closing the connections (the worker gives the cache 3 s)


@dataclass
class Outage:
    """Whether the shared tier is usable now. Pure: the caller passes the time."""

    retry_after: float
    down_since: float | None = None
    retry_at: float = 0.0

    def usable(self, now: float) -> bool:
        return self.down_since is None or now >= self.retry_at

    def failed(self, now: float) -> bool:
        """Record a failure; True when it opens a new outage (log it then, once)."""
        opened = self.down_since is None
        if opened:
            self.down_since = now
        self.retry_at = now + self.retry_after
        return opened

    def answered(self, now: float) -> float | None:
        """Record a success; the outage's length when this closes one, else None."""
        if self.down_since is None:
            return None
        lasted, self.down_since = now - self.down_since, None
        return lasted


class SharedTier:
    def __init__(self, config: Any, cluster: str, log: Any, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.cluster = cluster
        self.log = log
        self.clock = clock
        self.outage = Outage(config.retry_after_seconds)
        self.client: aioredis.Redis | None = None
        self._pending: deque[tuple[str, str | None, float | None]] = deque()
        self._wake = asyncio.Event()
        self._writer: asyncio.Task | None = None
        self._closing = False
        metrics.cache_shared_available.set(1)

    def __str__(self) -> str:
        return f"shared cache tier ({mask_value(self.config.url)})"

    def redis_key(self, key: str, scope: CacheScope) -> str:
        if scope is CacheScope.CLUSTER:
            return f"{self.config.key_prefix}c:{self.cluster}:{key}"
        return f"{self.config.key_prefix}g:{key}"

    async def open(self) -> None:
        timeout = self.config.socket_timeout_seconds
        pool = aioredis.BlockingConnectionPool.from_url(
            self.config.url, max_connections=self.config.pool_max, timeout=timeout,
            socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0),
        )
        self.client = aioredis.Redis.from_pool(pool)
        try:
            async with asyncio.timeout(timeout):
                await self.client.ping()
            self._answered()
        except (rex.RedisError, OSError) as exc:
            self._failed(exc, "connect")
        self._writer = asyncio.create_task(self._write_loop())

    # --- reads -----------------------------------------------------------------------------
    async def lookup(self, key: str) -> tuple[str, float | None] | None:
        """(JSON text, expires_at) of the cluster entry, else the global one; None on a miss or an outage."""
        if self.client is None or not self.outage.usable(self.clock()):
            return None
        names = [self.redis_key(key, CacheScope.CLUSTER), self.redis_key(key, CacheScope.GLOBAL)]
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.get(name)
            pipe.pttl(name)
        try:
            async with asyncio.timeout(self.config.socket_timeout_seconds * 2):
                replies = await pipe.execute()
        except (rex.RedisError, OSError) as exc:
            self._failed(exc, "read")
            return None
        finally:
            await pipe.reset()
        self._answered()
        now = self.clock()
        for i in (0, 2):
            text, ttl_ms = replies[i], replies[i + 1]
            if text is not None:
                text = text.decode() if isinstance(text, bytes) else text
                return text, (now + ttl_ms / 1000 if ttl_ms is not None and ttl_ms > 0 else None)
        return None

    # --- writes ----------------------------------------------------------------------------
    def write(self, name: str, text: str | None, ttl: float | None) -> None:
        """Queue a SET (text) or DEL (None) of ``name``; the writer task sends what is queued in one pipeline."""
        if len(self._pending) >= self.config.max_pending_writes:
            self._pending.popleft()
            metrics.cache_shared_writes_dropped.inc()
        self._pending.append((name, text, ttl))
        self._wake.set()

    async def _write_loop(self) -> None:
        """Send what is queued, one pipeline at a time; during an outage, wait for the retry time.

        Once ``close()`` asked it to, the loop ends as soon as nothing is queued or the tier is away.
        """
        while True:
            if not self._pending:
                if self._closing:
                    return
                await self._wake.wait()
                self._wake.clear()
                continue
            if not self.outage.usable(self.clock()):
                if self._closing:
                    return
                await wait_event(self._wake, max(0.0, self.outage.retry_at - self.clock()))
                self._wake.clear()
                continue
            await self._send()

    async def _send(self) -> None:
        assert self.client is not None
        batch = list(self._pending)
        self._pending.clear()
        pipe = self.client.pipeline(transaction=False)
        for name, text, ttl in batch:
            if text is None:
                pipe.delete(name)
            else:
                pipe.set(name, text, px=max(1, math.ceil(ttl * 1000)) if ttl is not None else None)
        try:
            async with asyncio.timeout(self.config.socket_timeout_seconds * 2):
                await pipe.execute()
        except (rex.RedisError, OSError) as exc:
            # A cache write lost is a later miss, not lost work: count it and go on.
            metrics.cache_shared_writes_dropped.inc(len(batch))
            self._failed(exc, "write")
            return
        finally:
            await pipe.reset()
        self._answered()

    # --- outages ---------------------------------------------------------------------------
    def _failed(self, exc: BaseException, during: str) -> None:
        metrics.cache_shared_errors.inc()
        metrics.cache_shared_available.set(0)
        if self.outage.failed(self.clock()):
            reason = ("no answer in time" if isinstance(exc, (TimeoutError, rex.TimeoutError))
                      else mask_value(f"{type(exc).__name__}: {exc}"))
            self.log.warning("shared cache tier unavailable: using this worker's memory and SQLite only until it answers",
                             tier=str(self), during=during, reason=reason,
                             retry_after_seconds=self.config.retry_after_seconds)

    def _answered(self) -> None:
        lasted = self.outage.answered(self.clock())
        metrics.cache_shared_available.set(1)
        if lasted is not None:
            self.log.info("shared cache tier answers again", tier=str(self), outage_seconds=round(lasted, 1))

    async def close(self) -> None:
        """Send what is queued (for at most CLOSE_TIMEOUT), then close the connections."""
        writer, self._writer = self._writer, None
        self._closing = True
        self._wake.set()
        if writer is not None:
            try:
                await asyncio.wait_for(writer, CLOSE_TIMEOUT)  # cancels the writer when it takes longer
            except TimeoutError:
                pass
        if self._pending:  # a cache write lost at shutdown is a later miss
            metrics.cache_shared_writes_dropped.inc(len(self._pending))
            self._pending.clear()
        client, self.client = self.client, None
        if client is None:
            return
        try:
            await asyncio.wait_for(client.aclose(), CLOSE_TIMEOUT)
        except (TimeoutError, rex.RedisError, OSError):
            pass  # closing connections to a server that is gone: nothing left to release
