"""Sinks: where hook outputs go (Kafka, files, databases, HTTP), and the dead-letter queue."""

from __future__ import annotations

from knarr.sinks.base import PermanentSinkError, Sink, SinkConnectError, TransientSinkError
from knarr.sinks.registry import build_sinks
from knarr.sinks.resolution import SinkResolutionError, resolve_sink

__all__ = [
    "PermanentSinkError", "Sink", "SinkConnectError", "SinkResolutionError", "TransientSinkError",
    "build_sinks", "resolve_sink",
]
