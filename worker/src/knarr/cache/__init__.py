"""The handler cache (``self.cache``): memory, then this worker's SQLite file, then a shared tier.

entries.py   what is stored, and the checks        memory.py   the bounded LRU with expiry (pure)
store.py     the SQLite tier (one thread)          shared.py   the Redis tier for cluster/global scopes
handler_cache.py  the facade handlers use, its flush loop and lifecycle

The scopes, the errors and the cache while it is off are the handler API's (knarr.api.cache).
"""

from knarr.api.cache import DISABLED, CacheDisabledError, CacheError, CacheScope, DisabledCache

__all__ = ["DISABLED", "CacheDisabledError", "CacheError", "CacheScope", "DisabledCache"]
