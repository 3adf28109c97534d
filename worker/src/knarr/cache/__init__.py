"""The handler cache (``self.cache``): memory, then this worker's SQLite file, then a shared tier.

entries.py   what is stored, scopes and errors     memory.py   the bounded LRU with expiry (pure)
store.py     the SQLite tier (one thread)          shared.py   the Redis tier for cluster/global scopes
handler_cache.py  the facade handlers use, its flush loop and lifecycle
"""

from knarr.cache.disabled import DISABLED, DisabledCache
from knarr.cache.entries import CacheDisabledError, CacheError, CacheScope

__all__ = ["DISABLED", "CacheDisabledError", "CacheError", "CacheScope", "DisabledCache"]
