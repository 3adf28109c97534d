"""What a sink remembers about each payload between attempts at one delivery.

The SinkManager tries a delivery again with the same payload objects (after an outage, or when
``on_delivery_error`` asks for RETRY). A sink whose server can take part of a batch (requests
sent one per payload, a bulk write stopped halfway) keeps per-payload progress here, so the next
attempt sends only what is not confirmed yet. An entry lives as long as its payload object.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class PayloadProgress(Generic[T]):
    """Per-payload state, keyed by the payload object itself (payload models are not hashable)."""

    def __init__(self, factory: Callable[[Any], T]) -> None:
        self._factory = factory
        self._entries: dict[int, T] = {}

    def of(self, payload: Any) -> T:
        key = id(payload)
        found = self._entries.get(key)
        if found is None:
            found = self._entries[key] = self._factory(payload)
            # The entry goes when the payload does, before its id can be reused by another object.
            weakref.finalize(payload, self._entries.pop, key, None)
        return found

    def forget(self, payloads: Iterable[Any]) -> None:
        """Drop the state of payloads whose delivery is over (a later delivery starts afresh)."""
        for payload in payloads:
            self._entries.pop(id(payload), None)

    def __len__(self) -> int:
        return len(self._entries)
