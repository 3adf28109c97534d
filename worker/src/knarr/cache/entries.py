"""What the handler cache stores: an entry (value, its JSON text, when it expires), checked keys, TTLs and scopes.

Values are JSON: the text is what SQLite and the shared tier hold, so a value that cannot be
encoded is refused when it is set, not when another worker reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from knarr.api.cache import CacheError, CacheScope

MAX_KEY_CHARS = 1024
# One encoder, made once: json.dumps with any option builds a new encoder per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass(slots=True)
class Entry:
    value: Any
    text: str  # the value as JSON
    expires_at: float | None  # unix time; None: never

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


def check_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise CacheError(f"cache keys are non-empty strings, got {key!r}")
    if len(key) > MAX_KEY_CHARS:
        raise CacheError(f"cache key of {len(key)} characters is longer than {MAX_KEY_CHARS}; hash long keys "
                         "(e.g. hashlib.sha256(key.encode()).hexdigest())")
    return key


def encode(key: str, value: Any, max_bytes: int) -> tuple[Any, str]:
    """(the value as stored, its JSON text); a pydantic model is stored as its JSON data."""
    if value is None:
        raise CacheError(f"cache key {key!r}: None cannot be stored (a read returns None for a miss); "
                         "use delete(key) to remove an entry")
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise CacheError(f"cache key {key!r}: the value is not JSON ({exc}); store str, numbers, bools, "
                         "lists, dicts or a pydantic model") from None
    if len(text) > max_bytes:
        raise CacheError(f"cache key {key!r}: the value is {len(text)} characters as JSON, more than "
                         f"cache.max_value_bytes ({max_bytes}); store less or raise the bound")
    return value, text


def decode(text: str) -> Any:
    return json.loads(text)


def expiry(now: float, ttl: float | None) -> float | None:
    return None if ttl is None else now + ttl


def check_ttl(key: str, ttl: object, max_ttl: float) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not (0 < ttl <= max_ttl):
        raise CacheError(f"cache key {key!r}: ttl must be a number of seconds above 0 and at most {max_ttl:g}, "
                         f"got {ttl!r}")
    return float(ttl)


def check_scope(key: str, scope: object) -> CacheScope:
    try:
        return CacheScope(scope)
    except ValueError:
        raise CacheError(f"cache key {key!r}: scope must be one of local, cluster, global, got {scope!r}") from None
