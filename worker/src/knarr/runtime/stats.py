"""Counts of what a worker did, for reports (the backfill's per-chunk summary) and tests."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class RunStats:
    messages: int = 0
    empty_messages: int = 0
    tasks: int = 0
    succeeded: int = 0
    failed: int = 0
    replaced: int = 0
    dead_lettered: int = 0
    outputs: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
