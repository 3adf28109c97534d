"""The memory tier: a bounded LRU map with expiry. Pure: the caller passes the time."""

from __future__ import annotations

from collections import OrderedDict

from knarr.cache.entries import Entry


class MemoryTier:
    """At most ``max_entries`` entries; putting one more evicts the least recently used."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self._entries: OrderedDict[str, Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str, now: float) -> Entry | None:
        """The live entry (now the most recently used), or None; an expired entry is dropped."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expired(now):
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry

    def contains(self, key: str, now: float) -> bool:
        """Whether a live entry is there, without making it recently used."""
        entry = self._entries.get(key)
        return entry is not None and not entry.expired(now)

    def put(self, key: str, entry: Entry) -> list[str]:
        """Store ``entry``; returns the keys evicted to stay within the bound."""
        self._entries[key] = entry
        self._entries.move_to_end(key)
        evicted = []
        while len(self._entries) > self.max_entries:
            old, _ = self._entries.popitem(last=False)
            evicted.append(old)
        return evicted

    def delete(self, key: str) -> bool:
        return self._entries.pop(key, None) is not None
