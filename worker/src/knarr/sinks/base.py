"""What every sink is: connect once, deliver batches of payloads, close; and how a delivery fails.

A sink says what kind of failure it met, because the two call for opposite responses:

- :class:`TransientSinkError`: the server is down, unreachable, overloaded or timing out. The
  same batch will go through later, so the delivery waits and retries with backoff, for as long
  as it takes; the partition waits with it (nothing is committed past it) and nothing is
  dead-lettered. Readiness and ``knarr_sink_waiting`` say which sink is being waited for.
- :class:`PermanentSinkError` (and any other exception): the server refused *these* payloads
  (a bad column, a 400). Retrying the same batch will not help by itself, so the handler's
  ``on_delivery_error`` decides: RETRY (bounded), SKIP or DLQ. When the server took some of the
  batch, the error names the refused payloads and only they go on.
"""

from __future__ import annotations

from typing import Any, Protocol

from knarr.errors import UnavailableError


class Sink(Protocol):
    sink_type: str
    name: str

    async def connect(self) -> None:
        """Open connections; raise :class:`SinkConnectError` (naming the sink) if it is unreachable."""

    async def deliver(self, payloads: list[Any]) -> None:
        """Deliver every payload, or raise. Returning means all of them are confirmed."""

    async def close(self) -> None:
        """Release connections; called once on shutdown, also after a failed connect."""


class SinkConnectError(UnavailableError):
    """A sink could not be reached at startup."""


class TransientSinkError(Exception):
    """The sink's server cannot take the batch *now* (down, unreachable, overloaded, timed out).

    ``retry_after`` is the server's own hint in seconds (HTTP ``Retry-After``), if it gave one.
    """

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentSinkError(Exception):
    """The sink's server refused these payloads; sending them again unchanged would fail again.

    ``payloads`` names the refused ones when the server took the others (confirmed, not to be
    sent again): only those are handed to ``on_delivery_error``, retried or dead-lettered.
    ``None`` means the whole batch.
    """

    def __init__(self, message: str, payloads: list[Any] | None = None) -> None:
        super().__init__(message)
        self.payloads = payloads
