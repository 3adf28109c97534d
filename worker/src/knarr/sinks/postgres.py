"""PostgreSQL sink: each payload is a row; a delivery is one transaction, so it lands whole or not at all.

Plain inserts go through COPY and upserts (``on_conflict``) through a prepared INSERT ... ON
CONFLICT run for every row (``executemany``). Measured on PostgreSQL 15 with one transaction per
batch (``bench/postgres_insert.py``): up to ~30 rows the methods are within noise of each other
(~0.2-0.5 ms, the round trips dominate); from 100 rows on, COPY writes 1.3-2x the rows per second
of executemany. COPY cannot upsert; one INSERT of unnest()ed arrays was at most 1.6x faster than
executemany for upserts, but it needs every column's type spelled out and flattens array columns,
so upserts stay with executemany. COPY writes to tables only (not to views).

A server that is down, restarting, out of connections, frozen or that picked this transaction
as a deadlock victim raises :class:`TransientSinkError`: the delivery waits and retries. A
server that refuses the rows (unknown column, wrong type, constraint) raises
:class:`PermanentSinkError` with the server's own words, and ``on_delivery_error`` decides.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg

from knarr.config.masking import mask_value
from knarr.config.models import PostgresSinkConfig
from knarr.config.root import KnarrConfig
from knarr.observability.logging import get_logger
from knarr.sinks.base import PermanentSinkError, SinkConnectError, TransientSinkError
from knarr.sinks.postgres_batches import Batch, batches, server_reason, transient_sqlstate

log = get_logger(component="sinks")

CLOSE_TIMEOUT = 2.0  # a graceful pool close that takes longer is cut short (the worker gives closing 3 s)


# One encoder for every value (json.dumps with default= builds a new one per call).
_JSON = json.JSONEncoder(default=str)


def _jsonb_out(value: Any) -> bytes:
    # JSON text as given (asyncpg's own behaviour), anything else encoded, in the binary format COPY needs.
    return b"\x01" + (value if isinstance(value, str) else _JSON.encode(value)).encode()


def _json_out(value: Any) -> bytes:
    return (value if isinstance(value, str) else _JSON.encode(value)).encode()


async def _init_connection(conn: asyncpg.Connection) -> None:
    """json/jsonb columns take dicts and lists (and JSON text, as before); reading them still gives text."""
    await conn.set_type_codec("jsonb", schema="pg_catalog", format="binary",
                              encoder=_jsonb_out, decoder=lambda data: data[1:].decode())
    await conn.set_type_codec("json", schema="pg_catalog", format="binary",
                              encoder=_json_out, decoder=lambda data: data.decode())


def is_transient(exc: BaseException) -> bool:
    """Whether the server is away (retry the same batch later) rather than refusing it."""
    if isinstance(exc, asyncpg.PostgresError):
        return transient_sqlstate(exc.sqlstate)
    if isinstance(exc, (OSError, asyncio.TimeoutError)):  # refused, reset, unreachable, timed out
        return True
    if isinstance(exc, asyncpg.InterfaceError) and not isinstance(exc, ValueError):
        # "connection is closed", "pool is closing": the connection went away, not the data
        return "closed" in str(exc) or "closing" in str(exc)
    return False


def _reason(exc: BaseException, batch: Batch | None = None) -> str:
    if isinstance(exc, asyncpg.PostgresError):
        return server_reason(getattr(exc, "message", None) or str(exc), getattr(exc, "detail", None),
                             getattr(exc, "hint", None))
    if isinstance(exc, asyncio.TimeoutError):
        return "no answer in time (is the server frozen or overloaded?)"
    text = mask_value(f"{type(exc).__name__}: {exc}")
    if batch is not None and isinstance(exc, (TypeError, ValueError)):  # asyncpg could not encode a value
        return f"{text} (a value does not fit its column's type; columns: {', '.join(batch.columns)})"
    return text


class PostgresSink:
    sink_type = "postgres"

    def __init__(self, name: str, config: PostgresSinkConfig) -> None:
        self.name = name
        self.config = config
        self.pool: asyncpg.Pool | None = None  # what on_ready(config, pool) gets

    @classmethod
    def from_config(cls, name: str, config: PostgresSinkConfig, root: KnarrConfig) -> PostgresSink:
        return cls(name, config)

    def __str__(self) -> str:
        return f"postgres sink {self.name!r} ({mask_value(self.config.dsn)})"

    async def connect(self) -> None:
        cfg = self.config
        try:
            pool = asyncpg.create_pool(cfg.dsn, min_size=cfg.pool_min, max_size=cfg.pool_max,
                                       timeout=cfg.connect_timeout_seconds, command_timeout=cfg.command_timeout_seconds,
                                       init=_init_connection)
        except (ValueError, TypeError, asyncpg.InterfaceError) as exc:  # a dsn asyncpg cannot read
            raise SinkConnectError(f"{self}: invalid dsn ({mask_value(str(exc))}); fix sinks.postgres.{self.name}.dsn") from None
        try:
            async with asyncio.timeout(cfg.connect_timeout_seconds):
                await pool
        except Exception as exc:
            pool.terminate()
            if isinstance(exc, (ValueError, asyncpg.ClientConfigurationError)):
                raise SinkConnectError(f"{self}: invalid dsn ({mask_value(str(exc))}); fix sinks.postgres.{self.name}.dsn") from None
            why = f"no answer within {cfg.connect_timeout_seconds:g}s" if isinstance(exc, TimeoutError) else _reason(exc)
            raise SinkConnectError(f"{self}: cannot connect: {why.rstrip('.')}; check the dsn and that the server is up") from None
        self.pool = pool

    async def deliver(self, payloads: list[Any]) -> None:
        if self.pool is None:
            raise TransientSinkError("not connected")
        planned = batches(payloads)  # refuses bad names and data before anything is sent
        if not planned:
            return
        current: list[Batch] = []  # the batch being written, for the error (deliveries run concurrently)
        try:
            await self._write(planned, current)
        except (TransientSinkError, PermanentSinkError):
            raise
        except Exception as exc:
            batch = current[-1] if current else None
            where = f"table {str(batch.table)!r}: " if batch else ""
            if is_transient(exc):
                raise TransientSinkError(f"{where}{_reason(exc)}") from None
            raise PermanentSinkError(f"{where}{_reason(exc, batch)}") from None

    async def _write(self, planned: list[Batch], current: list[Batch]) -> None:
        """One transaction for every batch. The whole delivery is bounded by command_timeout_seconds:
        a frozen server must never hold a partition forever. A connection left in doubt (timed out,
        cut off) is terminated, not returned to the pool as it is."""
        assert self.pool is not None
        timeout = self.config.command_timeout_seconds
        conn = await self.pool.acquire(timeout=timeout)
        sound = False
        try:
            async with asyncio.timeout(timeout):
                transaction = conn.transaction()
                await transaction.start()
                try:
                    for batch in planned:
                        current.append(batch)
                        if batch.upsert:
                            await conn.executemany(batch.insert_sql(), batch.rows)
                        else:
                            await conn.copy_records_to_table(batch.table.name, schema_name=batch.table.schema,
                                                             columns=batch.columns, records=batch.rows)
                except asyncpg.PostgresError as exc:
                    if not transient_sqlstate(exc.sqlstate):  # the server answered: the connection is sound
                        await transaction.rollback()
                        sound = True
                    raise
                await transaction.commit()
                sound = True
        finally:
            if not sound:
                conn.terminate()
            await self.pool.release(conn, timeout=timeout)

    async def close(self) -> None:
        pool, self.pool = self.pool, None
        if pool is None:
            return
        try:
            await asyncio.wait_for(pool.close(), CLOSE_TIMEOUT)
        except BaseException as exc:
            pool.terminate()  # a server that does not answer cannot hold up shutdown
            if not isinstance(exc, Exception):
                raise
            log.warning("postgres pool did not close in time; its connections were cut", sink=self.name, error=_reason(exc))
