"""make bench-compare's harness (bench/compare/): it runs, it judges outputs, its handlers compile.

The race itself (with Drakkar, at full size) is `make bench-compare`; nothing here is timed.
"""

from __future__ import annotations

import importlib.util
import py_compile
import re
import subprocess
import sys
from pathlib import Path

import pytest

from knarr.config.loading import config_from_dict

COMPARE = Path(__file__).resolve().parents[2] / "bench" / "compare"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_compare_{name}", COMPARE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


rows = _load("rows")


@pytest.mark.kafka
def test_a_tiny_knarr_only_race_runs_on_the_real_broker_and_prints_its_table(kafka_bootstrap):
    proc = subprocess.run(
        [sys.executable, str(COMPARE / "race.py"), "--engines", "knarr", "--messages", "200", "--w2-messages", "20",
         "--warm-up-messages", "100", "--bootstrap", kafka_bootstrap],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = proc.stdout
    assert "| workload | engine | msgs/s | tasks/s | CPU/task | peak RSS | p50 latency | p99 latency | load |" in table
    for row in rows.ROWS.values():
        assert f"| {row.title} | knarr" in table, f"{row.name} missing from:\n{table}"
    assert "Drakkar 2.4.0 |" not in table  # knarr only: no Drakkar rows, no ratios against it
    assert "Machine: " in table and "load average" in table
    warm_up = r"\(warm-up: \d untimed run\(s\) of 100 messages; the broker's CPU per task in each: (\d+ us|not measured)"
    assert re.search(warm_up, table), table  # the broker warmed before the first row


@pytest.mark.parametrize("name", ["drakkar_w1.py", "drakkar_w2.py", "drakkar_run.py"])
def test_the_drakkar_side_of_the_race_compiles(name, tmp_path):
    py_compile.compile(str(COMPARE / name), cfile=str(tmp_path / "out.pyc"), doraise=True)


@pytest.mark.parametrize("name", sorted(rows.ROWS))
def test_every_row_gives_knarr_a_config_it_accepts(name):
    topics = rows.Topics("in", "out", "in-dlq", "group")
    config = rows.knarr_config(rows.ROWS[name], "127.0.0.1:9092", topics, "/bin/echo", rows.Limits(),
                               persistent_command=[sys.executable, str(COMPARE / "echo_task.py")])
    config_from_dict(config)


def test_the_same_limits_rows_set_the_same_limits_in_both_engines():
    limits = rows.Limits(max_executors=7)
    topics = rows.Topics("in", "out", "in-dlq", "group")
    row = rows.ROWS["w2-bounded"]
    ours = rows.knarr_config(row, "b", topics, "/usr/bin/grep", limits)
    theirs = rows.drakkar_config(row, "b", topics, "/usr/bin/grep", limits, "/tmp/x")
    keys = ("max_executors", "window_size", "backpressure_high_multiplier", "backpressure_low_multiplier")
    assert {k: ours["executor"][k] for k in keys} == {k: theirs["executor"][k] for k in keys}
    assert ours["executor"]["max_executors"] == 7
    assert ours["kafka"]["max_poll_records"] == theirs["sources"]["kafka"]["max_poll_records"]


def test_a_complete_correct_output_passes_the_check():
    outputs = [rows.expected("w2", i) for i in reversed(range(50))]
    rows.check_outputs("w2", 50, outputs)


@pytest.mark.parametrize("damage, says", [
    (lambda out: out[:-1], "1 of 50 messages have no output"),
    (lambda out: out + [out[3]], "1 messages have more than one output"),
    (lambda out: [{**out[0], "matches": 19}] + out[1:], "1 outputs are wrong"),
    (lambda out: out + [{"i": 50, "tasks": 10, "matches": 20}], "1 outputs name no message of this run"),
])
def test_an_incomplete_or_wrong_output_fails_the_run_loudly(damage, says):
    outputs = damage([rows.expected("w2", i) for i in range(50)])
    with pytest.raises(rows.WrongOutput, match=says):
        rows.check_outputs("w2", 50, outputs)


def test_each_w2_document_gives_every_pattern_its_share_of_lines():
    text = rows.document(1234)
    for k in range(rows.W2_PATTERNS):
        assert sum(f"key{k}" in line for line in text.splitlines()) == rows.W2_LINES // rows.W2_PATTERNS


def test_throughput_runs_from_the_first_input_to_the_last_output_and_latency_is_per_message():
    row = rows.ROWS["w2-bounded"]
    produced = {0: 1_000, 1: 1_000, 2: 1_500}
    outputs = [({"i": 0}, 1_100), ({"i": 2}, 1_700), ({"i": 1}, 3_000)]
    f = rows.figure("knarr", row, produced, outputs, cpu_seconds=0.06, peak_rss_bytes=64 * 2**20)
    assert f.seconds == 2.0 and f.msgs_per_s == 1.5 and f.tasks_per_s == 15.0
    assert f.cpu_us_per_task == pytest.approx(2_000)
    assert sorted(f.latencies_ms) == [100, 200, 2_000]
    assert f.latency_ms(0.5) == 200 and f.latency_ms(0.99) == 2_000 and f.rss_mib == 64
