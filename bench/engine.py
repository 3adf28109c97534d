"""Engine throughput and CPU cost per task, against the C spawn floor of the same binary (make bench).

The headline, from one run on one machine (the local Kafka broker, started or reused, and warmed
up by untimed engine runs until its CPU per task settles), for W1: one /bin/echo task per message,
one Kafka output per message, default settings:

  - the C spawn floor: the same spawns from C (bench/spawn_floor.c), max_executors at a time
  - spawn mode: the engine end to end (b below), and its ratio to the floor  target >= 0.9
  - the worker's CPU per task, children excluded (d below)                  target <= 150 us
  - the event loop's lag p99 under that full load (the worker's own probe, every 10 ms)
                                                                             target <= 5 ms
    and the same with each probe's wait for a CPU taken out (the loop's thread ready to run while
    other processes held the cores: observability/cpu_wait.py), which tells the loop's own lateness
    from the host's
  - persistent mode on the same workload (bench/persistent.py), over 5
    times the messages (--persistent-messages), so that its run lasts about as long as spawn mode's; and
    once more held to spawn mode's rate (each task waits in its program): what the event loop's
    bookkeeping costs per task at that pace, without a single spawn; and persistent mode's floor in
    Python (bench/python_floor.py): the same workload through the least any Python worker does, and
    that floor again with a request ahead per program (what sparing the programs' wake-ups is worth);
    and persistent mode with its programs polling stdin after each answer (knarr.task's poll_seconds)
  - the flight recorder's cost: throughput with debug off and on, alternating (bench/recorder.py)
                                                                             target <= 5 %

The machine is shared, and two runs of one thing spread by 10-40 % on a busy one: the two ratios are
read from rounds (--rounds, default 4). A round runs the C floor, (b) and persistent mode back to
back (the order alternating from round to round), so each round's ratios set like against like on
nearly the same machine; the verdict is the median of the rounds' ratios, printed with each round's
and a bootstrap interval of the median (bench/rounds.py); the round nearest the median is shown in
detail. (a) runs twice, before and after the diagnostics, and reads the better run.

Then the details:

  (a) raw spawn rate: ``knarr.engine.processes.run_process`` called directly — the engine's own
      spawn path (output capture, own session, reaping) — on /bin/echo, with max_executors
      concurrent spawns, through the native runner when it is built (executor.spawner: auto).
      This is the ceiling: nothing can run tasks faster through that path.
      For reference, the same through ``asyncio.create_subprocess_exec`` (stdout/stderr pipes,
      start_new_session, pidfd child watcher) is printed too, and the same spawns from C
      (bench/spawn_floor.c, when a C compiler is at hand): the parent's CPU per spawn there is
      the floor for (d) in any language.
  (b) end-to-end engine throughput on a pre-filled topic: Kafka in -> one /bin/echo task per
      message -> one Kafka output per message -> offsets committed. The Worker runs in this
      process; the clock runs from the first consumed batch to the commit of the last offset.
  (c) b / a
  (d) worker CPU per task, children excluded: getrusage(RUSAGE_SELF) (every thread of this
      process: event loop, spawner, consumer, producer, librdkafka) over the same interval / tasks.
      The local broker's CPU per task over the same interval is printed beside it (not in d), and
      the tasks' own processes' (getrusage(RUSAGE_CHILDREN): the runner reaps them in this process).
  Where the native runner is built, (a) and (b) run once more through the spawner thread
  (executor.spawner: thread), for the difference in the same run.

Then the same engine run, smaller, under cProfile: the top functions by own time (main thread).

    uv run python bench/engine.py [--messages 20000] [--spawns 10000] [--profile-messages 5000] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # for tests.services.kafka (broker start and topic helpers)
sys.path.insert(0, str(REPO_ROOT / "bench"))  # for the modules below, shared with the other benches

import persistent  # noqa: E402
from ceilings import ceiling, persistent_ceiling  # noqa: E402
from clocks import cpu_self  # noqa: E402
from knarr.engine import event_loop, native  # noqa: E402
from knarr.engine.processes import run_process  # noqa: E402
from knarr.observability.loop_lag import LoopLagProbe  # noqa: E402
from recorder import measure_recorder_overhead  # noqa: E402
from results import add_option as add_json_option  # noqa: E402
from results import write as write_results  # noqa: E402
from rounds import host_pace, judged, nearest_median, pace_text, places, verdict  # noqa: E402
from spawn_floor import c_spawn_floor  # noqa: E402
from workload import (BINARY, LAG_PROBE_SECONDS, PARTITIONS, TASK_ENV, WARM_UP_HELP, Figure,  # noqa: E402
                      engine_run, prefill, warm_up)

from tests.services.kafka import ensure_kafka  # noqa: E402

TARGET_PERSISTENT_RATIO = persistent.TARGET_RATIO
TARGET_FLOOR_RATIO = 0.9
TARGET_CPU_US = 150.0
TARGET_LAG_P99_MS = 5.0
POLL_US = 2000  # the polling row: knarr.task's poll_seconds, 2 ms


# --- (a) the raw spawn path ----------------------------------------------------------------
async def spawn_rate(count: int, concurrency: int, runner: native.NativeRunner | None = None) -> Figure:
    """BINARY through run_process, ``concurrency`` at a time, as the pool would run it; the loop's lag meanwhile.

    Through the native runner when one is given, else through the spawner thread.
    """
    remaining = count

    async def lane() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            outcome = await run_process([BINARY], stdin=None, env=TASK_ENV, timeout=30, runner=runner)
            assert outcome.exit_code == 0, outcome

    await asyncio.gather(*(lane() for _ in range(concurrency)))  # warm-up: imports, first forks
    remaining = count
    probe = LoopLagProbe(interval=LAG_PROBE_SECONDS, stall_seconds=float("inf"))
    probe.samples, probe.starved = [], []
    watching = asyncio.create_task(probe.run())
    started, cpu = time.perf_counter(), cpu_self()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    figure = Figure(count, time.perf_counter() - started, cpu_self() - cpu, lag_samples=probe.samples,
                    starved_samples=probe.starved)
    watching.cancel()
    return figure


async def asyncio_spawn_rate(count: int, concurrency: int) -> Figure:
    """The same through asyncio.create_subprocess_exec (the engine's former path), for reference."""
    if hasattr(os, "pidfd_open") and sys.version_info < (3, 12):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            watcher = asyncio.PidfdChildWatcher()
            watcher.attach_loop(asyncio.get_running_loop())
            asyncio.set_child_watcher(watcher)
    remaining = count

    async def lane() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            proc = await asyncio.create_subprocess_exec(
                BINARY, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True, env=TASK_ENV,
            )
            await proc.communicate()
            assert proc.returncode == 0

    started, cpu = time.perf_counter(), cpu_self()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return Figure(count, time.perf_counter() - started, cpu_self() - cpu)


# --- report --------------------------------------------------------------------------------
async def persistent_row(bootstrap: str, messages: int, max_executors: int, delay_us: float = 0.0,
                         poll_us: float = 0.0) -> Figure:
    """Persistent mode on the same workload, through bench/persistent.py.
    ``delay_us``: each task first sleeps that long in its program (bench/echo_task.py --delay-us).
    ``poll_us``: the program looks for its next request that long before blocking (--poll-us)."""
    figure, _programs_cpu = await persistent.run_mode(bootstrap, "persistent", messages, max_executors,
                                                      delay_us=delay_us, poll_us=poll_us)
    return figure


async def python_floor_row(bootstrap: str, messages: int, max_executors: int, ahead: int = 1) -> Figure:
    """Persistent mode's floor in Python on the same workload (bench/python_floor.py, through
    bench/persistent.py); ``ahead``: requests a program may have at once."""
    return await persistent.python_floor(bootstrap, messages, max_executors, ahead)


@dataclass
class Round:
    """One round of the headline runs, back to back: the C floor, spawn mode (b), persistent mode."""

    floor: Figure | None
    b: Figure
    kept: Figure | None

    @property
    def floor_ratio(self) -> float | None:
        return self.b.rate / self.floor.rate if self.floor is not None else None

    @property
    def kept_ratio(self) -> float | None:
        return self.kept.rate / self.b.rate if self.kept is not None else None


async def run_round(number: int, total: int, bootstrap: str, topic: str, ends: dict[int, int],
                    args: argparse.Namespace, persistent_messages: int) -> Round:
    """The C floor, spawn mode (b) and persistent mode, back to back: in that order in odd rounds, the other
    way round in even ones, so that a drift of the machine over the bench weighs on each side alike."""
    figures: dict[str, Figure | None] = {}

    async def floor() -> None:
        print(f"round {number} of {total}: the same spawns from C (the floor) ...", file=sys.stderr)
        figures["floor"] = c_spawn_floor(args.spawns, args.max_executors)

    async def spawn_mode() -> None:
        print(f"round {number} of {total}: (b) engine end to end ...", file=sys.stderr)
        figures["b"] = (await engine_run(bootstrap, topic, ends, args.max_executors))[0]

    async def persistent_mode() -> None:
        figures["kept"] = None
        if persistent_messages:
            print(f"round {number} of {total}: persistent mode, same workload ...", file=sys.stderr)
            figures["kept"] = await persistent_row(bootstrap, persistent_messages, args.max_executors)

    steps = [floor, spawn_mode, persistent_mode]
    for step in steps if number % 2 else reversed(steps):
        await step()
    return Round(figures["floor"], figures["b"], figures["kept"])


def report(args: argparse.Namespace, rounds: list[Round], spawns: list[Figure], a_ref: Figure,
           b_unpaused: Figure | None, a_thread: Figure | None = None, b_thread: Figure | None = None,
           paced: Figure | None = None, least: Figure | None = None, polled: Figure | None = None,
           paces: list[float] | None = None, warmed: str = "", ahead: Figure | None = None) -> dict:
    """The figures, printed; returns them as data (--json). The two ratios are read from rounds (a C floor,
    spawn mode and persistent mode back to back): the median of the rounds' ratios is the verdict, a
    bootstrap interval beside it; the round nearest that median is shown in detail. (a) ran twice, before
    and after the diagnostics, and reads the better run."""
    a = max(spawns, key=lambda f: f.rate)  # the machine is shared: the better of two runs is the ceiling
    figures: dict = {
        "cpus": os.cpu_count(), "max_executors": args.max_executors, "messages": args.messages, "pace_ns": paces,
        "rounds": [{"floor": _data(r.floor), "spawn": r.b.data(), "persistent": _data(r.kept)} for r in rounds],
        "spawns": [f.data() for f in spawns], "asyncio_spawns": a_ref.data(), "spawn_unpaused": _data(b_unpaused),
        "spawns_thread": _data(a_thread), "spawn_thread": _data(b_thread), "paced": _data(paced),
        "python_floor": _data(least), "python_floor_ahead": _data(ahead), "polled": _data(polled)}
    messages = args.messages
    print(f"\nengine bench: {os.cpu_count()} cores, max_executors={args.max_executors}, binary={BINARY}, "
          f"{messages} messages on {PARTITIONS} partitions, {len(rounds)} rounds, python {sys.version.split()[0]}, "
          f"load average {os.getloadavg()[0]:.2f}")
    if paces:
        print(f"  the host's pace for interpreted code, before and after the rounds: {pace_text(paces)}")
    if warmed:
        print(f"  {warmed}")
    print(f"  {'figure':58}{'value':>14}  {'target':>10}  verdict")
    floored = [r for r in rounds if r.floor is not None]
    shown = floored[nearest_median([r.floor_ratio for r in floored])] if floored else \
        rounds[nearest_median([r.b.rate for r in rounds])]
    floor, b = shown.floor, shown.b
    if floored:
        ratios = [r.floor_ratio for r in floored]
        print(f"  {'the rounds: C spawn floor / spawn mode, end to end (b)':58}"
              f"{', '.join(f'{r.floor.rate:.0f} / {r.b.rate:.0f}' for r in floored)}  /s")
        figures["spawn_over_floor"] = judged(f"spawn mode / C floor: the median of {len(ratios)} rounds", ratios,
                                             TARGET_FLOOR_RATIO, 2, "", format(TARGET_FLOOR_RATIO, "g"))
        figures["spawn_over_floor"]["nearest_median_round"] = [r is shown for r in rounds].index(True)
        print(f"  {'    the round nearest the median: C floor, spawn mode':58}{floor.rate:>6.0f}, {b.rate:.0f} /s")
    else:
        print(f"  {'spawn mode: engine end to end (b), the rounds':58}{', '.join(f'{r.b.rate:.0f}' for r in rounds)}  /s"
              "  (no C compiler: no floor)")
    if b_thread is not None:
        print(f"  {'    the same with executor.spawner: thread':58}{b_thread.rate:>10.0f} /s  "
              f"({b_thread.cpu_us:.0f} us CPU/task; native runner: {b.cpu_us - b_thread.cpu_us:+.0f} us)")
    figures["spawn_over_floor_apart"] = ceiling(floor, b)
    cpu_us = statistics.median(r.b.cpu_us for r in rounds)
    figures["worker_cpu_us"] = {"median": cpu_us, "target": TARGET_CPU_US, "met": cpu_us <= TARGET_CPU_US}
    print(f"  {'worker CPU per task, children excluded (d), median':58}"
          f"{cpu_us:>10.{places(cpu_us, TARGET_CPU_US, 0)}f} us  "
          f"{'<= ' + format(TARGET_CPU_US, 'g') + ' us':>10}  {verdict(figures['worker_cpu_us']['met'])}")
    probed = [r.b for r in rounds if r.b.lag_p99_ms is not None]
    if probed:
        worst = max(b.lag_p99_ms for b in probed)
        figures["lag_p99_ms"] = {"worst": worst, "target": TARGET_LAG_P99_MS, "met": worst <= TARGET_LAG_P99_MS}
        print(f"  {'event loop lag p99 under full load, the worst round':58}"
              f"{worst:>10.{places(worst, TARGET_LAG_P99_MS, 1)}f} ms  "
              f"{'<= ' + format(TARGET_LAG_P99_MS, 'g') + ' ms':>10}  {verdict(figures['lag_p99_ms']['met'])}")
        if all(b.own_lag_p99_ms is not None for b in probed):  # the loop thread's waits for a CPU, measured
            own = max(b.own_lag_p99_ms for b in probed)
            figures["lag_p99_ms"]["own_worst"] = own
            pairs = ", ".join(f"{b.lag_p99_ms:.1f} / {b.own_lag_p99_ms:.1f}" for b in probed)
            print(f"  {'    the same less its waits for a CPU (other processes)':58}{own:>10.1f} ms  "
                  f"(each round, with / less: {pairs})")
    kept_rounds = [r for r in rounds if r.kept is not None]
    if kept_rounds:
        ratios = [r.kept_ratio for r in kept_rounds]
        chosen = kept_rounds[nearest_median(ratios)]
        kept, spawned = chosen.kept, chosen.b
        print(f"  {f'the rounds: persistent ({kept.count} messages) / spawn mode':58}"
              f"{', '.join(f'{r.kept.rate:.0f} / {r.b.rate:.0f}' for r in kept_rounds)}  /s")
        figures["persistent_over_spawn"] = judged(f"persistent / spawn mode: the median of {len(ratios)} rounds",
                                                  ratios, TARGET_PERSISTENT_RATIO, 1, "x",
                                                  f"{TARGET_PERSISTENT_RATIO:g}x")
        figures["persistent_over_spawn"]["nearest_median_round"] = [r is chosen for r in rounds].index(True)
        print(f"  {'    the round nearest the median: persistent, spawn mode':58}{kept.rate:>6.0f}, {spawned.rate:.0f} /s")
        print(f"  {'    worker CPU per task, persistent mode':58}{kept.cpu_us:>10.0f} us")
        figures["persistent_over_spawn_apart"] = persistent_ceiling(kept, spawned)
        if paced is not None and paced.loop_cpu_seconds and kept.loop_cpu_seconds:
            print(f"  {'    persistent mode paced to spawn mode (tasks wait, asleep)':58}{paced.rate:>10.0f} /s")
            print(f"  {'    its event loop CPU per task, against at full speed':58}"
                  f"{paced.loop_us:>10.0f} us  ({kept.loop_us:.0f} us; spawn mode's: {spawned.loop_us:.0f} us)")
        if polled is not None:
            print(f"  {'    its programs polling stdin, then blocking (poll_seconds)':58}{polled.rate:>10.0f} /s  "
                  f"= {polled.rate / spawned.rate:.1f} x spawn mode, {polled.cpu_us:.0f} us CPU/task")
            print(f"  {'    the loop, the program: CPU per task, polling against not':58}"
                  f"{polled.loop_us:>6.0f}, {polled.children_us:.0f} us  ({kept.loop_us:.0f}, {kept.children_us:.0f} us)")
        if least is not None:
            print(f"  {'    the Python floor: no engine (bench/python_floor.py)':58}{least.rate:>10.0f} /s  "
                  f"= {least.rate / spawned.rate:.1f} x spawn mode, {least.cpu_us:.0f} us CPU/task")
            print(f"  {'    persistent mode / the Python floor':58}{kept.rate / least.rate:>14.2f}  "
                  f"({kept.cpu_us / least.cpu_us:.1f} x its CPU per task)")
        if least is not None and ahead is not None:
            print(f"  {'    the Python floor, a request ahead per program':58}{ahead.rate:>10.0f} /s  "
                  f"= {ahead.rate / least.rate:.2f} x the floor, {ahead.cpu_us:.0f} us CPU/task, "
                  f"its programs {ahead.children_us:.0f} us ({least.children_us:.0f} us)")
    else:
        why = "(skipped: --skip-persistent)" if args.skip_persistent else "(bench/persistent.py not present)"
        print(f"  {'persistent mode':58}{why:>14}")
    print("  details:")
    print(f"  {'(a) raw spawn rate, run_process (the better of two runs)':58}{a.rate:>10.0f} /s")
    print(f"  {'    the two runs':58}{' / '.join(f'{f.rate:.0f}' for f in spawns):>14}")
    print(f"  {'    parent CPU per spawn, run_process':58}{a.cpu_us:>10.0f} us")
    if a_thread is not None:
        print(f"  {'    the same through the spawner thread':58}{a_thread.rate:>10.0f} /s  "
              f"({a_thread.cpu_us:.0f} us CPU/spawn)")
    print(f"  {'    event loop lag p99 while spawning':58}"
          f"{(a.lag_p99_ms if a.lag_p99_ms is not None else float('nan')):>10.1f} ms")
    print(f"  {'    reference: asyncio.create_subprocess_exec':58}{a_ref.rate:>10.0f} /s")
    print(f"  {'    parent CPU per spawn, asyncio subprocess':58}{a_ref.cpu_us:>10.0f} us")
    if floor is not None:
        print(f"  {'    parent CPU per spawn from C':58}{floor.cpu_us:>10.0f} us")
    if b_unpaused is not None:
        print(f"  {'    diagnostic: b with the backpressure pause out of reach':58}{b_unpaused.rate:>10.0f} /s"
              f"  (b/a {b_unpaused.rate / a.rate:.2f}, {b_unpaused.cpu_us:.0f} us/task)")
    print(f"  {'(c) b / a':58}{b.rate / a.rate:>14.2f}")
    print(f"  {'    reference: b / asyncio.create_subprocess_exec rate':58}{b.rate / a_ref.rate:>14.2f}")
    print(f"  {'    of (d), the event loop thread':58}{b.loop_us:>10.0f} us")
    print(f"  {'    of (d), librdkafka (consumer, producer threads)':58}{b.kafka_cpu_seconds / b.count * 1e6:>10.0f} us")
    against = f"  (the C floor's parent: {floor.cpu_us:.0f} us a spawn)" if floor is not None else ""
    print(f"  {'    of (d), the native runner (spawning, capturing, reaping)':58}"
          f"{b.runner_cpu_seconds / b.count * 1e6:>10.0f} us{against}")
    other = b.cpu_seconds - b.loop_cpu_seconds - b.kafka_cpu_seconds - b.runner_cpu_seconds
    print(f"  {'    of (d), the rest (other threads)':58}{other / b.count * 1e6:>10.0f} us")
    if b.broker_us is not None:
        print(f"  {'    not in (d): the local broker (JVM), per task':58}{b.broker_us:>10.0f} us")
    print(f"      ({b.count} tasks in {b.seconds:.2f}s, {b.cpu_seconds:.2f} CPU-s of the worker process; "
          f"spawns: {a.count} in {a.seconds:.2f}s)")
    return figures


def _data(figure: Figure | None) -> dict | None:
    return None if figure is None else figure.data()


def profile_report(profiler: cProfile.Profile, tasks: int, top: int) -> None:
    for title, restriction in (("all functions", ()), ("knarr's own code", ("/knarr/",))):
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats("tottime").print_stats(*restriction, top)
        print(f"\nprofile: {tasks} tasks through the in-process engine (cProfile, main thread), "
              f"top {top} by own time, {title}:")
        lines = out.getvalue().splitlines()
        start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls"))
        for line in lines[start:start + top + 1]:
            print("  " + line.replace(str(REPO_ROOT) + "/", "").replace(sys.prefix + "/", ""))


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000, help="messages (= tasks) for (b) and (d)")
    parser.add_argument("--persistent-messages", type=int, default=0,
                        help="messages for persistent mode's rows and the Python floor (default 0: 5 x --messages). "
                             "Persistent mode runs the same messages about 8 times faster than spawn mode; over "
                             "the same count its run would last about a second, and what every run pays once "
                             "(the first poll's fetch, the wait for the last commit's answer, 0.1-0.2 s) would "
                             "weigh on it about 8 times as much as on spawn mode's")
    parser.add_argument("--spawns", type=int, default=10_000, help="processes spawned for (a)")
    parser.add_argument("--max-executors", type=int, default=2 * (os.cpu_count() or 1))
    parser.add_argument("--rounds", type=int, default=4,
                        help="rounds of the C floor, spawn mode (b) and persistent mode back to back, their order "
                             "alternating; each round gives the two ratios, and the verdicts read their medians")
    parser.add_argument("--profile-messages", type=int, default=5_000, help="0: skip the profiled run")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--skip-unpaused", action="store_true",
                        help="skip the diagnostic run of (b) with the backpressure pause out of reach")
    parser.add_argument("--skip-persistent", action="store_true", help="skip persistent mode's row")
    parser.add_argument("--recorder-messages", type=int, default=8_000,
                        help="messages per run of the flight recorder's off/on comparison (0: skip it)")
    parser.add_argument("--warm-up-messages", type=int, default=4_000, help=WARM_UP_HELP + "; at most --messages")
    parser.add_argument("--bootstrap", default="", help="Kafka bootstrap; default: start or reuse the local broker")
    add_json_option(parser)
    args = parser.parse_args()

    bootstrap = args.bootstrap or ensure_kafka()
    if args.rounds < 1:
        parser.error(f"--rounds must be 1 or more, got {args.rounds}")
    print("pre-filling topics ...", file=sys.stderr)
    round_topics = [prefill(bootstrap, args.messages) for _ in range(args.rounds)]
    runner = native.for_config("auto")  # spawn mode's default: None where the native runner is not built
    thread_topic, thread_ends = prefill(bootstrap, args.messages) if runner is not None else ("", {})
    unpaused_topic, unpaused_ends = prefill(bootstrap, args.messages) if not args.skip_unpaused else ("", {})
    profile_topic, profile_ends = prefill(bootstrap, args.profile_messages) if args.profile_messages else ("", {})
    warmed = await warm_up(bootstrap, min(args.warm_up_messages, args.messages), args.max_executors)
    many = 0
    if not args.skip_persistent:
        many = persistent.persistent_count(args.messages, args.persistent_messages)

    paces = host_pace()
    rounds = [await run_round(1, args.rounds, bootstrap, *round_topics[0], args, many)]
    first = rounds[0]
    print("(a) raw spawn rate ...", file=sys.stderr)
    spawns = [await spawn_rate(args.spawns, args.max_executors, runner)]
    a_thread = b_thread = None
    if runner is not None:
        print("    (a) and (b) through the spawner thread ...", file=sys.stderr)
        a_thread = await spawn_rate(args.spawns, args.max_executors)
        b_thread, _ = await engine_run(bootstrap, thread_topic, thread_ends, args.max_executors,
                                       executor={"spawner": "thread"})
    b_unpaused = None
    if not args.skip_unpaused:
        print("    diagnostic: (b) with the backpressure pause out of reach ...", file=sys.stderr)
        never = {"backpressure_high_multiplier": args.messages + 1, "backpressure_low_multiplier": 4}
        b_unpaused, _ = await engine_run(bootstrap, unpaused_topic, unpaused_ends, args.max_executors, executor=never)
    print("    reference: asyncio subprocess spawn rate ...", file=sys.stderr)
    a_ref = await asyncio_spawn_rate(args.spawns, args.max_executors)
    paced = least = polled = ahead = None
    if first.kept is not None:
        # Held to spawn mode's rate: each task sleeps in its program for what a slot's turn takes at
        # that rate beyond what it takes at full speed. No process is spawned, so the event loop's CPU
        # per task is what the same bookkeeping costs at that pace (a loop that sleeps between tasks
        # wakes to cold caches, and pays for it on every task).
        print("    persistent mode paced to spawn mode's rate ...", file=sys.stderr)
        wait = max(0.0, args.max_executors / first.b.rate - args.max_executors / first.kept.rate)
        paced = await persistent_row(bootstrap, max(1, args.messages // 2), args.max_executors, wait * 1e6)
        # knarr.task's poll_seconds: after each answer the program looks for its next request before it
        # blocks, so the loop's write of a request wakes nobody (docs/performance.md says what that costs).
        print(f"    persistent mode, its programs polling stdin for {POLL_US / 1000:g} ms ...", file=sys.stderr)
        polled = await persistent_row(bootstrap, many, args.max_executors, poll_us=POLL_US)
        print("    persistent mode's floor in Python, same workload ...", file=sys.stderr)
        least = await python_floor_row(bootstrap, many, args.max_executors)
        # The engine gives a program one request at a time, so each request wakes the program it goes to
        # (docs/performance.md, "The write that wakes a program"); with the next one already in its stdin
        # a busy program finds it there. What that is worth where nothing else costs anything:
        print("    the same floor, a request ahead per program ...", file=sys.stderr)
        ahead = await python_floor_row(bootstrap, many, args.max_executors, ahead=2)
    print("(a) raw spawn rate, again ...", file=sys.stderr)
    spawns.append(await spawn_rate(args.spawns, args.max_executors, runner))
    for number in range(2, args.rounds + 1):
        rounds.append(await run_round(number, args.rounds, bootstrap, *round_topics[number - 1], args, many))
    paces += host_pace()
    figures = report(args, rounds, spawns, a_ref, b_unpaused, a_thread, b_thread, paced, least, polled, paces,
                     warmed, ahead)

    if args.recorder_messages:
        print("flight recorder off and on, alternating (bench/recorder.py) ...", file=sys.stderr)
        overhead = await measure_recorder_overhead(bootstrap, args.recorder_messages, max_executors=args.max_executors)
        print("\n" + overhead.report())
        figures["recorder"] = overhead.data()
    write_results(args.json, figures)

    if args.profile_messages:
        print("profiling ...", file=sys.stderr)
        profiler = cProfile.Profile()
        profiled, _ = await engine_run(bootstrap, profile_topic, profile_ends, args.max_executors, profiler)
        profile_report(profiler, profiled.count, args.top)
    return 0  # a MISS is a finding to read, not a crash


if __name__ == "__main__":
    sys.exit(event_loop.run(main()))  # the loop `knarr run` gives a worker
