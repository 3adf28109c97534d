"""Tiny tasks in spawn mode and in persistent mode: the same workload, the real engine and broker, one run.

The workload: N messages (default 20,000) on 4 partitions of a pre-filled topic -> one task per
message that echoes its argument -> one Kafka output per message (the echoed text) -> offsets
committed. Spawn mode runs ``/bin/echo`` per task; persistent mode runs bench/echo_task.py (a
Python program on the knarr.task SDK) in ``max_executors`` long-lived programs. The clock runs
from the first consumed batch to the commit of the last offset (bench/workload.py's TimedSource),
so persistent mode's figure includes starting its programs. First, untimed engine runs warm the
broker (``--warm-up-messages``, as make bench does: one just started would weigh on the first run).

Prints tasks/s of each mode, their ratio (target >= 10x), and the worker's CPU per task
(children excluded: in persistent mode the programs' own CPU is printed beside it). Then
persistent mode's floor in Python on the same workload (bench/python_floor.py: consume, frame,
answer, produce, commit in one plain loop, with the same programs), and the engine beside it.

Before that, the executor layer alone (no Kafka, no handler): ``max_executors`` lanes calling
the spawn path (``run_process``, /bin/echo) or the persistent pool (``ProgramPool.run``) back to
back — the ceiling each mode gives the engine — and the pool with tests/programs/echo_task.c,
a C program, for what the protocol costs without Python on the program's side.

After it, two more questions, each mode again:
- one task for many messages (``--per-task``, default 10 and 100): arrange() puts that many
  messages in one task (their names its arguments, one output each). Messages/s and worker CPU
  per message split the engine's cost into what each task costs and what each message costs.
- a worker per core (``--workers``, default the core count): that many worker processes at once,
  each on a topic of its own with its share of the messages and of ``max_executors``, as
  replicas one per core would run: does a second event loop lift a mode that one loop bounds, or
  do the cores bound it next? Its ratio of the two modes is read from rounds (``--rounds``, default 3:
  each mode once, back to back, the order alternating), as make bench reads its ratios (bench/rounds.py).

    python bench/persistent.py [--messages 20000] [--max-executors N] [--per-task 10,100] [--workers N] [--rounds 3]
                               [--warm-up-messages 4000]

Another bench calls :func:`compare` (it returns the figures) or :func:`run_mode`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import knarr  # noqa: E402
from ceilings import persistent_ceiling  # noqa: E402
from clocks import broker_between, cpu_self, stat_cpu_seconds  # noqa: E402
from echo_handler import EchoHandler  # noqa: E402
from knarr.config.loading import config_from_dict  # noqa: E402
from knarr.engine import event_loop  # noqa: E402
from knarr.engine.persistent import ProgramPool  # noqa: E402
from knarr.engine.processes import run_process  # noqa: E402
from knarr.engine.worker import Worker  # noqa: E402
from knarr.observability.logging import configure_logging  # noqa: E402
from python_floor import RESULT as FLOOR_RESULT  # noqa: E402
from rounds import host_pace, judged, nearest_median, pace_text, places, verdict  # noqa: E402
from spawn_floor import build_c  # noqa: E402
from workload import WARM_UP_HELP, Figure, TimedSource, engine_run, prefill, warm_up  # noqa: E402

from tests.services.kafka import create_topic, ensure_kafka, unique_name  # noqa: E402

TARGET_RATIO = 10.0  # persistent mode / spawn mode (make bench judges it too)
SPAWN_BINARY = "/bin/echo"
ECHO_PROGRAM = [sys.executable, str(BENCH / "echo_task.py")]
# Persistent mode runs this many times spawn mode's messages, so that its runs last about as long
# and what a run pays once (programs starting, the first fetch, the last commit) weighs alike.
PERSISTENT_RUN_FACTOR = 5


def persistent_count(messages: int, given: int = 0) -> int:
    """How many messages persistent mode's runs take: ``given``, or PERSISTENT_RUN_FACTOR x spawn mode's."""
    return given or PERSISTENT_RUN_FACTOR * messages


class BatchEchoHandler(knarr.BaseHandler[None, None]):
    """One echo task per ``per_task`` messages (their names as its arguments); one output per message."""

    def __init__(self, per_task: int) -> None:
        super().__init__()
        self.per_task = per_task

    async def arrange(self, messages, pending):
        chunks = [messages[i:i + self.per_task] for i in range(0, len(messages), self.per_task)]
        return [knarr.ExecutorTask(args=[f"{m.partition}:{m.offset}" for m in chunk],
                                   source_offsets=[m.offset for m in chunk]) for chunk in chunks]

    async def on_task_complete(self, result):
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(data={"echo": word}) for word in result.stdout.split()])


class MeasuredWorker(Worker):
    """TimedSource stops the worker at the last commit: read the programs' CPU before they are stopped."""

    programs_cpu: float | None = None

    def stop(self) -> None:
        if self.programs_cpu is None:
            self.programs_cpu = _programs_cpu_seconds(self)
        super().stop()


