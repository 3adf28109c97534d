"""make bench's script (bench/engine.py) runs end to end at a tiny size and prints every row of its table.

It once crashed after its main rows because a config bound changed under it; nothing here is timed.
The figures are read from the bench's --json, not from the table's columns.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ENGINE_BENCH = Path(__file__).resolve().parents[2] / "bench" / "engine.py"


@pytest.mark.kafka
def test_a_tiny_make_bench_runs_every_mode_on_the_real_broker_and_prints_its_table(kafka_bootstrap, tmp_path):
    written = tmp_path / "figures.json"
    proc = subprocess.run(
        [sys.executable, str(ENGINE_BENCH), "--messages", "300", "--spawns", "200", "--profile-messages", "100",
         "--recorder-messages", "200", "--rounds", "2", "--bootstrap", kafka_bootstrap, "--json", str(written)],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table, figures = proc.stdout, json.loads(written.read_text())
    for row in ("the rounds: C spawn floor / spawn mode, end to end (b)", "spawn mode / C floor: the median of 2 rounds",
                "worker CPU per task, children excluded", "event loop lag p99 under full load",
                "persistent / spawn mode: the median of 2 rounds", "the round nearest the median: C floor, spawn mode",
                "the round nearest the median: persistent, spawn mode",
                "diagnostic: b with the backpressure pause out of reach", "profile: ",
                "ceiling, a worker costing nothing: cores / (child + broker)",
                "ceiling, a worker costing nothing: cores / (program + broker)", "of (d), librdkafka",
                "of (d), the native runner (spawning, capturing, reaping)", "of (d), the rest (other threads)",
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
    # the figures, from the bench's --json: each ratio's rounds, their median and its interval, the verdict
    rounds = figures["rounds"]
    assert len(rounds) == 2 and all(r["floor"]["rate"] > 0 and r["spawn"]["rate"] > 0 and r["persistent"]["rate"] > 0
                                    for r in rounds), rounds
    for name, slow, fast, label in (("spawn_over_floor", "floor", "spawn", "spawn mode / C floor"),
                                    ("persistent_over_spawn", "spawn", "persistent", "persistent / spawn mode")):
        ratio = figures[name]
        assert ratio["values"] == sorted(r[fast]["rate"] / r[slow]["rate"] for r in rounds), ratio
        assert ratio["values"][0] <= ratio["low"] <= ratio["median"] <= ratio["high"] <= ratio["values"][-1], ratio
        assert ratio["met"] == (ratio["median"] >= ratio["target"]), ratio
        # the round nearest the median, taken apart into CPU per task and busy cores, exactly
        nearest = rounds[ratio["nearest_median_round"]]
        apart = figures[f"{name}_apart"]["apart"]
        assert apart["cpu"] * apart["busy"] == pytest.approx(nearest[fast]["rate"] / nearest[slow]["rate"], rel=1e-6)
        verdict = "PASS" if ratio["met"] else "MISS"
        assert re.search(rf"^  {re.escape(label)}: the median of 2 rounds .* {verdict}$", table, re.MULTILINE), table
    assert figures["worker_cpu_us"]["median"] > 0 and figures["lag_p99_ms"]["worst"] >= 0, figures
    # spawn mode's worker CPU taken apart by thread: the native runner's (its thread found by name) is a part of it.
    # A thread's CPU is read from /proc in clock ticks, the process's from getrusage to the microsecond: the
    # runner's share may exceed the rest by less than one tick (CI's run saw 30 ms against 28.7).
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert sum(r["spawn"]["runner_cpu_seconds"] for r in rounds) > 0, rounds
    for r in rounds:
        spawn = r["spawn"]
        assert 0 <= spawn["runner_cpu_seconds"] <= spawn["cpu_seconds"] - spawn["loop_cpu_seconds"] + tick, spawn
    # the lag less the loop's waits for a CPU (Linux counts them, as CI's runs): never more than the lag
    assert 0 <= figures["lag_p99_ms"]["own_worst"] <= figures["lag_p99_ms"]["worst"], figures
    assert "the same less its waits for a CPU" in table
    # the Python floor, and with a request ahead: every message of its own topic went through it
    assert figures["python_floor"]["rate"] > 0 and figures["python_floor_ahead"]["rate"] > 0, figures
    recorder = figures["recorder"]  # pairs of runs, off and on, each pair's cost
    assert len(recorder["costs_percent"]) == len(recorder["runs"]) // 2 >= 1, recorder
    assert "recorder" in table.lower()
    # untimed runs until the broker's CPU per task settles, each run's figure shown
    warm_up = r"warm-up: \d untimed run\(s\) of 300 messages; the broker's CPU per task in each: (\d+ us|not measured)"
    assert re.search(warm_up, table), table
