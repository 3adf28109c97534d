"""bench/processes.py runs end to end at a tiny size: `knarr run` pods in spawn mode and in persistent mode
(the Python program and the C one), each with one process and with --processes 2, each started as the
command, settled, fed and stopped.

The pods report through the broker's committed offsets and their /readyz; a change to either, or to
how `knarr run --processes` starts, must not break the bench silently. Nothing here is timed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PROCESSES_BENCH = Path(__file__).resolve().parents[2] / "bench" / "processes.py"


@pytest.mark.kafka
def test_a_tiny_pod_bench_runs_every_row_and_judges_every_persistent_ratio(kafka_bootstrap):
    proc = subprocess.run(
        [sys.executable, str(PROCESSES_BENCH), "--messages", "1000", "--max-executors", "2", "--processes", "2",
         "--rounds", "1", "--warm-up-messages", "0", "--bootstrap", kafka_bootstrap],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = proc.stdout
    modes = ("spawn", "persistent", "persistent, C program")
    labels = [f"{mode}, {n}" for mode in modes for n in ("one process", "--processes 2")]
    for label in labels:
        row = re.search(rf"^  {re.escape(label)} +([\d,]+) +([\d,]+) us +([\d,]+) us +(?:[\d,]+ us)? +([\d.]+) of \d+ ",
                        table, re.MULTILINE)
        assert row and int(row[1].replace(",", "")) > 0 and int(row[2].replace(",", "")) > 0, table
        assert 0 < float(row[4]), table  # busy cores (the knarr processes', what the tasks ran in, the broker's)
    for ratio in (f"{label} / spawn, one process" for label in labels[2:]):
        verdict = re.search(rf"^  {re.escape(ratio)} +[\d.]+x +>= 10x +(PASS|MISS)$", table, re.MULTILINE)
        assert verdict, table
        # under each verdict, its round taken apart into CPU per task and busy cores (or why not)
        below = table[verdict.end():].split("\n  persistent", 1)[0]
        assert re.search(r"taken apart: CPU per task, then busy cores +[\d.]+ x [\d.]+|not this checkout's broker",
                         below), table
    assert re.search(r"^  spawn, --processes 2 / spawn, one process: [\d.]+x \(the rounds", table, re.MULTILINE), table
