"""Task labels: small named tags shown with a task in logs and, opted in, on metrics; and the
messages for task fields knarr does not have."""

from __future__ import annotations

import re

MAX_LABELS = 16
MAX_LABEL_KEY = 64
MAX_LABEL_VALUE = 256
_LABEL_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Fields a Drakkar handler may set on a task that knarr has no use for, and what to do instead.
FOREIGN_TASK_FIELDS = {
    "origin": "knarr tasks always come from the source topic; drop the field",
    "client_name": "knarr has no HTTP source; put the value in labels or metadata",
    "request_id": "knarr has no HTTP source; put the value in labels or metadata",
}


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    """``labels`` if they are within bounds; a ValueError naming the first offending label otherwise."""
    if len(labels) > MAX_LABELS:
        raise ValueError(f"a task has at most {MAX_LABELS} labels, got {len(labels)}; keep the rest in metadata")
    for key, value in labels.items():
        if len(key) > MAX_LABEL_KEY or not _LABEL_KEY.match(key):
            raise ValueError(f"label key {key!r} must be an identifier (letters, digits, _) "
                             f"of at most {MAX_LABEL_KEY} characters")
        if len(value) > MAX_LABEL_VALUE:
            raise ValueError(f"label {key!r} is {len(value)} characters long; at most {MAX_LABEL_VALUE} "
                             "are allowed, keep long values in metadata")
    return labels


def unknown_task_field(key: str, fields: list[str]) -> str:
    """Why ``key`` is refused on an ExecutorTask, and what to use instead."""
    hint = FOREIGN_TASK_FIELDS.get(key)
    if hint:
        return f"ExecutorTask has no field {key!r} (a Drakkar field): {hint}"
    return f"ExecutorTask has no field {key!r}; its fields are {', '.join(fields)}"
