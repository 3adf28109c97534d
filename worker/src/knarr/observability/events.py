"""Flight events: one structured record per pipeline stage, logged, counted and recorded.

Two doors, one meaning:

- :func:`emit` for the hook stages (``task_complete``, ``message_complete``, ``window_complete``):
  ``knarr_flight_events_total``, a DEBUG log line when DEBUG is on, and the flight recorder when
  one is given (the record is built only for those two).
- The engine's other events (consumed, window_arranged, task_queued/started/finished/failed/
  replaced, delivered, dead_lettered, committed, assigned/revoked, backpressure_on/off) go
  straight to ``recorder.record(...)``, behind an ``if recorder is not None`` at the call site:
  they happen several times per task, and with the recorder off (the default) that test is all
  they cost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from knarr.observability import logging as knarr_logging
from knarr.observability import metrics
from knarr.observability.logging import get_logger

_log = get_logger(component="flight")
_counters = {name: metrics.flight_events.labels(name) for name in ("task_complete", "message_complete", "window_complete")}

# What a flight event's fields builder returns: partition, offset, task id, duration (seconds), data.
Fields = tuple[int | None, int | None, str | None, float | None, dict[str, Any]]


def emit(event: str, recorder: Any, fields: Callable[..., Fields], *args: Any) -> None:
    """Count ``event``; log it at DEBUG and record it when a recorder is given. ``fields(*args)`` builds
    its record, and is called only then: with neither (the default) the count is all an event costs
    (no closure made per event for a record nobody reads).

    ``fields`` gives the recorder's columns as they are (partition, offset, task id, duration in
    seconds) and the rest as the event's data, so the record goes to the recorder without being
    taken apart; the log line has them all in one mapping."""
    counter = _counters.get(event) or metrics.flight_events.labels(event)
    counter.inc()
    if recorder is None and not knarr_logging.debug_enabled:
        return
    partition, offset, task_id, duration, data = fields(*args)
    if knarr_logging.debug_enabled:
        _log.debug(event, **_log_fields(partition, offset, task_id, duration, data))
    if recorder is not None:
        recorder.record(event, partition, offset, task_id, None, duration * 1000 if duration is not None else None,
                        data)


def _log_fields(partition: int | None, offset: int | None, task_id: str | None, duration: float | None,
                data: dict[str, Any]) -> dict[str, Any]:
    """An event's fields as its log line has them: the columns it has (none of them None), then its data."""
    columns = {"partition": partition, "offset": offset, "task_id": task_id}
    return {**{key: value for key, value in columns.items() if value is not None}, **data, "duration": duration}
