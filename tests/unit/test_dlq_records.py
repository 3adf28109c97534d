"""DLQ records read back: every envelope version parses, and the filters inspect and replay share select exactly."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from knarr.api.payloads import DeliveryError, FilePayload, KafkaPayload
from knarr.dlq.records import Filters, UnreadableRecord, normalise_reason, parse_record, parse_time
from knarr.errors import UsageError
from knarr.sinks.dlq import envelope, record_json

NOW = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.UTC).timestamp()


def written(error: DeliveryError, **fields) -> str:
    record = envelope(error, 0, "in")
    record.update(fields)
    return record_json(record)


def sink_error(name="out", sink_type="filesystem", error="PathEscapeError: path '../x' escapes base_path", **kw):
    return DeliveryError(sink_name=name, sink_type=sink_type, error=error,
                         payloads=[FilePayload(path="a.jsonl", data={"n": 1})], offsets=[4], keys=[b"k"], **kw)


def test_a_new_record_has_its_own_id_and_the_sink_stage_with_the_payloads_routing_fields():
    record = parse_record(written(sink_error()), "dlq:1")
    assert len(record.id) == 32 and record.stage == "sink" and record.version == 2
    assert (record.payload_kind, record.payload_fields, record.payloads) == ("files", ({"path": "a.jsonl"},), ('{"n":1}',))


def test_two_records_of_the_same_failure_have_different_ids():
    assert parse_record(written(sink_error()), "a").id != parse_record(written(sink_error()), "b").id


def test_a_kafka_payload_keeps_its_key_and_headers_and_raw_bytes_data_is_marked():
    error = DeliveryError(sink_name="out", sink_type="kafka", error="x",
                          payloads=[KafkaPayload(data=b"not json", key=b"\xff", headers={"h": "v"})])
    raw = json.loads(record_json(envelope(error, 0)))
    assert raw["payload_fields"] == [{"key": "base64:/w==", "headers": {"h": "v"}}]
    assert raw["raw_data"] == [0] and raw["original_payloads"] == ["not json"]


def test_a_record_from_an_older_knarr_gets_its_stage_from_sink_type_and_a_content_id_stable_across_reads():
    old = json.dumps({"original_payloads": ["{}"], "sink_name": "task", "sink_type": "executor", "error": "boom",
                      "timestamp": NOW, "partition": 1, "offsets": [3], "keys": [None]})
    first, again = parse_record(old, "f:1"), parse_record(old, "f:1")
    assert first.stage == "task" and not first.is_sink_stage and first.version == 1
    assert first.id == again.id and first.id.startswith("sha256:")
    assert first.payload_fields is None


def test_source_messages_that_are_not_utf8_come_back_byte_for_byte():
    error = DeliveryError(sink_name="parse", sink_type="handler", error="x", payloads=[b"\xff\x00ok", b'{"a":1}'],
                          keys=[b"\xfe", None])
    record = parse_record(record_json(envelope(error, 2)), "p")
    assert record.source_values() == [b"\xff\x00ok", b'{"a":1}']
    assert record.key_bytes() == [b"\xfe", None]


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '"text"'])
def test_an_entry_that_is_no_json_object_is_unreadable(text):
    with pytest.raises(UnreadableRecord):
        parse_record(text, "f:1")


@pytest.mark.parametrize(("text", "expected"), [
    ("90s", NOW - 90), ("30m", NOW - 1800), ("2h", NOW - 7200), ("7d", NOW - 7 * 86400), ("1w", NOW - 604800),
    ("2026-11-23T10:00:00Z", NOW - 7200), ("2026-11-23T10:00", NOW - 7200), ("2026-11-23T11:00:00+01:00", NOW - 7200),
])
def test_a_time_is_iso_8601_utc_unless_zoned_or_a_span_back_from_now(text, expected):
    assert parse_time(text, NOW) == expected


def test_a_time_that_is_neither_says_what_is_accepted():
    with pytest.raises(UsageError, match=r"--until 'yesterday' is not a time: give ISO 8601 .* or a span back"):
        parse_time("yesterday", NOW, "--until")


@pytest.mark.parametrize(("error", "reason"), [
    ("PermanentSinkError: topic 'out': Message size 1048577 larger than max\nTraceback...",
     "PermanentSinkError: topic 'out': Message size N larger than max"),
    ("task 3f2a9c1e-0b4d-4e5f-8a9b-0c1d2e3f4a5b: exit code 2", "task <id>: exit code N"),
    ("", "(no error text)"),
])
def test_a_reason_is_the_first_line_with_ids_and_numbers_blanked(error, reason):
    assert normalise_reason(error) == reason


def record_at(hours_ago: float, name="out", sink_type="filesystem", error="refused: bad path", stage_type=None):
    error_obj = sink_error(name, stage_type or sink_type, error)
    return parse_record(written(error_obj, timestamp=NOW - hours_ago * 3600), f"r{hours_ago}")


def test_filters_select_by_sink_type_reason_and_time_all_of_which_must_match():
    records = [record_at(0.5), record_at(3), record_at(0.5, name="other"), record_at(0.5, sink_type="kafka"),
               record_at(0.5, error="TransientSinkError: timeout"), record_at(0.5, name="task", stage_type="executor")]
    chosen = Filters.build(sinks=["out"], sink_types=["filesystem"], reason="bad PATH", since="1h", now=NOW)
    assert [r.position for r in records if chosen.matches(r)] == ["r0.5"]
    assert [r.stage for r in records if Filters.build(stages=["source"]).matches(r)] == ["task"]
    window = Filters.build(since="2026-11-23T08:00Z", until="2026-11-23T10:00Z", now=NOW)
    assert [r.position for r in records if window.matches(r)] == ["r3"]


def test_a_reason_filter_is_a_regular_expression_and_text_that_is_none_is_taken_literally():
    records = [record_at(1, error="exit code 2"), record_at(2, error="exit code 3"), record_at(3, error="x (unclosed")]
    assert [r.position for r in records if Filters.build(reason=r"code [23]$").matches(r)] == ["r1", "r2"]
    assert [r.position for r in records if Filters.build(reason="(unclosed").matches(r)] == ["r3"]
