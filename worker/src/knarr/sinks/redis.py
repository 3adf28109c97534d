"""Redis sink: each payload is ``SET <key_prefix><key> <data as JSON> [EX ttl]``, one pipeline per delivery.

The pipeline is sent without MULTI/EXEC (``transaction=False``). SET is idempotent, so a batch
sent again whole after a failure part-way ends in the same state as one sent once; MULTI/EXEC
would hold the single-threaded server for the whole batch, and still would not undo a command
that fails as it runs (Redis has no rollback), so it would buy no atomicity worth the cost.

A server that is down, loading its data, read-only (a replica during failover), out of memory
or not answering within ``socket_timeout_seconds`` raises :class:`TransientSinkError`: the
delivery waits and retries. Any other error reply refuses the batch (:class:`PermanentSinkError`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rex
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from knarr.config.masking import mask_value
from knarr.config.models import RedisSinkConfig
from knarr.config.root import KnarrConfig
from knarr.sinks.base import PermanentSinkError, SinkConnectError, TransientSinkError

CLOSE_TIMEOUT = 2.0  # the worker gives closing the sinks 3 s

# Replies that mean "not now" rather than "not this": the same SET goes through later.
_TRANSIENT_REPLIES = (rex.ReadOnlyError, rex.OutOfMemoryError, rex.TryAgainError, rex.ClusterDownError)


def is_transient(exc: BaseException) -> bool:
    # BusyLoadingError is a ConnectionError; asyncio's TimeoutError is an OSError.
    return isinstance(exc, (rex.ConnectionError, rex.TimeoutError, OSError, *_TRANSIENT_REPLIES))


def commands(payloads: list[Any], prefix: str) -> list[tuple[str, str, int | None]]:
    """(key, value, ttl) per payload; refuses a ttl Redis would refuse, before anything is sent."""
    out = []
    for p in payloads:
        if p.ttl is not None and p.ttl < 1:
            raise PermanentSinkError(f"key {prefix + p.key!r}: ttl must be at least 1 second (or None: no expiry), got {p.ttl}")
        out.append((prefix + p.key, p.data_json(), p.ttl))
    return out


class RedisSink:
    sink_type = "redis"

    def __init__(self, name: str, config: RedisSinkConfig) -> None:
        self.name = name
        self.config = config
        self.client: aioredis.Redis | None = None

    @classmethod
    def from_config(cls, name: str, config: RedisSinkConfig, root: KnarrConfig) -> RedisSink:
        return cls(name, config)

    def __str__(self) -> str:
        return f"redis sink {self.name!r} ({mask_value(self.config.url)})"

    async def connect(self) -> None:
        timeout = self.config.socket_timeout_seconds
        try:
            # No retries inside the client: a failed delivery is retried by the sink manager, with backoff,
            # and says so in readiness, instead of waiting here unseen. At most pool_max connections: past
            # them a delivery waits for one (up to the socket timeout), as the PostgreSQL pool does.
            pool = aioredis.BlockingConnectionPool.from_url(
                self.config.url, max_connections=self.config.pool_max, timeout=timeout,
                socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0),
            )
            self.client = aioredis.Redis.from_pool(pool)
        except (ValueError, TypeError) as exc:
            raise SinkConnectError(f"{self}: invalid url ({mask_value(str(exc))}); fix sinks.redis.{self.name}.url") from None
        try:
            async with asyncio.timeout(timeout):
                await self.client.ping()
        except (rex.RedisError, OSError) as exc:
            why = f"no answer within {timeout:g}s" if isinstance(exc, (TimeoutError, rex.TimeoutError)) else _reason(exc)
            raise SinkConnectError(f"{self}: cannot connect: {why}; check the url and that the server is up") from None

    async def deliver(self, payloads: list[Any]) -> None:
        if self.client is None:
            raise TransientSinkError("not connected")
        planned = commands(payloads, self.config.key_prefix)
        if not planned:
            return
        pipe = self.client.pipeline(transaction=False)
        for key, value, ttl in planned:
            pipe.set(key, value, ex=ttl)
        try:
            # The socket timeout bounds each read; this bounds the whole batch (a frozen server sends nothing).
            async with asyncio.timeout(self.config.socket_timeout_seconds * 2):
                await pipe.execute()
        except (rex.RedisError, OSError) as exc:
            if is_transient(exc):
                if isinstance(exc, rex.ConnectionError) and str(exc).startswith("No connection available"):
                    raise TransientSinkError(f"all {self.config.pool_max} connections busy for {self.config.socket_timeout_seconds:g}s "
                                             "(is the server frozen or overloaded?)") from None
                raise TransientSinkError(_reason(exc)) from None
            raise PermanentSinkError(_reason(exc)) from None
        finally:
            await pipe.reset()

    async def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            try:
                await asyncio.wait_for(client.aclose(), CLOSE_TIMEOUT)
            except (rex.RedisError, OSError):
                pass  # closing a connection to a server that is gone: nothing left to release


def _reason(exc: BaseException) -> str:
    if isinstance(exc, (TimeoutError, rex.TimeoutError)):
        return "no answer in time (is the server frozen or overloaded?)"
    return mask_value(f"{type(exc).__name__}: {str(exc).rstrip('.')}")
