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
         "--recorder-messages", "200", "--rounds", "2", "--bootstrap", kafka_bootstrap],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = proc.stdout
    for row in ("the rounds: C spawn floor / spawn mode, end to end (b)", "spawn mode / C floor: the median of 2 rounds",
                "worker CPU per task, children excluded", "event loop lag p99 under full load",
                "persistent / spawn mode: the median of 2 rounds", "the round nearest the median: C floor, spawn mode",
                "the round nearest the median: persistent, spawn mode",
                "diagnostic: b with the backpressure pause out of reach", "profile: ",
                "ceiling, a worker costing nothing: cores / (child + broker)",
                "ceiling, a worker costing nothing: cores / (program + broker)", "of (d), librdkafka",
                "ceiling, one event loop: 1 / its CPU per task",
                "the same with executor.spawner: thread", "the same through the spawner thread",
                "a task process in (b): its CPU", "ceiling, a worker costing nothing: cores / (child in (b) + broker)",
                "persistent mode paced to spawn mode", "its event loop CPU per task, against at full speed",
                "the Python floor: no engine (bench/python_floor.py)", "persistent mode / the Python floor",
                "the Python floor, a request ahead per program",
                "its programs polling stdin, then blocking (poll_seconds)",
                "the loop, the program: CPU per task, polling against not"):
        assert row in table, f"{row!r} missing from:\n{table}"
    assert table.count("ceiling, one event loop") == 2, table  # spawn mode's and persistent mode's
    # each ratio's rounds, sorted, with the interval of their median: two values and two bounds apiece
    spreads = re.findall(r"the rounds, sorted \(the median: 95 % between\) +(\S+), (\S+) +\((\S+) to (\S+)\)", table)
    assert len(spreads) == 2, table
    for values in spreads:
        low, high, *bounds = (float(v.rstrip("x")) for v in values)
        assert low <= high and low <= bounds[0] <= bounds[1] <= high, table
    # each ratio of the round nearest the median, taken apart into CPU per task and busy cores, exactly
    for nearest, apart in (("C floor, spawn mode", "spawn mode / the floor"), ("persistent, spawn mode",
                                                                             "persistent / spawn mode")):
        slow, fast = (float(v) for v in re.search(rf"the round nearest the median: {nearest} +(\S+), (\S+) /s",
                                                   table).groups())
        if nearest.startswith("persistent"):
            slow, fast = fast, slow
        cpu, busy = (float(v) for v in re.search(rf"{apart}, taken apart: CPU per task, then busy cores +(\S+) x (\S+)",
                                                  table).groups())
        assert cpu * busy == pytest.approx(fast / slow, rel=0.02, abs=0.02), table
    floor = re.search(r"the Python floor: no engine \(bench/python_floor.py\) +(\d+) /s", table)
    assert floor and int(floor[1]) > 0, table  # every message of its own topic went through it
    ahead = re.search(r"the Python floor, a request ahead per program +(\d+) /s", table)
    assert ahead and int(ahead[1]) > 0, table
    assert "recorder" in table.lower()
    # untimed runs until the broker's CPU per task settles, each run's figure shown
    warm_up = r"warm-up: \d untimed run\(s\) of 300 messages; the broker's CPU per task in each: (\d+ us|not measured)"
    assert re.search(warm_up, table), table
