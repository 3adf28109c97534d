"""Times in the status: RFC 3339 in UTC, to the second, as Kubernetes writes them."""

from __future__ import annotations

import datetime

FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def format_time(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime(FORMAT)


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.datetime.strptime(value, FORMAT).replace(tzinfo=datetime.UTC).timestamp()
