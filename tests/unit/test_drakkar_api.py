"""The handler API Drakkar users write: labels, stable task ids, error kinds, on_ready signatures,
and loud, helpful refusals of task fields knarr does not have."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY
from pydantic import ValidationError

import knarr
from knarr import drakkar as dk
from knarr.api.handler import ready_arguments
from knarr.api.tasks import ERROR_KINDS
from knarr.config.models import ExecutorConfig
from knarr.engine.scheduling import SlotScheduler, priority_key
from knarr.observability.task_labels import LabelValues, TaskLabelCounter


def test_a_stable_task_id_is_the_same_for_the_same_parts_and_differs_for_others():
    assert knarr.make_stable_task_id("t", "alpha", "beta") == knarr.make_stable_task_id("t", "alpha", "beta")
    assert knarr.make_stable_task_id("t", "alpha", "beta") != knarr.make_stable_task_id("t", "alpha", "gamma")
    assert knarr.make_stable_task_id("t", "alpha") != knarr.make_stable_task_id("u", "alpha")


def test_part_boundaries_matter_in_a_stable_task_id():
    assert knarr.make_stable_task_id("t", "a", "bc") != knarr.make_stable_task_id("t", "ab", "c")


def test_a_stable_task_id_is_the_one_drakkar_documents_for_the_same_parts():
    # Drakkar's docstring example: make_stable_task_id('t', 'alpha', 'beta') -> 't-5d11bfa62398519b'.
    # Equal ids mean a stream moved mid-way from Drakkar keeps deduplicating against stored ids.
    assert knarr.make_stable_task_id("t", "alpha", "beta") == "t-5d11bfa62398519b"


@pytest.mark.parametrize("parts, error", [((), ValueError), ((3,), TypeError)])
def test_a_stable_task_id_refuses_no_parts_and_non_string_parts(parts, error):
    with pytest.raises(error, match="make_stable_task_id"):
        knarr.make_stable_task_id("t", *parts)


def test_task_labels_within_bounds_are_kept():
    task = knarr.ExecutorTask(labels={"request_id": "r-1", "tier": "gold"}, source_offsets=[0])
    assert task.labels == {"request_id": "r-1", "tier": "gold"}


@pytest.mark.parametrize("labels, words", [
    ({f"k{i}": "v" for i in range(17)}, "at most 16 labels"),
    ({"has space": "v"}, "'has space' must be an identifier"),
    ({"k" * 65: "v"}, "at most 64 characters"),
    ({"big": "v" * 257}, "label 'big' is 257 characters long"),
])
def test_task_labels_out_of_bounds_are_refused_naming_the_label(labels, words):
    with pytest.raises(ValidationError, match=words):
        knarr.ExecutorTask(labels=labels)


@pytest.mark.parametrize("field, words", [
    ("origin", "'origin' (a Drakkar field): knarr tasks always come from the source topic"),
    ("client_name", "'client_name' (a Drakkar field): knarr has no HTTP source; put the value in labels"),
    ("request_id", "'request_id' (a Drakkar field)"),
    ("priority", "no field 'priority'; its fields are args, binary_path"),
])
def test_an_unknown_task_field_fails_naming_it_and_what_to_use_instead(field, words):
    with pytest.raises(ValidationError, match=words.replace("(", r"\(").replace(")", r"\)")):
        knarr.ExecutorTask(**{field: "x"}, source_offsets=[0])


@pytest.mark.parametrize("reason, kind", [("failed", "nonzero_exit"), ("timeout", "timeout"),
                                          ("launch", "launch_failure"), ("hook", "internal"),
                                          ("expired", "internal")])
def test_an_errors_drakkar_kind_follows_its_knarr_reason(reason, kind):
    error = knarr.ExecutorError(task=knarr.ExecutorTask(), reason=reason)
    assert error.kind == kind
    assert error.model_dump()["kind"] == kind


def test_every_knarr_reason_has_a_drakkar_kind():
    assert set(ERROR_KINDS.values()) <= {"nonzero_exit", "timeout", "launch_failure", "internal"}
    assert set(ERROR_KINDS) == {"failed", "timeout", "launch", "hook", "expired", "crash", "protocol"}


class OneArg(knarr.BaseHandler):
    async def on_ready(self, config):
        pass


class TwoArgs(knarr.BaseHandler):
    async def on_ready(self, config, db_pool):
        pass


class Star(knarr.BaseHandler):
    async def on_ready(self, *args):
        pass


@pytest.mark.parametrize("handler, expected", [(OneArg(), ("cfg",)), (TwoArgs(), ("cfg", None)),
                                               (Star(), ("cfg", None)), (knarr.BaseHandler(), ("cfg", None))])
def test_on_ready_gets_the_arguments_its_signature_takes(handler, expected):
    assert ready_arguments(handler.on_ready, "cfg", None) == expected


def test_an_on_ready_that_takes_no_config_is_refused_with_its_signature():
    class NoArgs(knarr.BaseHandler):
        async def on_ready(self):
            pass

    with pytest.raises(TypeError, match=r"on_ready\(\) must take \(config\) or \(config, pool\)"):
        ready_arguments(NoArgs().on_ready, "cfg", None)


def test_label_values_beyond_the_cap_count_as_other():
    values = LabelValues(["tier"], cap=2)
    got = [values.pairs({"tier": t}) for t in ("gold", "silver", "bronze", "gold", "iron")]
    assert got == [[("tier", "gold")], [("tier", "silver")], [("tier", "other")], [("tier", "gold")],
                   [("tier", "other")]]


def test_only_opted_in_label_keys_that_a_task_sets_are_counted():
    values = LabelValues(["tier", "region"], cap=10)
    assert values.pairs({"tier": "gold", "request_id": "r-1"}) == [("tier", "gold")]


def test_task_outcomes_are_counted_by_opted_in_label():
    counter = TaskLabelCounter(["tenant_x"], cap=1)
    sample = lambda value: REGISTRY.get_sample_value(  # noqa: E731
        "knarr_task_labels_total", {"status": "completed", "label": "tenant_x", "value": value}) or 0.0
    before_a, before_other = sample("a"), sample("other")
    for tenant in ("a", "b", "a", "c"):
        counter.count("completed", {"tenant_x": tenant})
    assert (sample("a") - before_a, sample("other") - before_other) == (2, 2)


@pytest.mark.parametrize("keys, words", [(["bad key"], "must be a task label key"),
                                         (["a", "a"], "lists a key twice")])
def test_metric_labels_must_be_distinct_label_keys(keys, words):
    with pytest.raises(ValidationError, match=words):
        ExecutorConfig(metric_labels=keys)


def test_drakkar_names_map_to_knarrs_api():
    assert dk.BaseDrakkarHandler is knarr.BaseHandler
    assert dk.make_stable_task_id is knarr.make_stable_task_id
    assert dk.ExecutorTask is knarr.ExecutorTask


def test_a_drakkar_name_knarr_lacks_fails_saying_what_to_use_instead():
    with pytest.raises(AttributeError, match="knarr has no drakkar.DrakkarApp: knarr runs a handler with `knarr run"):
        dk.DrakkarApp  # noqa: B018


def test_priority_keys_of_any_shape_compare_lower_first():
    keys = [priority_key(v) for v in [(1, 5), 0, (0, 9), 2.5, "b", ("a", 1), [0, 3]]]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    # numbers before strings element by element; a shorter tuple first on a tie
    assert order == [1, 6, 2, 0, 3, 5, 4]


@pytest.mark.parametrize("value", [None, {"tier": 1}, (1, None), object()])
def test_a_priority_that_is_not_a_number_string_or_tuple_of_them_is_refused(value):
    with pytest.raises(TypeError, match="task_priority returned"):
        priority_key(value)


async def test_waiting_tasks_with_drakkar_style_tuple_priorities_and_the_default_get_slots_in_key_order():
    import asyncio

    scheduler = SlotScheduler(1)
    await scheduler.acquire(0, priority_key(0))  # the only slot is taken
    granted = []

    async def wait(name, value):
        await scheduler.acquire(0, priority_key(value))
        granted.append(name)
        scheduler.release(0)

    waiters = [asyncio.create_task(wait(n, v)) for n, v in [("late", (1, 7)), ("default", 0), ("early", (0, 3))]]
    while scheduler.waiting_count < 3:  # every waiter queued up
        await asyncio.sleep(0)
    scheduler.release(0)
    await asyncio.gather(*waiters)
    assert granted == ["default", "early", "late"]
