"""What a handler sees of its cache (``self.cache``): the scopes, the errors, and the cache while it is off.

The cache itself (knarr.cache) builds on these; the handler API holds them, so ``BaseHandler``
has its ``self.cache`` without importing the cache's tiers.
"""

from __future__ import annotations

import enum
from typing import Any

from knarr.errors import KnarrError

ENABLE_HINT = "set cache.enabled: true in the config (or KNARR_CACHE__ENABLED=true)"


class CacheError(KnarrError):
    """A handler used the cache in a way it cannot serve: the message says what and how to fix it."""


class CacheDisabledError(CacheError):
    """``self.cache`` was used while the cache is off."""


class CacheScope(str, enum.Enum):
    """Who sees an entry: this worker only, the workers of its cluster, or every worker."""

    LOCAL = "local"  # memory and this worker's SQLite file
    CLUSTER = "cluster"  # also the shared tier, under the cluster's name
    GLOBAL = "global"  # also the shared tier, under no cluster


class DisabledCache:
    """``self.cache`` while the cache is off: every use says how to turn it on."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise CacheDisabledError(f"self.cache.{name}: the handler cache is off; {ENABLE_HINT}")

    def __contains__(self, key: object) -> bool:
        raise CacheDisabledError(f"`in self.cache`: the handler cache is off; {ENABLE_HINT}")

    def __bool__(self) -> bool:
        return False  # `if self.cache:` reads as "is there a cache"

    def __repr__(self) -> str:
        return "<handler cache: off>"


DISABLED = DisabledCache()
