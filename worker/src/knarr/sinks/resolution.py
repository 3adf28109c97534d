"""Which configured sink instance a payload's ``sink`` name means."""

from __future__ import annotations

from collections.abc import Iterable

from knarr.api.payloads import FIELD_OF_SINK_TYPE
from knarr.errors import FatalError


class SinkResolutionError(FatalError, ValueError):
    """A payload names a sink that is not configured, or leaves the choice ambiguous."""


def resolve_sink(sink_type: str, requested: str, configured: Iterable[str]) -> str:
    """Resolve a payload's sink name among the configured instances of its type.

    An empty name means "the only one": it resolves when exactly one instance of the type
    is configured. Anything else must name a configured instance.
    """
    names = sorted(configured)
    field = FIELD_OF_SINK_TYPE.get(sink_type, sink_type)
    if requested:
        if requested in names:
            return requested
        known = ", ".join(names) if names else "none"
        raise SinkResolutionError(
            f"a {field} payload names sink {requested!r}, but the configured {sink_type} sinks are: {known}; "
            f"fix the payload's sink= or add sinks.{sink_type}.{requested} to the config"
        )
    if len(names) == 1:
        return names[0]
    if not names:
        raise SinkResolutionError(
            f"a {field} payload was returned but no {sink_type} sink is configured; add one under sinks.{sink_type}"
        )
    raise SinkResolutionError(
        f"a {field} payload has no sink= but {len(names)} {sink_type} sinks are configured "
        f"({', '.join(names)}); set sink= to one of them"
    )
