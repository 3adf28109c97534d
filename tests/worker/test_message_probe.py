"""The message probe on real subprocesses: the report tells what the handler saw, and nothing leaves.

Each test probes one message with ``run_probe`` (the tasks are real runs of tests/programs/behave)
and holds the report against what the handler was given: its MessageGroup, the results of
on_task_complete, the failures of on_error.
"""

from __future__ import annotations

import time

import pytest

import knarr
from knarr.config.loading import config_from_dict
from knarr.debug.probe import run_probe
from knarr.debug.probe_report import walk
from tests.programs.probe_handlers import FanOut


def config(**executor):
    return config_from_dict({
        "executor": {"max_executors": 2, "task_timeout_seconds": 30, "retry_backoff_base_seconds": 0.01,
                     "retry_backoff_max_seconds": 0.05, **executor},
        "sinks": {"kafka": {"out": {"topic": "never-written"}},
                  "postgres": {"db": {"dsn": "postgresql://probe@127.0.0.1:1/never"}}},
        "logging": {"level": "WARNING", "format": "console"},
    })


def nodes(report):
    return {node["task_id"]: node for node in walk(report["tasks"])}


async def test_a_fan_out_with_a_failing_task_shows_the_replacement_as_its_child_and_the_group_the_handler_saw():
    handler = FanOut()
    report = await run_probe(config(), handler, {"key": "j1", "value": {"id": "j1", "fanout": 3, "fail": [1]},
                                                 "partition": 2, "offset": 41})

    assert report["errors"] == [] and report["dead_letters"] == []
    [group] = handler.groups
    assert report["group"] == {"total": group.total, "succeeded": group.succeeded, "failed": group.failed,
                               "replaced": group.replaced, "closed": True}
    assert (group.total, group.succeeded, group.failed, group.replaced) == (4, 3, 0, 1)
    # The tree: three tasks arrange() made, the failed one replaced by its child.
    assert [n["args"][0] for n in report["tasks"]] == ["out=j1:0", "out=j1:1", "out=j1:2"]
    failed = report["tasks"][1]
    assert failed["status"] == "replaced" and failed["exit_code"] == 3 and failed["reason"] == "failed"
    assert failed["stderr"] == "task 1 failed\n"
    assert failed["attempts"] == [{"attempt": 1, "reason": "failed", "exit_code": 3, "stderr": "task 1 failed\n",
                                   "decision": f"replaced by {failed['children'][0]['task_id']}"}]
    [child] = failed["children"]
    assert child["parent_task_id"] == failed["task_id"] and child["status"] == "succeeded"
    # Every task the handler got in on_task_complete is in the tree with that exit code and output.
    by_id = nodes(report)
    assert sorted(by_id) == sorted(t.task_id for t in group.tasks)
    for result in handler.completed:
        node = by_id[result.task.task_id]
        assert (node["status"], node["exit_code"], node["stdout"]) == ("succeeded", 0, result.stdout)
        assert node["duration_ms"] == pytest.approx(result.duration_seconds * 1000)
        assert node["slot_wait_ms"] >= 0
    assert [r.stdout for r in group.results] and all(by_id[r.task.task_id]["stdout"] == r.stdout for r in group.results)
    # What would have been delivered, per sink, and which hook returned it.
    outs = report["would_deliver"]["kafka.out"]
    assert sorted(p["data"]["out"] for p in outs) == ["j1:0", "j1:1:again", "j1:2"]
    assert {p["stage"] for p in outs} == {"on_task_complete"} and {p["key"] for p in outs} == {"j1"}
    assert report["would_deliver"]["postgres.db"] == [
        {"stage": "on_message_complete", "sink": "", "table": "results", "on_conflict": [],
         "data": {"id": "j1", "total": 4, "succeeded": 3}}]
    assert [s["outputs"] for s in report["stages"]["on_task_complete"]] == [{"kafka": 1}] * 3
    assert report["stages"]["on_message_complete"] == [{"offset": 41, "outputs": {"postgres": 1}, "error": None}]
    assert len(report["stages"]["on_window_complete"]) == 1
    assert report["message"]["partition"] == 2 and report["message"]["offset"] == 41
    assert report["message"]["payload"]["id"] == "j1" and [t["task_id"] for t in report["arranged"]] == \
        [n["task_id"] for n in report["tasks"]]


async def test_a_task_past_its_timeout_is_killed_and_reported_as_failed_with_reason_timeout():
    handler = FanOut()
    started = time.monotonic()
    report = await run_probe(config(), handler, {
        "value": {"id": "slow", "fanout": 2, "sleep": {"1": 30}, "task_timeout": 0.5}})

    assert time.monotonic() - started < 15
    [error] = handler.failures
    slow = nodes(report)[error.task.task_id]
    assert (slow["status"], slow["reason"]) == ("failed", "timeout") and error.reason == "timeout"
    assert slow["attempts"][0]["decision"] == "skip"
    [group] = handler.groups
    assert report["group"]["failed"] == group.failed == 1 and report["group"]["succeeded"] == group.succeeded == 1
    assert report["dead_letters"] == []


