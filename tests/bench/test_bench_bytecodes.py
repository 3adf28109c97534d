"""make bench-bytecodes (bench/bytecodes.py): its arithmetic, the names it gives functions, and a tiny
traced run of each mode on the real broker, so the counter cannot rot. Nothing here is timed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from bytecodes import Counter, by_file, function_name, per_task  # noqa: E402


def test_a_task_costs_what_the_larger_run_did_more_per_function_over_the_tasks_it_ran_more():
    small = (100, {"knarr/a.py:f:1": [1_000, 10], "knarr/a.py:start:5": [500, 1]})
    large = (300, {"knarr/a.py:f:1": [9_000, 210], "knarr/a.py:start:5": [500, 1], "knarr/b.py:g:3": [400, 200]})
    assert per_task(small, large) == {"knarr/a.py:f:1": [40.0, 1.0], "knarr/b.py:g:3": [2.0, 1.0]}  # start-up left out


def test_the_larger_run_must_run_more_tasks():
    with pytest.raises(ValueError, match="the larger run must run more tasks: 300 and 300"):
        per_task((300, {}), (300, {}))


def test_modules_are_ranked_by_their_functions_bytecodes_together():
    counts = {"knarr/a.py:f:1": [40.0, 1.0], "knarr/a.py:g:9": [30.0, 1.0], "knarr/b.py:h:3": [50.0, 2.0]}
    assert by_file(counts) == [("knarr/a.py", 70.0), ("knarr/b.py", 50.0)]


def _code(path: str):
    return compile("def f():\n    return 1\n", path, "exec").co_consts[0]


@pytest.mark.parametrize("path, name", [
    ("/work/main/worker/src/knarr/engine/ledger.py", "knarr/engine/ledger.py:f:1"),
    ("/work/main/.venv/lib/python3.11/site-packages/pydantic/main.py", "pydantic/main.py:f:1"),
    ("/usr/lib/python3.11/asyncio/events.py", "asyncio/events.py:f:1"),
    ("<string>", "<string>:f:1"),
])
def test_a_function_is_named_from_its_package_down_the_same_on_every_machine(path, name):
    assert function_name(_code(path)) == name


def test_the_inits_dataclasses_write_are_counted_per_class():
    from dataclasses import dataclass

    @dataclass
    class Ended:
        code: int

    @dataclass
    class Started:
        pid: int

    counter = Counter()
    counter.install()
    try:
        Ended(0), Started(1), Started(2)
    finally:
        counter.remove()
    named = counter.by_name()
    assert named["<string>:" + Ended.__qualname__ + ".__init__"][1] == 1
    assert named["<string>:" + Started.__qualname__ + ".__init__"][1] == 2


def test_the_counter_counts_a_functions_own_bytecodes_and_its_calls():
    def inner(x):
        return x + 1

    def outer():
        return inner(1) + inner(2)

    counter = Counter()
    counter.install()
    try:
        outer()
    finally:
        counter.remove()
    named = {name.split(":")[1]: counts for name, counts in counter.by_name().items()}
    assert named["inner"][1] == 2 and named["outer"][1] == 1
    assert named["inner"][0] > 0 and named["outer"][0] > named["inner"][0] / 2  # outer's own, not inner's


@pytest.mark.kafka
@pytest.mark.parametrize("mode, recorder", [("spawn", False), ("persistent", False), ("spawn", True)])
def test_a_tiny_count_of_each_mode_names_the_engines_functions(mode, recorder, kafka_bootstrap):
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bytecodes.py"), "--mode", mode, "--messages", "120", "--base", "40",
         "--top", "40", "--bootstrap", kafka_bootstrap] + (["--recorder"] if recorder else []),
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    label = f"{mode} mode, flight recorder on" if recorder else f"{mode} mode"
    found = re.search(rf"^bytecodes per task, {label} \(runs of 120 and 40 messages\): ([\d,]+), in (\d+) Python calls",
                      proc.stdout, re.MULTILINE)
    assert found and int(found[1].replace(",", "")) > 500 and int(found[2]) > 20, proc.stdout
    assert re.search(r"^ +[\d.]+  knarr/engine/\w+\.py$", proc.stdout, re.MULTILINE), proc.stdout  # by module
    assert re.search(r"^ +[\d.]+ +[\d.]+  knarr/engine/\w+\.py:\w+:\d+$", proc.stdout, re.MULTILINE), proc.stdout
    recorded = re.search(r"^ +[\d.]+ +[\d.]+  knarr/debug/recorder\.py:record:\d+$", proc.stdout, re.MULTILINE)
    assert bool(recorded) == recorder, proc.stdout  # the recorder's events are counted when it is on, only then


@pytest.mark.parametrize("args, error", [
    (["--mode", "fork"], "argument --mode: invalid choice: 'fork'"),
    (["--messages", "400", "--base", "400"], "--base must be at least 1 and fewer than --messages (400), got 400"),
    (["--base", "0"], "--base must be at least 1 and fewer than --messages (2400), got 0"),
    (["--top", "0"], "--top must be 1 or more, got 0"),
])
def test_bad_arguments_are_refused_before_anything_runs(args, error):
    proc = subprocess.run([sys.executable, str(BENCH / "bytecodes.py"), *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and error in proc.stderr, proc.stderr
