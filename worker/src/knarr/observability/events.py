"""Flight events: one structured record per pipeline stage, logged and counted.

A later recorder will also store them; for now they go to the log (at DEBUG, so they cost
nothing unless asked for) and to ``knarr_flight_events_total``.
"""

from __future__ import annotations

from typing import Any

from knarr.observability import logging as knarr_logging
from knarr.observability import metrics
from knarr.observability.logging import get_logger

_log = get_logger(component="flight")
_counters = {name: metrics.flight_events.labels(name) for name in ("task_complete", "message_complete", "window_complete")}


def emit(event: str, **fields: Any) -> None:
    counter = _counters.get(event) or metrics.flight_events.labels(event)
    counter.inc()
    if knarr_logging.debug_enabled:  # building the record costs more than the event itself
        _log.debug(event, **fields)
