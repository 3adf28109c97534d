"""Counters and histograms the event loop updates for every task, at a fraction of the cost.

prometheus_client's metrics take a lock and make three method calls per update (0.2 µs an
increment, 0.5 µs an observation here). A task updates nine of them, from the event loop's thread
only. These keep plain numbers instead (40 and 120 ns) and hand them to the registry when it is
scraped, under the same names, labels and samples (``_total``, ``_created``, ``_bucket``,
``_count``, ``_sum``).

Update them from the event loop's thread only: an update is a few bytecodes with no lock, which
CPython never interleaves with another thread's (no call, loop or function start inside it), but
nothing here promises that beyond the loop's thread. The scrape reads them from its own thread;
it may see a histogram's sum one observation ahead of its count, as prometheus_client's may.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client import metrics as _prometheus_metrics
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString


def _created_samples() -> bool:
    """prometheus_client's own switch for ``_created`` samples (PROMETHEUS_DISABLE_CREATED_SERIES)."""
    return getattr(_prometheus_metrics, "_use_created", True)


class _CounterChild:
    __slots__ = ("value", "created")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError(f"counters only go up: inc({amount}) is negative")
        self.value += amount


class _HistogramChild:
    __slots__ = ("counts", "sum", "bounds", "created")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; the last is +Inf
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        self.counts[bisect_left(self.bounds, amount)] += 1  # the first bucket whose bound is >= amount
        self.sum += amount


class _Family:
    """One metric and its children by label values; registered as a collector."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                 registry: CollectorRegistry | None = REGISTRY) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], object] = {}
        if not self.labelnames:
            self._only = self._children[()] = self._child()
        if registry is not None:
            registry.register(self)

    def _child(self) -> object:
        raise NotImplementedError

    def labels(self, *values: object, **named: object) -> object:
        """The child for these label values (made once), as prometheus_client's ``labels``."""
        if named:
            if values:
                raise ValueError("give label values by position or by name, not both")
            try:
                values = tuple(named[label] for label in self.labelnames)
            except KeyError as missing:
                raise ValueError(f"{self.name}: label {missing} has no value") from None
            if len(named) != len(self.labelnames):
                raise ValueError(f"{self.name}: labels are {self.labelnames}, got {sorted(named)}")
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: {len(self.labelnames)} label value(s) expected "
                             f"({', '.join(self.labelnames)}), got {len(values)}")
        key = tuple(str(value) for value in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._child()
        return child

    def describe(self) -> list[Metric]:
        return [self._family()]

    def _family(self) -> Metric:
        raise NotImplementedError

    def _add(self, family: Metric, values: tuple[str, ...], child: object, created: bool) -> None:
        """One child's samples into the scrape's family (``created``: with its ``_created`` sample)."""
        raise NotImplementedError

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        created = _created_samples()
        for values, child in list(self._children.items()):
            self._add(family, values, child, created)
        yield family


class LoopCounter(_Family):
    """A counter (``name`` ends in ``_total``) updated on the event loop's thread only."""

    def _child(self) -> _CounterChild:
        return _CounterChild()

    def inc(self, amount: float = 1) -> None:
        """For a counter without labels."""
        self._only.inc(amount)

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def _add(self, family: CounterMetricFamily, values: tuple[str, ...], child: _CounterChild, created: bool) -> None:
        family.add_metric(list(values), child.value, created=child.created if created else None)


class LoopHistogram(_Family):
    """A histogram with the given bucket bounds (``+Inf`` is added), updated on the event loop's thread only."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 buckets: Sequence[float], registry: CollectorRegistry | None = REGISTRY) -> None:
        bounds = tuple(float(b) for b in buckets if b != float("inf"))
        if list(bounds) != sorted(set(bounds)):
            raise ValueError(f"{name}: bucket bounds must rise strictly, got {list(buckets)}")
        self.bounds = bounds
        super().__init__(name, documentation, labelnames, registry)

    def _child(self) -> _HistogramChild:
        return _HistogramChild(self.bounds)

    def observe(self, amount: float) -> None:
        """For a histogram without labels."""
        self._only.observe(amount)

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def _add(self, family: HistogramMetricFamily, values: tuple[str, ...], child: _HistogramChild,
             created: bool) -> None:
        counts, total = list(child.counts), child.sum
        buckets, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), counts):
            running += count
            buckets.append((floatToGoString(bound), running))
        family.add_metric(list(values), buckets, total)
        if created:  # (HistogramMetricFamily.add_metric takes no created time)
            family.samples.append(Sample(f"{self.name}_created", dict(zip(self.labelnames, values)), child.created))