async def test_retries_show_every_attempt_and_a_task_out_of_attempts_would_be_dead_lettered():
    handler = FanOut()
    report = await run_probe(config(), handler, {"value": {"id": "r", "fanout": 1, "fail": [0], "retry": True}})

    [node] = report["tasks"]
    assert node["status"] == "failed" and node["attempt"] == 2
    assert [(a["attempt"], a["decision"]) for a in node["attempts"]] == [(1, "retry"), (2, "retry")]
    [letter] = report["dead_letters"]
    assert letter["stage"] == "task" and letter["task_id"] == node["task_id"] and letter["offsets"] == [0]
    assert report["group"]["failed"] == handler.groups[0].failed == 1


@pytest.mark.parametrize(("message", "says"), [
    ("not an object", "must be a JSON object"),
    ({"key": "k"}, "'value' is missing"),
    ({"value": 1, "partiton": 3}, "'partiton' is not a message key"),
    ({"value": 1, "offset": -1}, "offset"),
])
async def test_a_message_that_is_no_message_is_reported_and_nothing_runs(message, says):
    handler = FanOut()
    report = await run_probe(config(), handler, message)

    [error] = report["errors"]
    assert error["stage"] == "message" and says in error["error"]
    assert report["tasks"] == [] and report["message"] is None and handler.groups == []


async def test_a_value_that_does_not_parse_goes_to_arrange_without_payload_and_is_reported():
    class Tolerant(FanOut):
        async def arrange(self, messages, pending):
            return [] if messages[0].payload is None else await super().arrange(messages, pending)

        async def on_message_complete(self, group):
            return None

    report = await run_probe(config(), Tolerant(), {"value": "{not json"})

    assert report["message"]["parse_error"] and report["message"]["payload"] is None
    assert [e["stage"] for e in report["errors"]] == ["deserialize_message"]
    assert report["group"] == {"total": 0, "succeeded": 0, "failed": 0, "replaced": 0, "closed": True}


async def test_hooks_that_raise_are_reported_with_where_and_what_the_engine_does_instead():
    class Raises(FanOut):
        async def on_task_complete(self, result):
            if result.task.metadata["index"] == 0:
                raise RuntimeError("cannot collect")
            return await super().on_task_complete(result)

    handler = Raises()
    report = await run_probe(config(), handler, {"value": {"id": "x", "fanout": 2}})

    [error] = report["errors"]
    assert error["stage"] == "on_task_complete" and error["error"] == "RuntimeError: cannot collect"
    assert error["where"].startswith(__file__) and "cannot collect" in error["where"]
    first = report["tasks"][0]
    # The task ran fine, but its hook failed: the group counts it failed (reason hook), as the report does.
    assert (first["status"], first["reason"], first["exit_code"]) == ("failed", "hook", 0)
    assert handler.groups[0].failed == report["group"]["failed"] == 1
    assert [p["data"]["out"] for p in report["would_deliver"]["kafka.out"]] == ["x:1"]


async def test_an_arrange_that_raises_is_reported_and_the_message_would_be_dead_lettered():
    class Broken(FanOut):
        async def arrange(self, messages, pending):
            raise KeyError("missing field")

    report = await run_probe(config(), Broken(), {"value": {"id": "b"}})

    assert report["errors"][0]["stage"] == "arrange" and "KeyError" in report["errors"][0]["error"]
    [letter] = report["dead_letters"]
    assert letter["stage"] == "arrange" and "missing field" in letter["reason"]
    assert report["tasks"] == [] and report["group"]["closed"] is False


async def test_a_payload_naming_an_unknown_sink_is_reported_instead_of_stopping_anything():
    class Misnamed(FanOut):
        async def on_task_complete(self, result):
            return knarr.CollectResult(kafka=[knarr.KafkaPayload(sink="nope", data={})])

    report = await run_probe(config(), Misnamed(), {"value": {"id": "m", "fanout": 1}})

    assert [e["stage"] for e in report["errors"]] == ["delivery"]
    assert "names sink 'nope'" in report["errors"][0]["error"] and report["would_deliver"] == {}


async def test_a_message_that_takes_longer_than_the_probe_allows_is_stopped_and_its_tasks_shown_unfinished():
    started = time.monotonic()
    report = await run_probe(config(), FanOut(), {"value": {"id": "s", "fanout": 1, "sleep": {"0": 60}}}, timeout=1)

    assert time.monotonic() - started < 15
    assert [e["stage"] for e in report["errors"]] == ["probe"] and "within 1s" in report["errors"][0]["error"]
    assert report["tasks"][0]["status"] == "unfinished" and report["group"]["closed"] is False


async def test_tasks_waiting_for_one_of_the_probes_slots_show_how_long_they_waited():
    handler = FanOut()
    report = await run_probe(config(), handler, {"value": {"id": "w", "fanout": 3, "sleep": {"0": 0.5, "1": 0.5, "2": 0.5}}},
                             slots=1)

    waits = sorted(node["slot_wait_ms"] for node in report["tasks"])
    # One slot: the second task waits for the first (>= 0.5 s), the third for both (>= 1 s).
    assert waits[1] >= 450 and waits[2] >= 950, waits
    assert report["group"]["succeeded"] == handler.groups[0].succeeded == 3
