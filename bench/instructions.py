"""Instructions the worker executes per task, counted by valgrind's callgrind: a cost that a shared
host's pace does not move.

On a shared VM the same bytecode ran up to twice as slowly from one second to the next, so a change
to the engine worth 5 % of its CPU per task cannot be told from the noise by timing it. Counting
instructions can: callgrind runs the worker on a simulated CPU and counts every instruction of
every thread of its process (the event loop, the native runner's thread, librdkafka's), whatever
else the host does. The tasks' own processes are not traced: what is counted is the worker's side,
as ``make bench``'s "worker CPU per task, children excluded".

Each count is the difference of two runs of the same workload (bench/persistent.py's echo
workload, one task per message, a Kafka output each): one of ``--messages`` and one of a fifth as
many. Start-up (imports, the broker connection, the programs' start, about 2.6 billion
instructions) and shutdown cancel out; what is left, over the difference in messages, is what a
task costs. The runs are ``--runs`` pairs, so the spread says how steady the count is.

What a count cannot say: time. An instruction that misses the cache, a system call's time in the
kernel and a wake-up across CPUs cost far more than the instructions they are counted as (only the
system call's user side is counted). Under callgrind the worker runs about 50 times slower, so
what it does per unit of wall time (timers, the producer's polls, librdkafka's threads waking
on their own) weighs more than in a real run, the same in every run of one size. Read the count
beside ``make bench``, for changes to the engine's interpreted work, compared within one run of
this bench or across commits on the same machine and Python.

Persistent mode (``--mode persistent``) needs a valgrind that knows ``pidfd_open``, which persistent
programs are watched through: Debian 12's valgrind 3.19 answers it "not implemented", and the worker
then refuses to start, saying so (spawn mode's native runner takes its pidfds from ``clone``).

    uv run python bench/instructions.py [--mode spawn] [--messages 2000] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

MODES = ("spawn", "persistent")


def counted(path: Path) -> int:
    """The instructions a callgrind output file counted in all (its ``summary:`` or ``totals:`` line).
    Read line by line: the file runs to megabytes (2 MB here), and the summary is in its header."""
    with path.open() as lines:
        for line in lines:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"{path} has no summary line: callgrind did not finish its run")


def per_task(small: tuple[int, int], large: tuple[int, int]) -> float:
    """Instructions per task from two runs, (tasks, instructions) each: what the larger run did more,
    over the tasks it ran more (what both did once cancels out)."""
    (tasks_small, small_count), (tasks_large, large_count) = small, large
    if tasks_large <= tasks_small:
        raise ValueError(f"the larger run must run more tasks: {tasks_small} and {tasks_large}")
    return (large_count - small_count) / (tasks_large - tasks_small)


def run_counted(mode: str, bootstrap: str, messages: int, max_executors: int, workdir: Path) -> tuple[int, int]:
    """One run of ``messages`` under callgrind: (tasks it ran, instructions it took). The traced process
    is bench/persistent.py's one-worker run, on a topic filled here, outside the count."""
    from workload import prefill
    from persistent import ONE_WORKER_RESULT

    topic, ends = prefill(bootstrap, messages)
    out = workdir / f"callgrind.{mode}.{messages}.{os.urandom(4).hex()}"
    spec = json.dumps({"mode": mode, "bootstrap": bootstrap, "topic": topic, "ends": ends,
                       "max_executors": max_executors})
    proc = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--trace-children=no",
                           sys.executable, str(BENCH / "persistent.py"), "--one-worker", spec],
                          capture_output=True, text=True, timeout=3_600)
    result = [line for line in proc.stdout.splitlines() if line.startswith(ONE_WORKER_RESULT)]
    if proc.returncode != 0 or not result or not out.exists():
        raise RuntimeError(f"the {mode} run of {messages} messages under callgrind failed "
                           f"(exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return json.loads(result[-1].removeprefix(ONE_WORKER_RESULT))["count"], counted(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", default="spawn",
                        help=f"modes to count, comma-separated ({', '.join(MODES)}; persistent: see above)")
    parser.add_argument("--messages", type=int, default=2_000,
                        help="messages of the larger run of each pair (the smaller runs a fifth as many)")
    parser.add_argument("--runs", type=int, default=2, help="pairs of runs per mode: their spread is the count's")
    parser.add_argument("--max-executors", type=int, default=2 * (os.cpu_count() or 1))
    parser.add_argument("--bootstrap", default="", help="Kafka bootstrap; default: start or reuse the local broker")
    args = parser.parse_args()
    modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--mode takes {' and/or '.join(MODES)}, comma-separated; got {args.mode!r}")
    if args.messages < 10 or args.runs < 1:
        parser.error(f"--messages must be 10 or more and --runs 1 or more, got {args.messages} and {args.runs}")
    if shutil.which("valgrind") is None:
        print("bench/instructions.py needs valgrind (Debian: apt-get install valgrind); it counts the worker's "
              "instructions under callgrind", file=sys.stderr)
        return 1
    from tests.services.kafka import ensure_kafka

    bootstrap = args.bootstrap or ensure_kafka()
    small = max(1, args.messages // 5)
    print(f"instructions per task, counted by callgrind: {args.messages} and {small} messages per pair of runs, "
          f"{args.runs} pairs per mode, max_executors={args.max_executors}, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="knarr-callgrind-") as workdir:
        for mode in modes:
            counts = []
            for run in range(1, args.runs + 1):
                print(f"{mode} mode: pair {run} of {args.runs} under callgrind ...", file=sys.stderr)
                pair = [run_counted(mode, bootstrap, n, args.max_executors, Path(workdir)) for n in (small, args.messages)]
                counts.append(per_task(*pair))
                print(f"  {mode:10} pair {run}: {pair[0][1] / 1e9:.2f} and {pair[1][1] / 1e9:.2f} billion instructions "
                      f"for {pair[0][0]} and {pair[1][0]} tasks: {counts[-1] / 1e3:,.0f} thousand per task")
            spread = (max(counts) - min(counts)) / statistics.median(counts)
            print(f"  {mode:10} instructions per task, the median of {len(counts)} pairs: "
                  f"{statistics.median(counts) / 1e3:,.0f} thousand  (pairs spread {spread:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
