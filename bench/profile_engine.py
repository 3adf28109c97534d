"""Where the worker's time goes on W1, sampled by py-spy: the top functions per thread.

Runs make bench's end-to-end engine run (bench/workload.py) (N messages -> one task each -> Kafka -> commit)
in a child process under ``py-spy record --nonblocking`` (sampling without pausing the
worker, so the run is not slowed by the profiler), then prints, for the event loop thread and
for the spawner thread, the functions with the most samples of their own and the engine's
functions by inclusive samples. Only samples taken inside the event loop's run (not the topic
pre-fill) count for the loop thread.

    uv run python bench/profile_engine.py [--messages 20000] [--top 20] [--mode spawn|persistent] [--native]

With --native the C frames show too: what the Python-only profile files under the loop's
``Runner.run`` (uvloop's callbacks, libc's calls, the garbage collector).

Read it for the shares of Python functions, not for how much time goes to C or the kernel. On the
development VM, perf's clock sampling of a persistent-mode run put the loop thread's time 79 % in
the interpreter, 9 % in the kernel, 5 % in libc and 2.5 % in uvloop. py-spy filed 68 % of its
samples under ``Runner.run`` (without --native), or 9 % under ``getpid`` (with it), though each
``getpid`` takes 0.1 us and a task makes three. With --native, py-spy stops the thread through
ptrace for each sample, and the stop lands at the return of the next system call far more often
than the time spent in that call warrants. For the C and kernel side, sample the run with
``perf record -e cpu-clock``.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from knarr.engine import event_loop

BENCH = Path(__file__).resolve().parent


async def _run(messages: int, max_executors: int, mode: str) -> None:
    sys.path.insert(0, str(BENCH))
    import persistent
    import workload

    from tests.services.kafka import ensure_kafka

    bootstrap = ensure_kafka()
    if mode == "persistent":
        figure, _ = await persistent.run_mode(bootstrap, "persistent", messages, max_executors)
    else:
        topic, ends = workload.prefill(bootstrap, messages)
        figure, _ = await workload.engine_run(bootstrap, topic, ends, max_executors)
    print(f"  (profiled run: {figure.rate:.0f} tasks/s, {figure.cpu_us:.0f} us CPU/task, sampled: rates are lower "
          "than unprofiled)", flush=True)


def _name(frame: str) -> str:
    return re.sub(r" \((.*?):\d+\)", r" (\1)", frame)


def summarize(raw: Path, top: int) -> None:
    own: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    inclusive: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    totals: collections.Counter = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        thread, frames = frames[0], frames[1:]
        if "MainThread" in thread:
            # Inside the loop's run (asyncio.Runner, under uvloop too), and not the topic pre-fill
            if not any("runners.py" in f for f in frames) or any("prefill" in f for f in frames):
                continue
            who = "event loop thread"
        elif any("spawner.py" in f for f in frames):
            who = "spawner thread"
        else:
            continue
        n = int(count)
        totals[who] += n
        own[who][_name(frames[-1])] += n
        for frame in {_name(f) for f in frames}:
            inclusive[who][frame] += n
    for who in ("event loop thread", "spawner thread"):
        if not totals[who]:
            continue
        print(f"\n{who}: {totals[who]} samples; top {top} by own samples")
        for frame, n in own[who].most_common(top):
            print(f"  {n / totals[who] * 100:5.1f}%  {frame}")
        print(f"{who}: knarr's functions by inclusive samples")
        shown = [(f, n) for f, n in inclusive[who].most_common() if "knarr/" in f][:top]
        for frame, n in shown:
            print(f"  {n / totals[who] * 100:5.1f}%  {frame}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--max-executors", type=int, default=2 * (os.cpu_count() or 1))
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--native", action="store_true",
                        help="sample C frames too (uvloop, libc, the collector); py-spy then pauses the worker "
                             "for each sample, so the run is slower")
    parser.add_argument("--mode", choices=("spawn", "persistent"), default="spawn",
                        help="spawn: a process per task (make bench's, bench/workload.py); persistent: bench/persistent.py's program")
    parser.add_argument("--run", action="store_true", help=argparse.SUPPRESS)  # the profiled child
    args = parser.parse_args()
    if args.run:
        event_loop.run(_run(args.messages, args.max_executors, args.mode))
        return 0
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "profile.txt"
        sampling = ["--native"] if args.native else ["--nonblocking"]  # py-spy takes one or the other
        subprocess.run([py_spy, "record", *sampling, "--threads", "--format", "raw", "--rate", "250",
                        "-o", str(raw), "--", sys.executable, __file__, "--run", "--messages", str(args.messages),
                        "--max-executors", str(args.max_executors), "--mode", args.mode], check=True)
        summarize(raw, args.top)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH.parent))
    sys.exit(main())
