"""``self.cache``: what handlers call, and the write-behind loop that keeps SQLite in step.

Reads go memory -> SQLite -> shared tier, and a hit below memory is kept in memory for the next
read. ``set`` and ``delete`` touch memory at once; SQLite gets them on the next flush (every
``flush_interval_seconds``, in one transaction, on the cache's own thread) and the shared tier
from its writer task. So nothing a handler calls waits on a disk or a network, except ``get`` on
a memory miss, which is why it is the only ``async`` call.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from knarr.api.cache import CacheScope
from knarr.api.tasks import PrecomputedResult
from knarr.cache.entries import Entry, check_key, check_scope, check_ttl, decode, encode, expiry
from knarr.cache.memory import MemoryTier
from knarr.cache.store import Change, SqliteStore, db_path
from knarr.errors import ConfigError
from knarr.observability import metrics
from knarr.observability.logging import get_logger
from knarr.observability.ratelimit import Deduplicator

if TYPE_CHECKING:
    from knarr.cache.shared import SharedTier

T = TypeVar("T")
MAX_TTL_SECONDS = 365 * 86_400.0
FLUSH_ERROR_LOG_SECONDS = 60.0

_hit_memory = metrics.cache_hits.labels("memory")
_hit_sqlite = metrics.cache_hits.labels("sqlite")
_hit_shared = metrics.cache_hits.labels("shared")
_miss_peek = metrics.cache_misses.labels("peek")
_miss_get = metrics.cache_misses.labels("get")


class HandlerCache:
    """The cache a handler reaches as ``self.cache`` (``cache.enabled: true``)."""

    def __init__(self, config: Any, worker_name: str, cluster: str = "", clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.log = get_logger(component="cache")
        self.memory = MemoryTier(config.max_entries)
        self.store = SqliteStore(db_path(config.db_dir, worker_name)) if config.db_dir else None
        self.shared: SharedTier | None = None
        if config.shared is not None:
            from knarr.cache.shared import SharedTier  # redis's client: imported only when a shared tier is set

            self.shared = SharedTier(config.shared, cluster, self.log, clock)
        self._dirty: dict[str, Change] = {}  # written since the last flush, by key; the newest change wins
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="knarr-cache") if self.store else None
        self._flusher: asyncio.Task | None = None
        self._flush_errors = Deduplicator(window_seconds=FLUSH_ERROR_LOG_SECONDS)
        self._unshared: set[CacheScope] = set()
        metrics.cache_entries.set_function(lambda: len(self.memory))  # read at scrape time, not per write

    def __repr__(self) -> str:
        return f"<handler cache: {len(self.memory)} entries in memory>"

    # --- lifecycle -------------------------------------------------------------------------
    async def open(self) -> None:
        """Open the SQLite file (and warm memory from it) and the shared tier; start flushing."""
        if self.store is not None:
            try:
                await self._in_thread(self.store.open)
            except (OSError, sqlite3.Error) as exc:
                raise ConfigError(f"cache.db_dir: cannot open the cache database {self.store.path} ({exc}); "
                                  "point cache.db_dir at a writable directory, or leave it empty for no SQLite tier") from None
            if self.config.warm_start:
                rows = await self._in_thread(self.store.recent, self.config.max_entries, self.clock())
                for key, text, expires_at in rows:
                    self.memory.put(key, Entry(decode(text), text, expires_at))
            self._flusher = asyncio.create_task(self._flush_loop())
        if self.shared is not None:
            await self.shared.open()
        self.log.info("handler cache open", memory_entries=len(self.memory), max_entries=self.config.max_entries,
                      db=str(self.store.path) if self.store else None, shared=str(self.shared) if self.shared else None)

    async def close(self) -> None:
        """Flush what is pending to SQLite and the shared tier, then close both."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            flusher.cancel()
            await asyncio.gather(flusher, return_exceptions=True)
        if self.store is not None:
            await self.flush()
            await self._in_thread(self.store.close)
            assert self._thread is not None
            self._thread.shutdown(wait=False)
        if self.shared is not None:
            await self.shared.close()

    # --- the handler's calls ---------------------------------------------------------------
    def peek(self, key: str) -> Any | None:
        """The value if memory holds it (no I/O at all), else None."""
        entry = self.memory.get(check_key(key), self.clock())
        if entry is None:
            _miss_peek.inc()
            return None
        _hit_memory.inc()
        return entry.value

    def __contains__(self, key: str) -> bool:
        """Whether memory holds a live entry (no I/O; the entry does not become recently used)."""
        return self.memory.contains(check_key(key), self.clock())

    async def get(self, key: str, *, as_type: type[T] | None = None) -> Any | None:
        """The value from memory, else SQLite, else the shared tier; None when none has it.

        ``as_type=SomeModel`` returns ``SomeModel.model_validate(value)``.
        """
        entry = await self._lookup(check_key(key))
        value = None if entry is None else entry.value
        if value is not None and as_type is not None and isinstance(as_type, type) and issubclass(as_type, BaseModel):
            return as_type.model_validate(value)
        return value

    def set(self, key: str, value: Any, *, ttl: float | None = None, scope: CacheScope | str = CacheScope.LOCAL) -> None:
        """Store ``value`` (JSON, or a pydantic model) for ``ttl`` seconds (None: cache.default_ttl_seconds).

        ``scope``: local (this worker), cluster (also the shared tier, for this cluster's workers)
        or global (also the shared tier, for every worker). Memory keeps the value object itself:
        change a stored dict or list and ``peek`` sees the change, SQLite and the other workers do not.
        """
        check_key(key)
        scope = check_scope(key, scope)
        ttl = check_ttl(key, ttl, MAX_TTL_SECONDS) if ttl is not None else self.config.default_ttl_seconds
        if scope is not CacheScope.LOCAL and self.shared is None and scope not in self._unshared:
            self._unshared.add(scope)  # said once per scope: a handler moved from Drakkar may use them without peers
            self.log.warning(f"scope={scope.value!r} entries stay on this worker: there is no shared tier; "
                             "set cache.shared.url to share them", key=key)
        value, text = encode(key, value, self.config.max_value_bytes)
        expires_at = expiry(self.clock(), ttl)
        self._remember(key, Entry(value, text, expires_at))
        if self.store is not None:
            self._dirty[key] = (key, text, expires_at)
        if self.shared is not None and scope is not CacheScope.LOCAL:
            self.shared.write(self.shared.redis_key(key, scope), text, ttl)

    def delete(self, key: str) -> bool:
        """Remove ``key`` from every tier (SQLite and the shared tier on their next write); True if memory held it."""
        held = self.memory.delete(check_key(key))
        if self.store is not None:
            self._dirty[key] = (key, None, None)
        if self.shared is not None:
            for scope in (CacheScope.CLUSTER, CacheScope.GLOBAL):
                self.shared.write(self.shared.redis_key(key, scope), None, None)
        return held

    async def precomputed(self, key: str) -> PrecomputedResult | None:
        """A ``PrecomputedResult`` made of the cached value (its stdout), or None on a miss.

        ``ExecutorTask(..., precomputed=await self.cache.precomputed(key))`` runs the task only
        when the cache has nothing; a str value is the stdout as is, anything else its JSON.
        """
        entry = await self._lookup(check_key(key))
        if entry is None:
            return None
        return PrecomputedResult(stdout=entry.value if isinstance(entry.value, str) else entry.text)

    # --- tiers -----------------------------------------------------------------------------
    async def _lookup(self, key: str) -> Entry | None:
        now = self.clock()
        entry = self.memory.get(key, now)
        if entry is not None:
            _hit_memory.inc()
            return entry
        pending = self._dirty.get(key)
        if pending is not None:  # written (or deleted) and evicted before the flush
            _, text, expires_at = pending
            if text is None or (expires_at is not None and now >= expires_at):
                _miss_get.inc()
                return None
            _hit_memory.inc()
            return self._remember(key, Entry(decode(text), text, expires_at))
        if self.store is not None:
            found = await self._in_thread(self.store.read, key, now)
            if found is not None:
                _hit_sqlite.inc()
                text, expires_at = found
                return self._remember(key, Entry(decode(text), text, expires_at))
        if self.shared is not None:
            found = await self.shared.lookup(key)
            if found is not None:
                _hit_shared.inc()
                text, expires_at = found
                return self._remember(key, Entry(decode(text), text, expires_at))
        _miss_get.inc()
        return None

    def _remember(self, key: str, entry: Entry) -> Entry:
        evicted = self.memory.put(key, entry)
        if evicted:
            metrics.cache_evictions.inc(len(evicted))
        return entry

    # --- write-behind ----------------------------------------------------------------------
    async def flush(self) -> None:
        """Write what changed since the last flush to SQLite, in one transaction, off the event loop."""
        if self.store is None or not self._dirty:
            return
        changes, self._dirty = list(self._dirty.values()), {}
        started = time.perf_counter()
        try:
            await self._in_thread(self.store.write, changes, self.clock())
        except Exception as exc:  # disk full, file removed, locked: keep the changes for the next flush
            for change in changes:
                self._dirty.setdefault(change[0], change)
            metrics.cache_flush_errors.inc()
            emit, repeats = self._flush_errors.seen("flush", time.monotonic())
            if emit:
                self.log.warning("cache flush to SQLite failed; the changes stay in memory and are tried again",
                                 db=str(self.store.path), error=f"{type(exc).__name__}: {exc}",
                                 pending=len(self._dirty), **({"repeated": repeats} if repeats else {}))
            return
        finally:
            metrics.cache_flush_duration.observe(time.perf_counter() - started)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_interval_seconds)
            await self.flush()

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)


async def attach_cache(config: Any, handler: Any, cluster: str) -> HandlerCache | None:
    """Open the cache ``config.cache`` describes and make it the handler's ``self.cache``; None when it is off.

    The SQLite file is named after the worker (``worker_name_env``), so a restarted worker finds
    its entries; without a name it is ``knarr-cache.db``.
    """
    if not config.cache.enabled:
        return None
    cache = HandlerCache(config.cache, os.environ.get(config.worker_name_env) or "knarr", cluster)
    await cache.open()
    handler.cache = cache
    return cache
