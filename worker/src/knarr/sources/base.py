"""What a source is: partitions that get assigned and revoked, polled batches, commits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from knarr.api.messages import SourceMessage

AssignFn = Callable[[list[int]], Awaitable[None]]
RevokeFn = Callable[[list[int], bool], Awaitable[dict[int, int]]]
"""Revoke callback: (partitions, lost) -> offsets that may be committed before letting go."""


class Source(Protocol):
    topic: str

    async def start(self, on_assign: AssignFn, on_revoke: RevokeFn) -> None: ...

    async def poll(self, max_records: int, commits: dict[int, int]) -> tuple[list[SourceMessage], dict[int, int]]:
        """Commit ``commits`` (partition -> next offset), then fetch up to ``max_records`` messages.

        Returns the messages and the commits that succeeded.
        """
        ...

    def set_paused(self, partitions: set[int]) -> None:
        """Pause exactly these partitions (resume any other paused one)."""
        ...

    async def commit_now(self, commits: dict[int, int]) -> dict[int, int]: ...

    @property
    def finished(self) -> bool:
        """True when a bounded source has nothing left (the Kafka source never finishes)."""
        ...

    async def close(self) -> None: ...
