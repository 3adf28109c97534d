"""What inspect counts and what replay plans, from records alone."""

from __future__ import annotations

import datetime as dt
import json

from knarr.api.payloads import CollectResult, DeliveryError, FilePayload, KafkaPayload, PluginPayload, RedisPayload
from knarr.dlq.records import parse_record
from knarr.dlq.replay import count, describe_plan, plan, rebuild
from knarr.dlq.summary import render, summarise
from knarr.sinks.dlq import envelope, record_json

T0 = dt.datetime(2026, 11, 23, 9, 15, tzinfo=dt.UTC).timestamp()


def record(payloads, name="out", sink_type="filesystem", error="PathEscapeError: path '../1' escapes", at=T0,
           position="f:1", max_bytes=900_000, keys=None):
    error_obj = DeliveryError(sink_name=name, sink_type=sink_type, error=error, payloads=payloads, partition=0,
                              offsets=list(range(len(payloads))), keys=keys or [None] * len(payloads))
    raw = envelope(error_obj, 0, "in", max_bytes=max_bytes)
    raw["timestamp"] = at
    return parse_record(record_json(raw), position)


def files(n):
    return [FilePayload(path=f"p{i}.jsonl", data={"i": i}) for i in range(n)]


def test_a_summary_counts_by_sink_stage_reason_and_hour_with_the_time_range():
    records = [
        record(files(2), error="PathEscapeError: path '../1' escapes base_path", at=T0),
        record(files(1), error="PathEscapeError: path '../22' escapes base_path", at=T0 + 3600),
        record(files(1), name="audit", sink_type="test-jsonl", error="PermanentSinkError: refuses", at=T0 + 60),
        record([b'{"id":1}'], name="task", sink_type="executor", error="task t1: exit code 3", at=T0 + 7200),
    ]
    summary = summarise(records, location="file 'dlq.jsonl'", read=5, unreadable=1, samples=1,
                        replayed_ids=frozenset({records[0].id}))
    assert (summary.matched, summary.payloads, summary.read, summary.unreadable, summary.replayed) == (4, 5, 5, 1, 1)
    assert summary.by_sink == [("filesystem/out", 2), ("executor/task", 1), ("test-jsonl/audit", 1)]
    assert summary.by_stage == [("sink", 3), ("task", 1)]
    assert summary.by_reason == [("PathEscapeError: path '../N' escapes base_path", 2),
                                 ("PermanentSinkError: refuses", 1), ("task <id>: exit code N", 1)]
    assert summary.by_hour == [("2026-11-23T09:00Z", 2), ("2026-11-23T10:00Z", 1), ("2026-11-23T11:00Z", 1)]
    assert (summary.oldest, summary.newest) == (T0, T0 + 7200)
    assert [s["id"] for s in summary.samples] == [records[0].id]


def test_the_report_for_people_names_each_count():
    text = render(summarise([record(files(2))], location="file 'dlq.jsonl'", read=1, samples=1))
    assert text.splitlines()[:3] == ["1 of 1 records match (2 payloads) in file 'dlq.jsonl'",
                                     "oldest  2026-11-23T09:15:00Z", "newest  2026-11-23T09:15:00Z"]
    assert "by sink (type/name)\n  1  filesystem/out" in text
    assert """    payload:  {"i":0}  {'path': 'p0.jsonl'}""" in text


def test_top_reasons_are_cut_at_n_and_the_rest_counted_together():
    records = [record(files(1), error=f"reason {chr(97 + i)}") for i in range(5)] + [record(files(1), error="reason a")]
    summary = summarise(records, location="x", read=6, top_reasons=2)
    assert (summary.by_reason, summary.other_reasons) == ([("reason a", 2), ("reason b", 1)], 3)


def test_a_sink_record_is_planned_to_its_sink_a_source_record_to_the_source_and_a_replayed_one_skipped():
    to_sink, to_source, done = record(files(2)), record([b"m"], name="arrange", sink_type="handler"), record(files(1))
    steps = plan([to_sink, to_source, done], frozenset({done.id}), source_target="topic 'in'")
    assert [(s.action, s.target, s.count) for s in steps] == [
        ("sink", "filesystem sink 'out'", 2), ("source", "topic 'in'", 1), ("already_replayed", "", 0)]
    assert plan([done], frozenset({done.id}), again=True)[0].action == "sink"
    assert describe_plan(steps).splitlines() == [
        "  would re-deliver 1 records (2 payloads) to filesystem sink 'out'",
        "  would re-queue 1 records (1 messages) to topic 'in'",
        "  would skip 1 records already replayed (use --again to replay them anyway)"]


def test_to_source_refuses_a_sink_record_and_a_truncated_record_is_not_replayable():
    sink_record = record(files(1))
    truncated = record([FilePayload(path="p", data="x" * 5000)], max_bytes=2_000)
    steps = plan([sink_record, truncated], frozenset(), to_source=True)
    assert [s.action for s in steps] == ["unreplayable", "unreplayable"]
    assert steps[0].why.startswith("it holds a sink's outputs, not the source messages")
    assert plan([truncated], frozenset())[0].why.startswith("its payloads were cut to fit the DLQ")
    assert count(steps).records("unreplayable") == 2


def test_an_old_record_without_routing_fields_is_read_but_not_replayed():
    old = parse_record(json.dumps({"original_payloads": ['{"a":1}'], "sink_name": "out", "sink_type": "filesystem",
                                   "error": "x"}), "old:1")
    [step] = plan([old], frozenset())
    assert step.action == "unreplayable" and "written by an older knarr" in step.why


def test_a_record_rebuilds_the_payloads_the_handler_returned():
    kafka = record([KafkaPayload(data={"a": 1}, key=b"\xff", headers={"h": "v"}), KafkaPayload(data=b"raw text")],
                   sink_type="kafka")
    assert rebuild(kafka) == CollectResult(kafka=[
        KafkaPayload(sink="out", data={"a": 1}, key=b"\xff", headers={"h": "v"}),
        KafkaPayload(sink="out", data=b"raw text")])
    redis = record([RedisPayload(key="k1", ttl=60, data=[1, 2])], sink_type="redis")
    assert rebuild(redis) == CollectResult(redis=[RedisPayload(sink="out", key="k1", ttl=60, data=[1, 2])])
    plugin = record([PluginPayload(data={"x": 1}, meta={"table": "t"})], name="audit", sink_type="test-jsonl")
    assert rebuild(plugin) == CollectResult(plugin=[PluginPayload(sink="audit", data={"x": 1}, meta={"table": "t"})])
