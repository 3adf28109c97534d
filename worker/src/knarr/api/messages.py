"""What flows in: a message from one partition of the source."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class SourceMessage(BaseModel):
    """One message of the source topic. ``payload`` is the parsed input model, or None if it did not parse."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    topic: str
    partition: int
    offset: int
    value: bytes
    key: bytes | None = None
    timestamp: int | None = None
    payload: Any = None
    parse_error: str | None = None

    @property
    def label(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


def by_partition(messages: list[SourceMessage]) -> dict[int, list[SourceMessage]]:
    """Messages per partition, each partition's in the order given."""
    parts: dict[int, list[SourceMessage]] = {}
    for msg in messages:
        parts.setdefault(msg.partition, []).append(msg)
    return parts
