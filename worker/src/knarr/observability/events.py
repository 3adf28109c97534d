"""Flight events: one structured record per pipeline stage, logged, counted and recorded.

Two doors, one meaning:

- :func:`emit` for the hook stages (``task_complete``, ``message_complete``, ``window_complete``):
  a DEBUG log line (built only when DEBUG is on), ``knarr_flight_events_total``, and the flight
  recorder when one is given.
- The engine's other events (consumed, window_arranged, task_queued/started/finished/failed/
  replaced, delivered, dead_lettered, committed, assigned/revoked, backpressure_on/off) go
  straight to ``recorder.record(...)``, behind an ``if recorder is not None`` at the call site:
  they happen several times per task, and with the recorder off (the default) that test is all
  they cost.
"""

from __future__ import annotations

from typing import Any

from knarr.observability import logging as knarr_logging
from knarr.observability import metrics
from knarr.observability.logging import get_logger

_log = get_logger(component="flight")
_counters = {name: metrics.flight_events.labels(name) for name in ("task_complete", "message_complete", "window_complete")}
_COLUMNS = ("partition", "offset", "task_id", "duration")


def emit(event: str, recorder: Any = None, **fields: Any) -> None:
    counter = _counters.get(event) or metrics.flight_events.labels(event)
    counter.inc()
    if knarr_logging.debug_enabled:  # building the record costs more than the event itself
        _log.debug(event, **fields)
    if recorder is not None:
        duration = fields.get("duration")
        recorder.record(event, fields.get("partition"), fields.get("offset"), fields.get("task_id"), None,
                        duration * 1000 if duration is not None else None,
                        {k: v for k, v in fields.items() if k not in _COLUMNS})
