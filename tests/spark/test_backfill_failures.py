"""A failed Spark task is retried and its chunk reprocessed; a chunk that never succeeds fails the backfill."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from knarr.errors import ExitCode
from knarr_spark.cli import main as backfill
from tests.spark.handlers import CRASH_ID
from tests.spark.workload import HANDLERS_FILE, config_dict, requests, rows, write_config

pytestmark = pytest.mark.spark


def _input(tmp_path: Path, corpus) -> tuple[Path, set[str]]:
    records = requests(corpus, 20)
    records.insert(13, {**records[0], "request_id": CRASH_ID})
    source = tmp_path / "requests.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    return source, {r["request_id"] for r in records}


def test_a_task_that_crashes_once_is_retried_and_nothing_is_lost(spark, corpus, grep, tmp_path):
    source, ids = _input(tmp_path, corpus)
    marker = tmp_path / "crashed-once"
    out = tmp_path / "out"
    config = write_config(tmp_path / "config.yaml", config_dict(out, grep, env={"CRASH_MARKER": str(marker)}))

    code = backfill(["--config", str(config), "--handler", f"{HANDLERS_FILE}:CrashOnceHandler", "--input", str(source),
                     "--chunk-size", "6", "--report", str(tmp_path / "report.json")])

    assert marker.exists(), "the handler never crashed: the test proves nothing"
    assert code == 0
    # At least once: the crashed chunk is reprocessed as a whole, so its earlier windows may repeat.
    summaries = rows(out / "summaries.jsonl")
    assert {s["request_id"] for s in summaries} == ids
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == "succeeded" and report["retried_chunks"] == 1
    retried = [c for c in report["chunks"] if c["attempt"] == 2]
    assert [(c["start"], c["end"]) for c in retried] == [(11, 16)]  # 21 lines in chunks [0,6) [6,11) [11,16) [16,21)
    assert report["totals"]["messages"] == len(ids)


def test_a_chunk_that_fails_on_every_attempt_fails_the_backfill_and_the_others_still_finish(spark, corpus, grep, tmp_path, capsys):
    source, ids = _input(tmp_path, corpus)
    out = tmp_path / "out"
    config = write_config(tmp_path / "config.yaml", config_dict(out, grep))

    code = backfill(["--config", str(config), "--handler", f"{HANDLERS_FILE}:AlwaysFatalHandler", "--input", str(source),
                     "--chunk-size", "6", "--report", str(tmp_path / "report.json")])

    assert code == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == "failed"
    assert report["completed_chunks"] == 3 and report["planned_chunks"] == 4
    [failed] = report["failed_chunks"]
    assert (failed["start"], failed["end"], failed["attempt"]) == (11, 16, 2)
    assert "exit code 1" in failed["error"]
    assert "FAILED chunk 2 (partition 0 [11, 16))" in capsys.readouterr().err
    done = {s["request_id"] for s in rows(out / "summaries.jsonl")}  # the failed chunk ran twice, partly
    assert {r for r in ids if r != CRASH_ID} - done <= {json.loads(line)["request_id"] for line in source.read_text().splitlines()[11:16]}


def test_a_task_that_crashes_on_every_attempt_aborts_the_backfill_with_exit_code_1(spark, corpus, grep, tmp_path, capsys):
    source, _ = _input(tmp_path, corpus)
    config = write_config(tmp_path / "config.yaml", config_dict(tmp_path / "out", grep))

    code = backfill(["--config", str(config), "--handler", f"{HANDLERS_FILE}:CrashAlwaysHandler", "--input", str(source),
                     "--chunk-size", "6", "--report", str(tmp_path / "report.json")])

    assert code == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == "failed" and report["aborted"]
    assert "ABORTED" in capsys.readouterr().err


def test_a_backfill_whose_tasks_all_fail_reports_them_and_exits_4(spark, corpus, grep, tmp_path, capsys):
    source, _ = _input(tmp_path, corpus)
    config = write_config(tmp_path / "config.yaml", config_dict(tmp_path / "out", grep))

    code = backfill(["--config", str(config), "--handler", f"{HANDLERS_FILE}:FailingTasksHandler", "--input", str(source),
                     "--chunk-size", "6", "--report", str(tmp_path / "report.json")])

    assert code == ExitCode.WORK_FAILED
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == "finished with failed work"
    totals = report["totals"]
    assert totals["failed"] == totals["tasks"] > 0 and totals["succeeded"] == 0
    err = capsys.readouterr().err
    assert err.startswith("knarr backfill finished with failed work: 4/4 chunks")
    assert f"{totals['failed']} task(s) failed for good and 0 payload(s) went to the DLQ" in err
