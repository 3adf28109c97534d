"""What every sink is: connect once, deliver batches of payloads, close."""

from __future__ import annotations

from typing import Any, Protocol

from knarr.errors import UnavailableError


class Sink(Protocol):
    sink_type: str
    name: str

    async def connect(self) -> None:
        """Open connections; raise (with a message for people) if the sink is unreachable."""

    async def deliver(self, payloads: list[Any]) -> None:
        """Deliver every payload, or raise. Returning means all of them are confirmed."""

    async def close(self) -> None: ...


class SinkConnectError(UnavailableError):
    """A sink could not be reached at startup."""
