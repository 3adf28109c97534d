"""bench/persistent.py runs end to end at a tiny size: both modes, one task per message and one per
several, one worker and a worker per core, and persistent mode's floor in Python (bench/python_floor.py).

The per-core rows run workers as processes of their own, which report to the bench through their
stdout; a change to the worker's output or exit must not break them silently. Nothing here is timed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PERSISTENT_BENCH = Path(__file__).resolve().parents[2] / "bench" / "persistent.py"


@pytest.mark.kafka
def test_a_tiny_persistent_bench_runs_both_modes_batched_and_with_one_worker_and_with_two(kafka_bootstrap):
    proc = subprocess.run(
        [sys.executable, str(PERSISTENT_BENCH), "--messages", "400", "--executor-tasks", "50", "--max-executors", "2",
         "--per-task", "5", "--workers", "2", "--rounds", "2", "--warm-up-messages", "100", "--bootstrap", kafka_bootstrap],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = proc.stdout
    warm_up = r"^warm-up: \d untimed run\(s\) of 100 messages; the broker's CPU per task in each: (\d+ us|not measured)"
    assert re.search(warm_up, table, re.MULTILINE), table  # the broker warmed before the end-to-end runs
    for row in ("executor layer alone", "persistent, C program", "spawn (/bin/echo per task)",
                "persistent / spawn", "a worker per core: 2 workers at once", "spawn, 2 workers",
                "persistent, 2 workers", "persistent, 2 workers / spawn, one worker",
                "persistent / spawn, 2 workers each, median", "the round nearest the median:", "the Python floor: no engine (bench/python_floor.py)",
                "persistent mode / the Python floor"):
        assert row in table, f"{row!r} missing from:\n{table}"
    floor = re.search(r"^  the Python floor: no engine \(bench/python_floor.py\) +(\d+) +(\d+) us", table, re.MULTILINE)
    assert floor and int(floor[1]) > 0 and int(floor[2]) > 0, table
    batched = table[table.index("one task for many messages"):table.index("a worker per core: 2 workers at once")]
    for mode in ("spawn", "persistent"):  # 400 messages in 80 tasks of 5: messages/s is 5x tasks/s
        found = re.search(rf"^  {mode} +5 +(\d+) +(\d+) +(\d+) us", batched, re.MULTILINE)
        assert found and int(found[1]) > 0 and abs(int(found[1]) - 5 * int(found[2])) <= 5, batched
    per_core = table[table.index("a worker per core: 2 workers at once"):]
    rounds = re.search(r"the rounds: persistent / spawn mode, tasks/s +(\d+) / (\d+), (\d+) / (\d+)$", per_core,
                       re.MULTILINE)
    assert rounds and all(int(rate) > 0 for rate in rounds.groups()), per_core  # both rounds ran both modes
    for mode in ("spawn", "persistent"):  # every task of both workers counted, over a real interval
        found = re.search(rf"^  {mode}, 2 workers +(\d+) +(\d+) us +([\d.]+)x +(\d+)%", per_core, re.MULTILINE)
        assert found and int(found[1]) > 0 and int(found[2]) > 0 and float(found[3]) > 0, per_core
