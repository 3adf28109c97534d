"""bench/processes.py runs end to end at a tiny size: `knarr run` pods in spawn mode and in persistent mode
(the Python program and the C one), each with one process and with --processes 2, each started as the
command, settled, fed and stopped.

The pods report through the broker's committed offsets and their /readyz; a change to either, or to
how `knarr run --processes` starts, must not break the bench silently. The figures are read from the
bench's --json, not from its columns (a slow machine's wide figures once shifted them). Nothing here is timed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

PROCESSES_BENCH = Path(__file__).resolve().parents[2] / "bench" / "processes.py"


@pytest.mark.kafka
def test_a_tiny_pod_bench_runs_every_row_and_judges_every_persistent_ratio(kafka_bootstrap, tmp_path):
    written = tmp_path / "figures.json"
    proc = subprocess.run(
        [sys.executable, str(PROCESSES_BENCH), "--messages", "1000", "--max-executors", "2", "--processes", "2",
         "--rounds", "1", "--warm-up-messages", "0", "--bootstrap", kafka_bootstrap, "--json", str(written)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table, figures = proc.stdout, json.loads(written.read_text())
    modes = ("spawn", "persistent", "persistent, C program")
    labels = [f"{mode}, {n}" for mode in modes for n in ("one process", "--processes 2")]
    [rows] = figures["rounds"]
    assert sorted(rows) == sorted(labels), figures
    for label in labels:
        row = rows[label]
        assert row["tasks"] > 0 and row["rate"] > 0 and row["knarr_us"] > 0, row
        assert row["busy_cores"] > 0, row  # the knarr processes', what the tasks ran in, the broker's
        assert re.search(rf"^  {re.escape(label)}  ", table, re.MULTILINE), table  # its row in the table
    for label in labels[2:]:
        name = f"{label} / spawn, one process"
        ratio = figures["ratios"][name]
        assert ratio["low"] <= ratio["median"] <= ratio["high"] and ratio["met"] == (ratio["median"] >= 10), ratio
        assert re.search(rf"^  {re.escape(name)} .* >= 10x +{'PASS' if ratio['met'] else 'MISS'}$", table,
                         re.MULTILINE), table
        # its round nearest the median, taken apart into CPU per task and busy cores, or (a broker not this
        # checkout's, its CPU unknown) the table saying why not
        nearest = ratio["bound"]
        assert nearest["round"] == 0, ratio
        if nearest["apart"]:
            assert nearest["apart"]["cpu"] * nearest["apart"]["busy"] == pytest.approx(nearest["ratio"], rel=1e-6), ratio
            assert nearest["ceilings"]["worker_free"] > nearest["ceilings"]["this_worker"] > 0, ratio
        else:
            assert "(no bound: the broker's CPU is not known, not this checkout's broker)" in table, table
    assert len(figures["ratios"]["spawn, --processes 2 / spawn, one process"]["values"]) == 1, figures
    assert re.search(r"^  spawn, --processes 2 / spawn, one process: [\d.]+x \(the rounds", table, re.MULTILINE), table
