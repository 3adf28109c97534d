"""Flight events: one structured record per pipeline stage, logged and counted.

A later recorder will also store them; for now they go to the log (at DEBUG, so they cost
nothing unless asked for) and to ``knarr_flight_events_total``.
"""

from __future__ import annotations

from typing import Any

from knarr.observability import metrics
from knarr.observability.logging import get_logger

_log = get_logger(component="flight")


def emit(event: str, **fields: Any) -> None:
    metrics.flight_events.labels(event).inc()
    _log.debug(event, **fields)
