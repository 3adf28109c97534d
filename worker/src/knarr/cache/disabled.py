"""What ``self.cache`` is while the cache is off: every use says how to turn it on."""

from __future__ import annotations

from typing import Any

from knarr.cache.entries import ENABLE_HINT, CacheDisabledError


class DisabledCache:
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
