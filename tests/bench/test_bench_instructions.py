"""make bench-instructions' arithmetic (bench/instructions.py): a callgrind file's count, and a task's
share of two runs. Its traced child is bench/persistent.py's one-worker run, which the per-core
rounds of make bench-persistent run (tests/bench/test_bench_persistent.py); nothing here is timed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from instructions import counted, per_task  # noqa: E402

CALLGRIND_OUT = """# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 4242
cmd:  /usr/bin/python3 bench/persistent.py --one-worker {}
part: 1

positions: line
events: Ir
summary: 4398046511

fl=(1) /usr/bin/python3.11
fn=(1) _PyEval_EvalFrameDefault
0 4398046511

totals: 4398046511
"""


def test_a_callgrind_file_gives_the_instructions_of_its_whole_run(tmp_path):
    out = tmp_path / "callgrind.out"
    out.write_text(CALLGRIND_OUT)
    assert counted(out) == 4_398_046_511


def test_a_callgrind_file_cut_short_says_its_run_did_not_finish(tmp_path):
    out = tmp_path / "callgrind.out"
    out.write_text("version: 1\nevents: Ir\n")
    with pytest.raises(RuntimeError, match="no summary line: callgrind did not finish its run"):
        counted(out)


def test_a_task_costs_what_the_larger_run_did_more_over_the_tasks_it_ran_more():
    # Both runs paid 4 billion once (imports, start, stop); the larger ran 400 more tasks at 500 thousand each.
    assert per_task((100, 4_050_000_000), (500, 4_250_000_000)) == 500_000


def test_the_larger_run_must_run_more_tasks():
    with pytest.raises(ValueError, match="the larger run must run more tasks: 500 and 500"):
        per_task((500, 1), (500, 2))


@pytest.mark.parametrize("args, error", [
    (["--mode", "spawn,fork"], "--mode takes spawn and/or persistent, comma-separated; got 'spawn,fork'"),
    (["--messages", "5"], "--messages must be 10 or more and --runs 1 or more, got 5 and 2"),
    (["--runs", "0"], "--messages must be 10 or more and --runs 1 or more, got 2000 and 0"),
])
def test_bad_arguments_are_refused_before_anything_runs(args, error):
    proc = subprocess.run([sys.executable, str(BENCH / "instructions.py"), *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and error in proc.stderr, proc.stderr