def _programs_cpu_seconds(worker: Worker) -> float:
    """CPU seconds the worker's live persistent programs have used so far."""
    total = 0.0
    for program in list(worker.executor.programs._live):
        try:
            total += stat_cpu_seconds(Path(f"/proc/{program.pid}/stat"))
        except OSError:
            continue
    return total


# --- the executor layer alone -------------------------------------------------------------------
async def _lanes(run_one, count: int, concurrency: int) -> Figure:
    remaining = count

    async def lane() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            outcome = await run_one()
            assert outcome.exit_code == 0, outcome

    started, cpu = time.perf_counter(), cpu_self()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return Figure(count, time.perf_counter() - started, cpu_self() - cpu)


async def executor_rates(count: int, concurrency: int) -> dict[str, Figure]:
    """Echo tasks through each mode's executor path, ``concurrency`` at a time; programs started beforehand."""
    configure_logging("WARNING")  # no Worker here to set the level: the pools' debug lines stay out of the report
    figures = {"spawn": await _lanes(lambda: run_process([SPAWN_BINARY, "x"], stdin=None, env=None, timeout=30),
                                     count, concurrency)}
    programs = {"persistent": ECHO_PROGRAM}
    tmp = tempfile.TemporaryDirectory()
    exe = build_c(BENCH.parent / "tests/programs/echo_task.c", Path(tmp.name) / "echo_task")
    if exe is not None:
        programs["persistent, C program"] = [str(exe)]
    task = knarr.ExecutorTask(args=["x"])
    for name, command in programs.items():
        config = config_from_dict({"executor": {"max_executors": concurrency, "persistent": {"command": command}},
                                   "sinks": {"filesystem": {"out": {"base_path": tmp.name}}}}).executor
        pool = ProgramPool(config, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        warm_up = 20 * concurrency  # starts the programs: the figure is their steady state
        await _lanes(lambda: pool.run(tuple(command), task, 30), warm_up, concurrency)
        figures[name] = await _lanes(lambda: pool.run(tuple(command), task, 30), count * 3, concurrency)
        await pool.close()
    tmp.cleanup()
    return figures


# --- the engine end to end --------------------------------------------------------------------
async def run_mode(bootstrap: str, mode: str, messages: int, max_executors: int,
                   per_task: int = 1, delay_us: float = 0.0, poll_us: float = 0.0) -> tuple[Figure, float | None]:
    """One engine run of the echo workload in ``mode`` (spawn | persistent); the figure, and the programs' CPU.

    The figure's ``children_cpu_seconds`` is the programs' CPU (their start included), and its
    ``broker_cpu_seconds`` the local broker's over the timed interval, when the broker is this checkout's.
    ``per_task`` > 1: one task per that many messages (BatchEchoHandler); the figure still counts tasks.
    ``delay_us``: persistent mode's program waits that long in each task (bench/echo_task.py --delay-us).
    ``poll_us``: it looks for its next request that long before blocking (--poll-us, knarr.task's poll_seconds).
    """
    figure, programs_cpu, _source = await run_worker(bootstrap, mode, *prefill(bootstrap, messages), max_executors,
                                                     per_task, delay_us, poll_us)
    return figure, programs_cpu


async def run_worker(bootstrap: str, mode: str, topic: str, ends: dict[int, int], max_executors: int,
                     per_task: int = 1, delay_us: float = 0.0, poll_us: float = 0.0,
                     recorder: bool = False) -> tuple[Figure, float | None, TimedSource]:
    """One worker over ``topic`` until every end offset is committed. ``recorder``: with the flight
    recorder on (the spec's defaults, a fresh ``db_dir`` removed afterwards)."""
    if recorder:
        with tempfile.TemporaryDirectory(prefix="knarr-bench-recorder-") as db_dir:
            return await _run_worker(bootstrap, mode, topic, ends, max_executors, per_task, delay_us, poll_us,
                                     {"enabled": True, "port": 0, "db_dir": db_dir})
    return await _run_worker(bootstrap, mode, topic, ends, max_executors, per_task, delay_us, poll_us, {})


async def _run_worker(bootstrap: str, mode: str, topic: str, ends: dict[int, int], max_executors: int,
                      per_task: int, delay_us: float, poll_us: float,
                      debug: dict) -> tuple[Figure, float | None, TimedSource]:
    executor: dict = {"binary_path": SPAWN_BINARY}
    if mode == "persistent":
        executor["persistent"] = {"command": ECHO_PROGRAM + (["--delay-us", f"{delay_us:.0f}"] if delay_us else [])
                                  + (["--poll-us", f"{poll_us:.0f}"] if poll_us else [])}
    handler = EchoHandler() if per_task == 1 else BatchEchoHandler(per_task)
    figure, worker = await engine_run(bootstrap, topic, ends, max_executors, executor=executor, debug=debug,
                                      handler=handler, worker_type=MeasuredWorker, name=f"bench-{mode}",
                                      lag_probe=False)
    programs_cpu = worker.programs_cpu if mode == "persistent" else None
    # Children: persistent mode's programs; none in spawn mode (this bench leaves the task processes out there)
    figure = dataclasses.replace(figure, children_cpu_seconds=programs_cpu or 0.0)
    return figure, programs_cpu, worker.source


# --- a worker per core ------------------------------------------------------------------------
async def run_workers(bootstrap: str, mode: str, messages: int, max_executors: int, workers: int) -> Figure:
    """``workers`` worker processes at once, as replicas one per core would run: each on a topic of
    its own with ``messages // workers`` of the workload and ``max_executors // workers`` slots, at
    least one (the same totals as one worker where they divide evenly, as 4 slots and 2 workers do;
    else a little less work and fewer slots). The figure spans the first worker's first batch to the
    last one's last commit; its CPU is the workers' own (their programs' in ``children_cpu_seconds``).
    """
    share, slots = messages // workers, max(1, max_executors // workers)
    topics = [prefill(bootstrap, share) for _ in range(workers)]
    children = [await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--one-worker", json.dumps({"bootstrap": bootstrap, "mode": mode, "topic": topic,
                                                                "ends": ends, "max_executors": slots}),
        stdout=asyncio.subprocess.PIPE) for topic, ends in topics]
    runs = []
    for child in children:
        out, _ = await child.communicate()
        lines = [line for line in out.decode().splitlines() if line.startswith(ONE_WORKER_RESULT)]
        if child.returncode != 0 or not lines:
            raise RuntimeError(f"a {mode} worker of the {workers}-worker run failed (exit {child.returncode}; "
                               "its log is above)")
        runs.append(json.loads(lines[-1][len(ONE_WORKER_RESULT):]))
    first = min(runs, key=lambda run: run["first_at"])
    last = max(runs, key=lambda run: run["done_at"])
    broker = broker_between(first["first_broker"], last["done_broker"])
    return Figure(sum(run["count"] for run in runs), last["done_at"] - first["first_at"],
                  sum(run["cpu_seconds"] for run in runs), sum(run["loop_cpu_seconds"] for run in runs),
                  children_cpu_seconds=sum(run["programs_cpu"] or 0.0 for run in runs), broker_cpu_seconds=broker)


