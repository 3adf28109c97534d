"""make bench's script (bench/engine.py) runs end to end at a tiny size and prints every row of its table.

It once crashed after its main rows because a config bound changed under it; nothing here is timed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ENGINE_BENCH = Path(__file__).resolve().parents[2] / "bench" / "engine.py"


@pytest.mark.kafka
def test_a_tiny_make_bench_runs_every_mode_on_the_real_broker_and_prints_its_table(kafka_bootstrap):
    proc = subprocess.run(
        [sys.executable, str(ENGINE_BENCH), "--messages", "300", "--spawns", "200", "--profile-messages", "100",
         "--recorder-messages", "200", "--bootstrap", kafka_bootstrap],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = proc.stdout
    for row in ("spawn mode: engine end to end", "spawn mode / C floor", "worker CPU per task, children excluded",
                "event loop lag p99 under full load", "persistent / spawn mode",
                "diagnostic: b with the backpressure pause out of reach", "profile: ",
                "ceiling, a worker costing nothing: cores / (child + broker)",
                "ceiling, a worker costing nothing: cores / (program + broker)", "of (d), librdkafka",
                "ceiling, one event loop: 1 / its CPU per task",
                "the same with executor.spawner: thread", "the same through the spawner thread",
                "a task process in (b): its CPU", "ceiling, a worker costing nothing: cores / (child in (b) + broker)",
                "persistent mode paced to spawn mode", "its event loop CPU per task, against at full speed",
                "the Python floor: no engine (bench/python_floor.py)", "persistent mode / the Python floor",
                "its programs polling stdin, then blocking (poll_seconds)",
                "the loop, the program: CPU per task, polling against not"):
        assert row in table, f"{row!r} missing from:\n{table}"
    assert table.count("ceiling, one event loop") == 2, table  # spawn mode's and persistent mode's
    floor = re.search(r"the Python floor: no engine \(bench/python_floor.py\) +(\d+) /s", table)
    assert floor and int(floor[1]) > 0, table  # every message of its own topic went through it
    assert "recorder" in table.lower()
