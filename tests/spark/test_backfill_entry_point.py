"""The operator's SparkApplication runs spark_entry.py with the arguments it renders: the CLI's code path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from knarr_operator.manifests.backfill import SPARK_ENTRY, backfill_arguments, report_path
from knarr_operator.spec import Backfill
from knarr_operator.worker_config import CONFIG_PATH
from tests.services.kafka import create_topic, produce_json, unique_name
from tests.spark.workload import DEMO_HANDLER, by_request, config_dict, requests, write_config

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

REPO_ROOT = Path(__file__).resolve().parents[2]
ENTRY = REPO_ROOT / "spark" / "spark_entry.py"


def test_the_entry_point_is_the_file_the_operator_names():
    assert SPARK_ENTRY == "local:///opt/knarr/spark_entry.py"
    assert ENTRY.name == Path(SPARK_ENTRY.removeprefix("local://")).name


def test_spark_submit_of_the_entry_point_with_the_operators_arguments_runs_the_backfill(kafka_bootstrap, corpus, grep, tmp_path):
    topic = unique_name("backfill-entry")
    create_topic(kafka_bootstrap, topic, partitions=3)
    records = requests(corpus, 9, prefix="entry")
    placed = produce_json(kafka_bootstrap, topic, records, key_fn=lambda r: r["request_id"])
    ends = {p: 1 + max(o for q, o in placed if q == p) for p, _ in placed}
    backfill = Backfill.model_validate({
        "name": unique_name("replay"),
        "from": {"offsets": {str(p): 0 for p in ends}},
        "to": {"offsets": {str(p): o for p, o in ends.items()}},
    })
    args = backfill_arguments(DEMO_HANDLER, backfill)
    assert args[:2] == ["--config", CONFIG_PATH]
    out = tmp_path / "out"
    args[1] = str(write_config(tmp_path / "config.yaml", config_dict(out, grep, brokers=kafka_bootstrap, topic=topic)))
    report = Path(report_path(backfill))

    spark_submit = Path(sys.executable).with_name("spark-submit")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    try:
        proc = subprocess.run(
            [str(spark_submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false", str(ENTRY), *args],
            capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path, check=False,
        )
        assert proc.returncode == 0, f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"
        assert set(by_request(out / "summaries.jsonl")) == {r["request_id"] for r in records}
        data = json.loads(report.read_text())
        assert data["status"] == "succeeded" and data["totals"]["messages"] == len(records)
        assert "knarr backfill succeeded" in proc.stdout  # spark-submit puts the Python driver's stderr on its stdout
    finally:
        report.unlink(missing_ok=True)


def test_knarr_backfill_on_the_worker_cli_is_the_same_command(grep, tmp_path, capsys):
    from knarr.cli import main as knarr

    config = write_config(tmp_path / "config.yaml", config_dict(tmp_path / "out", grep))

    code = knarr(["backfill", "--config", str(config), "--handler", DEMO_HANDLER, "--from-offsets", "0:5", "--input", "x.jsonl"])

    assert code == 2
    assert "knarr backfill: give exactly one input" in capsys.readouterr().err