ONE_WORKER_RESULT = "one-worker result: "


async def _one_worker(spec: dict) -> int:
    """A worker of run_workers, in its own process: one run, its figures on stdout."""
    ends = {int(partition): end for partition, end in spec["ends"].items()}
    figure, programs_cpu, source = await run_worker(spec["bootstrap"], spec["mode"], spec["topic"], ends,
                                                    spec["max_executors"])
    print(ONE_WORKER_RESULT + json.dumps({  # perf_counter is the system's monotonic clock: comparable across processes
        "count": figure.count, "first_at": source.first.at, "done_at": source.done.at,
        "cpu_seconds": figure.cpu_seconds, "loop_cpu_seconds": figure.loop_cpu_seconds,
        "programs_cpu": programs_cpu, "first_broker": source.first.broker, "done_broker": source.done.broker}),
        flush=True)
    return 0


async def python_floor(bootstrap: str, messages: int, max_executors: int, ahead: int = 1) -> Figure:
    """Persistent mode's floor in Python (bench/python_floor.py) on a fresh topic of the same workload,
    in a process of its own: what any Python worker pays at least, beside what the engine pays.
    ``ahead``: requests a program may have at once (2: its next one waits in its stdin)."""
    topic, ends = prefill(bootstrap, messages)
    output = unique_name("bench-python-floor-out")
    create_topic(bootstrap, output, 1)
    spec = {"bootstrap": bootstrap, "topic": topic, "ends": ends, "output": output, "slots": max_executors,
            "ahead": ahead}
    child = await asyncio.create_subprocess_exec(sys.executable, str(BENCH / "python_floor.py"), json.dumps(spec),
                                                 stdout=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(child.communicate(), 900)
    lines = [line for line in out.decode().splitlines() if line.startswith(FLOOR_RESULT)]
    if child.returncode != 0 or not lines:
        raise RuntimeError(f"bench/python_floor.py failed (exit {child.returncode}; its output is above)")
    run = json.loads(lines[-1][len(FLOOR_RESULT):])
    return Figure(run["count"], run["seconds"], run["cpu_seconds"], run["loop_cpu_seconds"],
                  children_cpu_seconds=run["programs_cpu"], broker_cpu_seconds=run["broker_cpu_seconds"])


async def compare(bootstrap: str, messages: int = 20_000, max_executors: int = 2 * (os.cpu_count() or 1),
                  persistent_messages: int = 0) -> dict:
    """Spawn mode, then persistent mode, on fresh topics of the same workload: the figures and the ratio;
    then persistent mode's floor in Python on the same workload. Persistent mode and the floor run
    ``persistent_messages`` (0: 5 x ``messages``), so that their runs last about as long as spawn mode's
    and what a run pays once weighs as little on them (make bench does the same)."""
    many = persistent_count(messages, persistent_messages)
    paces = host_pace()
    spawn, _ = await run_mode(bootstrap, "spawn", messages, max_executors)
    kept, programs_cpu = await run_mode(bootstrap, "persistent", many, max_executors)
    least = await python_floor(bootstrap, many, max_executors)
    paces += host_pace()
    return {"spawn": spawn, "persistent": kept, "programs_cpu_seconds": programs_cpu, "python_floor": least,
            "ratio": kept.rate / spawn.rate, "messages": messages, "max_executors": max_executors, "paces": paces}


def report_executor(figures: dict[str, Figure], concurrency: int) -> None:
    spawn = figures["spawn"]
    print(f"\nexecutor layer alone: {concurrency} lanes of echo tasks, load average {os.getloadavg()[0]:.2f}")
    print(f"  {'mode':44}{'tasks/s':>10}{'worker CPU/task':>18}{'vs spawn':>10}")
    for name, figure in figures.items():
        print(f"  {name:44}{figure.rate:>10.0f}{figure.cpu_us:>15.0f} us{figure.rate / spawn.rate:>9.1f}x")


def report(figures: dict) -> None:
    spawn, kept = figures["spawn"], figures["persistent"]
    print(f"\nend to end, Kafka -> task -> Kafka -> commit: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}, "
          f"max_executors={figures['max_executors']}, {figures['messages']} messages on 4 partitions "
          f"({figures['persistent'].count} in persistent mode and the floor), "
          f"one echo task each, python {sys.version.split()[0]}")
    print(f"  the host's pace for interpreted code, before and after: {pace_text(figures['paces'])}")
    print(f"  {'mode':44}{'tasks/s':>10}{'worker CPU/task':>18}")
    print(f"  {'spawn (' + SPAWN_BINARY + ' per task)':44}{spawn.rate:>10.0f}{spawn.cpu_us:>15.0f} us")
    print(f"  {'persistent (bench/echo_task.py, knarr.task)':44}{kept.rate:>10.0f}{kept.cpu_us:>15.0f} us")
    if figures["programs_cpu_seconds"] is not None:
        print(f"  {'    the programs themselves, per task':44}{'':>10}"
              f"{figures['programs_cpu_seconds'] / kept.count * 1e6:>15.0f} us")
    ratio = figures["ratio"]
    print(f"  {'persistent / spawn':44}{ratio:>9.{places(ratio, TARGET_RATIO, 1)}f}x   target >= {TARGET_RATIO:g}x  "
          f"{verdict(ratio >= TARGET_RATIO)}")
    print(f"      ({spawn.count} tasks in {spawn.seconds:.2f}s spawned; {kept.count} in {kept.seconds:.2f}s persistent)")
    persistent_ceiling(kept, spawn)
    report_floor(figures["python_floor"], kept, spawn)


def report_floor(least: Figure, kept: Figure, spawn: Figure) -> None:
    """Persistent mode's floor in Python beside the engine: how far the target is for a Python worker."""
    print(f"  {'the Python floor: no engine (bench/python_floor.py)':44}{least.rate:>10.0f}{least.cpu_us:>15.0f} us"
          f"   = {least.rate / spawn.rate:.1f}x spawn mode")
    print(f"  {'    its programs and the local broker, per task':44}{'':>10}"
          f"{least.children_us:>15.0f}, "
          + (f"{least.broker_us:.0f} us" if least.broker_us is not None else "-"))
    print(f"  {'    persistent mode / the Python floor':44}{kept.rate / least.rate:>9.2f}x tasks/s, "
          f"{kept.cpu_us / least.cpu_us:.1f}x worker CPU per task")


async def batched_rows(bootstrap: str, messages: int, max_executors: int,
                       sizes: list[int]) -> dict[tuple[str, int], Figure]:
    """Each mode again with one task per ``size`` messages: figures counting messages, not tasks."""
    rows = {}
    for mode in ("spawn", "persistent"):
        for size in sizes:
            figure, _ = await run_mode(bootstrap, mode, messages, max_executors, per_task=size)
            rows[(mode, size)] = Figure(messages, figure.seconds, figure.cpu_seconds, figure.loop_cpu_seconds)
    return rows


def report_batched(rows: dict[tuple[str, int], Figure], one: dict) -> None:
    """Messages/s when arrange() puts many messages in one task, beside one task per message."""
    print(f"\none task for many messages (arrange() batches them; one output per message), "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"  {'mode':20}{'messages per task':>18}{'messages/s':>12}{'tasks/s':>10}{'worker CPU/message':>21}"
          f"{'vs one per message':>20}")
    for mode in ("spawn", "persistent"):
        alone = one[mode]
        print(f"  {mode:20}{1:>18}{alone.rate:>12.0f}{alone.rate:>10.0f}{alone.cpu_us:>18.0f} us{1:>19.1f}x")
        for (row_mode, size), figure in rows.items():
            if row_mode == mode:
                print(f"  {mode:20}{size:>18}{figure.rate:>12.0f}{figure.rate / size:>10.0f}"
                      f"{figure.cpu_us:>18.0f} us{figure.rate / alone.rate:>19.1f}x")


def report_workers(rounds: list[dict[str, Figure]], one: dict, workers: int) -> None:
    """The per-core runs beside one worker's: what a replica per core gives each mode. The ratio of the
    two modes with a worker per core is read from rounds (each mode once, back to back): its median, a
    bootstrap interval beside it, and the round nearest the median in detail."""
    ratios = [figures["persistent"].rate / figures["spawn"].rate for figures in rounds]
    figures = rounds[nearest_median(ratios)]
    print(f"\na worker per core: {workers} workers at once, each on its own topic with 1/{workers} of the messages "
          f"({figures['spawn'].count} in spawn mode, {figures['persistent'].count} in persistent mode) and of "
          f"max_executors, {len(rounds)} rounds, load average {os.getloadavg()[0]:.2f}")
    print(f"  {'the rounds: persistent / spawn mode, tasks/s':50}"
          + ", ".join(f"{r['persistent'].rate:.0f} / {r['spawn'].rate:.0f}" for r in rounds))
    judged(f"persistent / spawn, {workers} workers each, median", ratios, TARGET_RATIO, 1, "x",
           f"{TARGET_RATIO:g}x", width=50)
    print("  the round nearest the median:")
    print(f"  {'mode':44}{'tasks/s':>10}{'worker CPU/task':>18}{'vs one worker':>15}{'machine busy':>14}")
    cores = os.cpu_count() or 1
    for mode, figure in figures.items():
        busy = figure.cpu_seconds + figure.children_cpu_seconds + (figure.broker_cpu_seconds or 0.0)
        children = "" if mode == "spawn" else " (programs included)"
        print(f"  {mode + ', ' + str(workers) + ' workers':44}{figure.rate:>10.0f}{figure.cpu_us:>15.0f} us"
              f"{figure.rate / one[mode].rate:>14.2f}x{busy / figure.seconds / cores:>13.0%}{children}")
    kept, many = figures["persistent"], f"{workers} workers"
    print(f"  {'persistent, ' + many + ' / spawn, one worker':44}{kept.rate / one['spawn'].rate:>9.1f}x")
    print("  (machine busy: the workers', their programs' and the local broker's CPU over the run, of all cores;"
          " spawn mode's task processes are not in it)")


async def per_core_rounds(bootstrap: str, counts: dict[str, int], max_executors: int, workers: int,
                          rounds: int) -> list[dict[str, Figure]]:
    """Each mode with a worker per core, ``rounds`` times, back to back, the order alternating."""
    done = []
    for number in range(1, rounds + 1):
        order = list(counts) if number % 2 else list(reversed(counts))
        print(f"a worker per core, round {number} of {rounds}: {workers} workers, {' then '.join(order)} mode ...",
              file=sys.stderr)
        figures = {mode: await run_workers(bootstrap, mode, counts[mode], max_executors, workers) for mode in order}
        done.append({mode: figures[mode] for mode in counts})
    return done


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--max-executors", type=int, default=2 * (os.cpu_count() or 1))
    parser.add_argument("--persistent-messages", type=int, default=0,
                        help="messages for the end-to-end persistent mode and the Python floor (0: 5 x --messages), "
                             "so that their runs last about as long as spawn mode's")
    parser.add_argument("--executor-tasks", type=int, default=3_000,
                        help="spawned tasks for the executor-layer figures (persistent modes run 3x as many)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="also run each mode with this many worker processes at once (a replica per core); "
                             "1: not")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the per-core runs (each mode once, back to back, the order alternating); "
                             "the ratio's verdict is the median of the rounds'")
    parser.add_argument("--per-task", default="10,100",
                        help="also run each mode with one task per this many messages (comma-separated sizes; "
                             "empty: not)")
    parser.add_argument("--warm-up-messages", type=int, default=4_000, help=WARM_UP_HELP + "; at most --messages")
    parser.add_argument("--bootstrap", default="", help="Kafka bootstrap; default: start or reuse the local broker")
    parser.add_argument("--one-worker", help=argparse.SUPPRESS)  # a process of the --workers runs
    args = parser.parse_args()
    try:
        sizes = [int(size) for size in args.per_task.split(",") if size.strip()]
    except ValueError:
        parser.error(f"--per-task takes whole numbers separated by commas (e.g. 10,100), got {args.per_task!r}")
    if any(size < 2 for size in sizes):
        parser.error(f"--per-task sizes must be 2 or more (1 is the main run), got {args.per_task!r}")
    if args.rounds < 1:
        parser.error(f"--rounds must be 1 or more, got {args.rounds}")
    if args.one_worker:
        configure_logging("WARNING")
        return await _one_worker(json.loads(args.one_worker))
    bootstrap = args.bootstrap or ensure_kafka()
    # The end-to-end runs below share the broker: a fresh one would weigh on the first of them.
    warmed = await warm_up(bootstrap, min(args.warm_up_messages, args.messages), args.max_executors)
    if warmed:
        print(warmed)
    print("executor layer alone ...", file=sys.stderr)
    report_executor(await executor_rates(args.executor_tasks, args.max_executors), args.max_executors)
    print("end to end, spawn mode then persistent mode ...", file=sys.stderr)
    figures = await compare(bootstrap, args.messages, args.max_executors, args.persistent_messages)
    report(figures)
    if sizes:
        print("one task for many messages, spawn mode then persistent mode ...", file=sys.stderr)
        report_batched(await batched_rows(bootstrap, args.messages, args.max_executors, sizes), figures)
    if args.workers > 1:
        counts = {"spawn": args.messages, "persistent": persistent_count(args.messages, args.persistent_messages)}
        report_workers(await per_core_rounds(bootstrap, counts, args.max_executors, args.workers, args.rounds),
                       figures, args.workers)
    return 0  # a MISS is a finding to read, not a crash


if __name__ == "__main__":
    sys.exit(event_loop.run(main()))  # the loop `knarr run` gives a worker
