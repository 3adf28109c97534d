"""The worker processes' Prometheus texts as one: each sample labelled with the process it came from. Pure."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

PROCESS_LABEL = "process"


def merged(texts: Iterable[tuple[str, str]]) -> bytes:
    """One exposition of ``(process, text)`` pairs: a metric family once, its samples from every text.

    A family's help and type are the first text's that has it. A text that does not parse is a bug in
    the process that served it, not a reason to lose the others: its samples are left out, and
    ``knarr_worker_process_up`` (the supervisor's) already says which process answered.
    """
    families: dict[str, Metric] = {}
    for process, text in texts:
        try:
            parsed = list(text_string_to_metric_families(text))
        except ValueError:
            continue
        for family in parsed:
            into = families.get(family.name)
            if into is None:
                into = families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            for sample in family.samples:
                into.add_sample(sample.name, {PROCESS_LABEL: process, **sample.labels}, sample.value,
                                sample.timestamp, sample.exemplar)
    return generate_latest(_Fixed(list(families.values())))


class _Fixed(CollectorRegistry):
    """A registry that collects the given families, for generate_latest's writer."""

    def __init__(self, families: list[Metric]) -> None:
        super().__init__(auto_describe=False)
        self._families = families

    def collect(self):  # noqa: ANN201 (CollectorRegistry's signature)
        yield from self._families
