"""A bounded in-memory source: a fixed list of messages run through the engine once.

Used by backfills (each Spark task processes its chunk with the very same processors) and
by tests. Commits are recorded, not sent anywhere; the source is finished when every
message was handed out and every partition's watermark passed its last offset.
"""

from __future__ import annotations

import asyncio

from knarr.api.messages import SourceMessage, by_partition
from knarr.sources.base import AssignFn, RevokeFn


class MemorySource:
    def __init__(self, messages: list[SourceMessage], topic: str = "memory") -> None:
        self.topic = messages[0].topic if messages else topic
        self._messages = sorted(messages, key=lambda m: (m.partition, m.offset))
        self._ends: dict[int, int] = {}
        for m in self._messages:
            self._ends[m.partition] = max(self._ends.get(m.partition, -1), m.offset + 1)
        # Interleave partitions so they are processed side by side, as from a real consumer.
        self._order: list[SourceMessage] = []
        lists = list(by_partition(self._messages).values())
        for i in range(max((len(lst) for lst in lists), default=0)):
            self._order.extend(lst[i] for lst in lists if i < len(lst))
        self._next = 0
        self._paused = False
        self.committed: dict[int, int] = {}

    async def start(self, on_assign: AssignFn, on_revoke: RevokeFn) -> None:
        await on_assign(sorted(self._ends))

    async def poll(self, max_records: int, commits: dict[int, int]) -> tuple[list[SourceMessage], dict[int, int]]:
        done = await self.commit_now(commits)
        if self._paused or self._next >= len(self._order):
            await asyncio.sleep(0.01)
            return [], done
        batch = self._order[self._next : self._next + max_records]
        self._next += len(batch)
        return batch, done

    async def commit_now(self, commits: dict[int, int]) -> dict[int, int]:
        for p, o in commits.items():
            self.committed[p] = max(self.committed.get(p, 0), o)
        return dict(commits)

    def set_paused(self, partitions: set[int]) -> None:
        # One reader feeds every partition, so pausing any one pauses the read.
        self._paused = bool(partitions)

    @property
    def finished(self) -> bool:
        return self._next >= len(self._order) and all(self.committed.get(p, 0) >= end for p, end in self._ends.items())

    async def close(self) -> None:
        return None
