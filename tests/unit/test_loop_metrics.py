"""The event loop's cheap counters and histograms scrape exactly as prometheus_client's own would."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from knarr.observability.loop_metrics import LoopCounter, LoopHistogram

BUCKETS = (0.001, 0.01, 0.1, 1, 10)


def _without_created(text: bytes) -> list[str]:
    return [line for line in text.decode().splitlines() if "_created" not in line]


def _created(text: bytes) -> list[str]:
    return sorted(line.split(" ")[0] for line in text.decode().splitlines() if "_created" in line and not line.startswith("#"))


def test_a_labelled_counter_scrapes_like_prometheus_clients():
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    a = LoopCounter("x_tasks_total", "Task outcomes", ["status"], registry=ours)
    b = Counter("x_tasks_total", "Task outcomes", ["status"], registry=theirs)
    for counter in (a, b):
        counter.labels("completed").inc()
        counter.labels("completed").inc(2.5)
        counter.labels(status="failed").inc()
    assert _without_created(generate_latest(ours)) == _without_created(generate_latest(theirs))
    assert _created(generate_latest(ours)) == _created(generate_latest(theirs))
    assert ours.get_sample_value("x_tasks_total", {"status": "completed"}) == 3.5


def test_a_histogram_puts_each_value_in_the_buckets_prometheus_client_does():
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    a = LoopHistogram("x_duration_seconds", "Time", ["hook"], buckets=BUCKETS, registry=ours)
    b = Histogram("x_duration_seconds", "Time", ["hook"], buckets=BUCKETS, registry=theirs)
    values = [0.0, 0.001, 0.0011, 0.01, 0.05, 1, 9.99, 10, 11, 1e6]  # on the bounds, between, beyond the last
    for histogram in (a, b):
        for value in values:
            histogram.labels("arrange").observe(value)
        histogram.labels("on_task_complete").observe(0.2)
    assert _without_created(generate_latest(ours)) == _without_created(generate_latest(theirs))
    assert _created(generate_latest(ours)) == _created(generate_latest(theirs))
    assert ours.get_sample_value("x_duration_seconds_bucket", {"hook": "arrange", "le": "0.001"}) == 2
    assert ours.get_sample_value("x_duration_seconds_count", {"hook": "arrange"}) == len(values)


def test_metrics_without_labels_are_updated_directly():
    registry = CollectorRegistry()
    counter = LoopCounter("x_once_total", "Once", registry=registry)
    histogram = LoopHistogram("x_wait_seconds", "Wait", buckets=BUCKETS, registry=registry)
    counter.inc()
    histogram.observe(0.5)
    assert registry.get_sample_value("x_once_total") == 1
    assert registry.get_sample_value("x_wait_seconds_bucket", {"le": "1.0"}) == 1
    assert registry.get_sample_value("x_wait_seconds_sum") == 0.5


def test_misuse_is_refused_as_prometheus_client_refuses_it():
    registry = CollectorRegistry()
    counter = LoopCounter("x_errors_total", "Errors", ["sink", "type"], registry=registry)
    with pytest.raises(ValueError, match="2 label value"):
        counter.labels("only-one")
    with pytest.raises(ValueError, match="only go up"):
        counter.labels("a", "b").inc(-1)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        LoopCounter("x_errors_total", "Again", registry=registry)
    with pytest.raises(ValueError, match="rise strictly"):
        LoopHistogram("x_bad_seconds", "Bad", buckets=(1, 0.5), registry=registry)
