"""Backfills of a Kafka topic slice give what the streaming worker gives on the same messages."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from knarr_spark.cli import main as backfill
from tests.services.kafka import create_topic, end_offsets, unique_name
from tests.spark.workload import DEMO_HANDLER, by_request, config_dict, matches, produce_at, requests, run_streaming_until, write_config

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

PARTITIONS = 3
# Three eras of history, a day apart and in the past (the broker refuses future timestamps);
# the time-range backfill takes the middle one.
DAY_MS = 86_400_000
_BASE = (int(time.time() * 1000) // DAY_MS - 3) * DAY_MS
ERA_MS = {"old": _BASE, "mid": _BASE + DAY_MS, "new": _BASE + 2 * DAY_MS}


def _rfc3339(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


MID_FROM, MID_TO = _rfc3339(ERA_MS["mid"]), _rfc3339(ERA_MS["new"])


@pytest.fixture(scope="module")
def history(kafka_bootstrap, corpus, grep, tmp_path_factory):
    """A 3-partition topic with three eras of requests, and the streaming worker's summaries of all of it."""
    topic = unique_name("backfill-src")
    create_topic(kafka_bootstrap, topic, partitions=PARTITIONS)
    eras = {era: requests(corpus, 12, prefix=era, seed=i) for i, era in enumerate(ERA_MS)}
    eras["mid"].append({"request_id": "mid-bad", "patterns": []})  # fails validation: an empty group
    for era, records in eras.items():
        produce_at(kafka_bootstrap, topic, records, ERA_MS[era])
    out = tmp_path_factory.mktemp("streaming")
    data = config_dict(out, grep, brokers=kafka_bootstrap, topic=topic, group=unique_name("stream"))
    asyncio.run(run_streaming_until(data, out / "summaries.jsonl", sum(map(len, eras.values()))))
    return {"topic": topic, "eras": eras, "out": out, "summaries": by_request(out / "summaries.jsonl")}


def _backfill_config(tmp_path: Path, history, kafka_bootstrap: str, grep: str) -> tuple[Path, Path]:
    out = tmp_path / "backfill"
    data = config_dict(out, grep, brokers=kafka_bootstrap, topic=history["topic"], group=unique_name("bf"))
    return write_config(tmp_path / "config.yaml", data), out


def test_a_backfill_by_offsets_gives_the_streaming_workers_summaries_and_matches(spark, history, kafka_bootstrap, grep, tmp_path):
    config, out = _backfill_config(tmp_path, history, kafka_bootstrap, grep)
    ends = end_offsets(kafka_bootstrap, history["topic"])
    assert len(ends) == PARTITIONS and all(ends.values())

    code = backfill(["--config", str(config), "--handler", DEMO_HANDLER,
                     "--from-offsets", ",".join(f"{p}:0" for p in ends), "--to-offsets", ",".join(f"{p}:{o}" for p, o in ends.items()),
                     "--chunk-size", "5", "--report", str(tmp_path / "report.json")])

    assert code == 0
    assert by_request(out / "summaries.jsonl") == history["summaries"]
    assert matches(out / "matches.jsonl") == matches(history["out"] / "matches.jsonl")
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == "succeeded"
    assert report["totals"]["messages"] == sum(ends.values()) == len(history["summaries"])
    assert report["totals"]["empty_messages"] == 1
    assert report["planned_chunks"] == report["completed_chunks"] == sum(-(-n // 5) for n in ends.values())
    assert {p: v["messages"] for p, v in report["partitions"].items()} == {str(p): n for p, n in ends.items()}
    assert report["totals"]["succeeded"] + report["totals"]["failed"] + report["totals"]["replaced"] == report["totals"]["tasks"]


def test_a_backfill_by_offsets_processes_only_the_slice_it_was_given(spark, history, kafka_bootstrap, grep, tmp_path):
    config, out = _backfill_config(tmp_path, history, kafka_bootstrap, grep)
    ends = end_offsets(kafka_bootstrap, history["topic"])
    start = {p: o // 2 for p, o in ends.items()}

    code = backfill(["--config", str(config), "--handler", DEMO_HANDLER, "--chunk-size", "3",
                     "--from-offsets", ",".join(f"{p}:{o}" for p, o in start.items()),
                     "--to-offsets", ",".join(f"{p}:{o}" for p, o in ends.items())])

    assert code == 0
    got = by_request(out / "summaries.jsonl")
    assert len(got) == sum(ends[p] - start[p] for p in ends)
    assert got == {rid: s for rid, s in history["summaries"].items() if rid in got}


def test_a_backfill_by_timestamps_processes_exactly_the_messages_of_that_time_range(spark, history, kafka_bootstrap, grep, tmp_path):
    config, out = _backfill_config(tmp_path, history, kafka_bootstrap, grep)

    code = backfill(["--config", str(config), "--handler", DEMO_HANDLER, "--chunk-size", "4",
                     "--from-timestamp", MID_FROM, "--to-timestamp", MID_TO, "--report", str(tmp_path / "report.json")])

    assert code == 0
    mid_ids = {r["request_id"] for r in history["eras"]["mid"]} - {"mid-bad"}
    got = by_request(out / "summaries.jsonl")
    unparseable = {rid for rid in got if rid.startswith("unparseable@")}
    assert set(got) - unparseable == mid_ids and len(unparseable) == 1
    assert got == {rid: history["summaries"][rid] for rid in got}
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["totals"]["messages"] == len(history["eras"]["mid"])
    assert sorted(report["source"]["ranges"]) == ["0", "1", "2"]


def test_an_open_ended_time_range_runs_to_the_end_of_the_log(spark, history, kafka_bootstrap, grep, tmp_path):
    config, out = _backfill_config(tmp_path, history, kafka_bootstrap, grep)

    code = backfill(["--config", str(config), "--handler", DEMO_HANDLER, "--from-timestamp", MID_TO, "--to-timestamp", ""])

    assert code == 0
    assert set(by_request(out / "summaries.jsonl")) == {r["request_id"] for r in history["eras"]["new"]}


def test_a_range_past_the_end_of_the_log_is_refused_before_any_work(spark, history, kafka_bootstrap, grep, tmp_path, capsys):
    config, out = _backfill_config(tmp_path, history, kafka_bootstrap, grep)

    code = backfill(["--config", str(config), "--handler", DEMO_HANDLER, "--from-offsets", "0:0", "--to-offsets", "0:999999"])

    assert code == 2
    assert "partition 0: --to-offsets 999999 is past the end of the log" in capsys.readouterr().err
    assert not (out / "summaries.jsonl").exists()


def test_an_unreachable_broker_is_reported_with_exit_code_3(spark, grep, tmp_path, capsys):
    config = write_config(tmp_path / "config.yaml", config_dict(tmp_path / "out", grep, brokers="127.0.0.1:1"))

    code = backfill(["--config", str(config), "--handler", DEMO_HANDLER, "--from-offsets", "0:0", "--to-offsets", "0:1"])

    assert code == 3
    assert "cannot reach Kafka at '127.0.0.1:1'" in capsys.readouterr().err
