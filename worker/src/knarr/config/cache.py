"""The ``cache`` section: the handler cache (``self.cache``) and its tiers."""

from __future__ import annotations

from pydantic import Field

from knarr.config.models import DAY_SECONDS, Section
from knarr.config.paths import ConfigPath

_MIB = 1024 * 1024


class SharedCacheConfig(Section):
    """The shared tier: a Redis server every worker reaches (pods share no disk)."""

    url: str = Field(..., min_length=1, description="Redis URL of the shared tier, e.g. redis://cache:6379/1 (keep credentials in a Secret / env override).")
    key_prefix: str = Field("knarr-cache:", description="Prepended to every key; cluster-scoped keys continue with c:<cluster>:, global ones with g:.")
    socket_timeout_seconds: float = Field(1.0, gt=0, le=60, description="Longest wait for the server to connect or answer; past it an outage starts and the cache reads and writes this worker's tiers only.")
    retry_after_seconds: float = Field(5.0, gt=0, le=3_600, description="During an outage, how long the shared tier is left alone before it is tried again.")
    pool_max: int = Field(4, ge=1, le=1_000, description="Most connections to the server at once.")
    max_pending_writes: int = Field(10_000, ge=1, le=1_000_000, description="Writes queued for the server; past it the oldest are dropped (counted on knarr_cache_shared_writes_dropped_total).")


class CacheConfig(Section):
    enabled: bool = Field(False, description="Give handlers self.cache: memory, then SQLite, then the shared tier. Off, self.cache raises an error saying to turn this on.")
    max_entries: int = Field(10_000, ge=1, le=10_000_000, description="Entries kept in memory; past it the least recently used is evicted from memory (SQLite keeps it).")
    db_dir: ConfigPath = Field("", description="Directory of the SQLite tier, <db_dir>/<worker name>-cache.db (the worker name comes from worker_name_env, else 'knarr'); empty: no SQLite tier (relative: to the config file).")
    flush_interval_seconds: float = Field(1.0, gt=0, le=3_600, description="How often the changes made since the last flush are written to SQLite (in one transaction, off the event loop); shutdown flushes too.")
    default_ttl_seconds: float | None = Field(86_400, gt=0, le=365 * DAY_SECONDS, description="Lifetime of an entry set without ttl=; unset (null): such entries never expire.")
    max_value_bytes: int = Field(_MIB, ge=16, le=64 * _MIB, description="Largest value (as JSON) set() accepts; a larger one raises an error naming the key.")
    warm_start: bool = Field(True, description="At startup, load the most recently written live entries (up to max_entries) from SQLite into memory, so peek() hits what the last run stored.")
    shared: SharedCacheConfig | None = Field(None, description="The shared tier for scope='cluster' and scope='global'; unset: no shared tier (such sets raise an error).")
