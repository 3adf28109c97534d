"""Opt-in metric labels from task labels, with a cap on distinct values per key.

A label such as ``tier`` or ``tenant`` is useful on a dashboard; a label such as ``request_id``
would make a time series per task. Only the keys in ``executor.metric_labels`` are counted, and
each keeps at most ``executor.metric_label_values_max`` distinct values: later new values are
counted as ``other``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from knarr.observability import metrics

OTHER = "other"


class LabelValues:
    """Which (key, value) pairs a task's labels become, remembering the values seen per key."""

    def __init__(self, keys: Iterable[str], cap: int) -> None:
        self.keys = tuple(keys)
        self.cap = cap
        self._seen: dict[str, set[str]] = {key: set() for key in self.keys}

    def pairs(self, labels: Mapping[str, str]) -> list[tuple[str, str]]:
        out = []
        for key in self.keys:
            value = labels.get(key)
            if value is None:
                continue
            seen = self._seen[key]
            if value not in seen:
                if len(seen) >= self.cap:
                    value = OTHER
                else:
                    seen.add(value)
            out.append((key, value))
        return out


class TaskLabelCounter:
    """Counts task outcomes on ``knarr_task_labels_total`` for the opted-in label keys."""

    def __init__(self, keys: Iterable[str], cap: int) -> None:
        self.values = LabelValues(keys, cap)
        self.enabled = bool(self.values.keys)

    def count(self, status: str, labels: Mapping[str, str]) -> None:
        if not self.enabled or not labels:
            return
        for key, value in self.values.pairs(labels):
            metrics.labelled(metrics.task_labels, status, key, value).inc()
