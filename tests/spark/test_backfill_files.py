"""Backfills of files (JSON Lines, Parquet) give what the streaming engine gives on the same lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from knarr.api.messages import SourceMessage
from knarr.config.loading import config_from_dict
from knarr_spark.cli import main as backfill
from tests.spark.workload import DEMO_HANDLER, by_request, config_dict, matches, requests, run_in_memory, write_config

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def lines(corpus) -> list[str]:
    return [json.dumps(r) for r in requests(corpus, 23)] + ["not JSON: reported as an empty group, not lost"]


@pytest.fixture(scope="module")
def expected(lines, grep, tmp_path_factory) -> Path:
    """The streaming engine's outputs for the lines as one partition, in file order."""
    out = tmp_path_factory.mktemp("expected")
    messages = [SourceMessage(topic="search-requests", partition=0, offset=i, value=line.encode()) for i, line in enumerate(lines)]
    assert run_in_memory(config_from_dict(config_dict(out, grep)), messages) == 0
    return out


def _run(tmp_path: Path, grep: str, *input_args: str) -> tuple[int, Path, dict]:
    out = tmp_path / "backfill"
    config = write_config(tmp_path / "config.yaml", config_dict(out, grep))
    code = backfill(["--config", str(config), "--handler", DEMO_HANDLER, "--chunk-size", "7",
                     "--report", str(tmp_path / "report.json"), *input_args])
    return code, out, json.loads((tmp_path / "report.json").read_text())


def test_a_jsonl_file_is_backfilled_line_by_line_like_the_streaming_engine(spark, lines, expected, grep, tmp_path):
    source = tmp_path / "requests.jsonl"
    source.write_text("\n".join(lines) + "\n")

    code, out, report = _run(tmp_path, grep, "--input", str(source))

    assert code == 0
    assert by_request(out / "summaries.jsonl") == by_request(expected / "summaries.jsonl")
    assert matches(out / "matches.jsonl") == matches(expected / "matches.jsonl")
    assert report["source"] == {"type": "files", "path": str(source), "format": "jsonl"}
    assert report["totals"]["messages"] == len(lines) and report["planned_chunks"] == 4


def test_a_parquet_dump_with_a_value_column_is_backfilled_message_by_message(spark, lines, expected, grep, tmp_path):
    source = str(tmp_path / "dump.parquet")
    spark.createDataFrame([(line.encode(), i) for i, line in enumerate(lines)], "value binary, n long") \
        .coalesce(1).orderBy("n").select("value").write.parquet(source)

    code, out, report = _run(tmp_path, grep, "--input", source)

    assert code == 0
    assert by_request(out / "summaries.jsonl") == by_request(expected / "summaries.jsonl")
    assert report["totals"]["messages"] == len(lines)


def test_a_parquet_topic_dump_keeps_its_partitions_and_offsets(spark, corpus, grep, tmp_path):
    records = requests(corpus, 10, prefix="dump")
    rows = [(i % 3, 100 + i // 3, json.dumps(r)) for i, r in enumerate(records)]
    source = str(tmp_path / "topic-dump")
    spark.createDataFrame(rows, "partition int, offset long, value string").write.parquet(source)

    code, out, report = _run(tmp_path, grep, "--input", source, "--input-format", "parquet")

    assert code == 0
    assert set(by_request(out / "summaries.jsonl")) == {r["request_id"] for r in records}
    assert {p: v["messages"] for p, v in report["partitions"].items()} == {"0": 4, "1": 3, "2": 3}


def test_parquet_rows_without_a_value_column_become_their_json_objects(spark, corpus, grep, tmp_path):
    records = requests(corpus, 5, prefix="rows")
    source = str(tmp_path / "rows.parquet")
    spark.createDataFrame(records).write.parquet(source)

    code, out, _ = _run(tmp_path, grep, "--input", source)

    assert code == 0
    assert set(by_request(out / "summaries.jsonl")) == {r["request_id"] for r in records}


def test_an_input_whose_format_cannot_be_told_is_refused_with_a_hint(spark, grep, tmp_path, capsys):
    config = write_config(tmp_path / "config.yaml", config_dict(tmp_path / "out", grep))

    code = backfill(["--config", str(config), "--handler", DEMO_HANDLER, "--input", str(tmp_path / "data.bin")])

    assert code == 2
    assert "add --input-format jsonl|parquet" in capsys.readouterr().err
