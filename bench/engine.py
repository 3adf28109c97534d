"""Engine throughput and CPU cost per task, against the C spawn floor of the same binary (make bench).

The headline, from one run on one machine (the local Kafka broker, started or reused, and warmed
up by untimed engine runs until its CPU per task settles), for W1: one /bin/echo task per message,
one Kafka output per message, default settings:

  - the C spawn floor: the same spawns from C (bench/spawn_floor.c), max_executors at a time
  - spawn mode: the engine end to end (b below), and its ratio to the floor  target >= 0.9
  - the worker's CPU per task, children excluded (d below)                  target <= 150 us
  - the event loop's lag p99 under that full load (the worker's own probe, every 10 ms)
                                                                             target <= 5 ms
  - persistent mode on the same workload (bench/persistent.py), when that bench is present, over 5
    times the messages (--persistent-messages), so that its run lasts about as long as spawn mode's; and
    once more held to spawn mode's rate (each task waits in its program): what the event loop's
    bookkeeping costs per task at that pace, without a single spawn; and persistent mode's floor in
    Python (bench/python_floor.py): the same workload through the least any Python worker does; and
    persistent mode with its programs polling stdin after each answer (knarr.task's poll_seconds)
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

    uv run python bench/engine.py [--messages 20000] [--spawns 10000] [--profile-messages 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # for tests.services.kafka (broker start and topic helpers)
sys.path.insert(0, str(REPO_ROOT / "bench"))  # for persistent.py and recorder.py, the rows of the other modes

import knarr  # noqa: E402
from knarr.config.loading import config_from_dict  # noqa: E402
from knarr.config.models import ExecutorConfig  # noqa: E402
from knarr.engine import event_loop, native  # noqa: E402
from knarr.engine.environment import task_environment  # noqa: E402
from knarr.engine.processes import run_process  # noqa: E402
from knarr.engine.worker import Worker  # noqa: E402
from knarr.observability.loop_lag import LoopLagProbe  # noqa: E402
from knarr.sources.kafka import KafkaSource  # noqa: E402
from rounds import host_pace, judged, nearest_median, pace_text, places, verdict  # noqa: E402

from tests.services.kafka import create_topic, end_offsets, ensure_kafka, produce_json, unique_name  # noqa: E402

BINARY = "/bin/echo"
# What the engine gives each task by default (executor.env_inherit of this process's variables), and so
# what (a) and the C floor give theirs too: all three start the same process. It matters: with LANG set
# to a UTF-8 locale, /bin/echo loads that locale, 120-240 us more of its CPU here than with PATH alone.
TASK_ENV = task_environment(ExecutorConfig().env_inherit, os.environ, {})
PARTITIONS = 4
TARGET_FLOOR_RATIO = 0.9
TARGET_PERSISTENT_RATIO = 10.0  # persistent mode / spawn mode (bench/persistent.py reads it too)
TARGET_CPU_US = 150.0
TARGET_LAG_P99_MS = 5.0
LAG_PROBE_SECONDS = 0.01
POLL_US = 2000  # the polling row: knarr.task's poll_seconds, 2 ms


def cpu_self() -> float:
    """CPU seconds (user + system) of this process, all threads, children excluded."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_children() -> float:
    """CPU seconds of this process's children reaped so far (in spawn mode: the tasks' processes)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def stat_cpu_seconds(stat: Path) -> float:
    """utime + stime from a /proc stat file (a process's, or one thread's under task/); children not included."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_librdkafka() -> float:
    """CPU seconds of this process's librdkafka threads (named rdk:main, rdk:broker..., rdk:queue)."""
    total = 0.0
    for task in Path("/proc/self/task").iterdir():
        try:
            if (task / "comm").read_text().startswith("rdk:"):
                total += stat_cpu_seconds(task / "stat")
        except OSError:
            continue  # the thread ended meanwhile
    return total


def cpu_thread() -> float:
    """CPU seconds of the calling thread only (here: the event loop's)."""
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Figure:
    count: int
    seconds: float
    cpu_seconds: float
    loop_cpu_seconds: float = 0.0  # the event loop thread's share of cpu_seconds
    kafka_cpu_seconds: float = 0.0  # librdkafka's threads' share of cpu_seconds
    children_cpu_seconds: float = 0.0  # the processes the tasks ran in: spawned ones (reaped), or the programs
    broker_cpu_seconds: float | None = None  # the local broker's CPU over the same interval
    lag_samples: list[float] | None = None  # the event loop's lag, probed every LAG_PROBE_SECONDS

    @property
    def lag_p99_ms(self) -> float | None:
        if not self.lag_samples:
            return None
        ordered = sorted(self.lag_samples)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3

    @property
    def rate(self) -> float:
        return self.count / self.seconds

    @property
    def cpu_us(self) -> float:
        return self.cpu_seconds / self.count * 1e6

    @property
    def loop_us(self) -> float:
        """The event loop thread's CPU per task."""
        return self.loop_cpu_seconds / self.count * 1e6

    @property
    def children_us(self) -> float:
        """The task processes' (or programs') CPU per task."""
        return self.children_cpu_seconds / self.count * 1e6

    @property
    def broker_us(self) -> float | None:
        """The local broker's CPU per task, or None where it was not measured (not this checkout's broker)."""
        return None if self.broker_cpu_seconds is None else self.broker_cpu_seconds / self.count * 1e6


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
    probe.samples = []
    watching = asyncio.create_task(probe.run())
    started, cpu = time.perf_counter(), cpu_self()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    figure = Figure(count, time.perf_counter() - started, cpu_self() - cpu, lag_samples=probe.samples)
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


def spawn_floor_c(binary: str, count: int, concurrency: int, env: dict[str, str]) -> tuple[float, float, float] | None:
    """``binary`` spawned ``count`` times from C (bench/spawn_floor.c), ``concurrency`` at a time, each child with
    the environment ``env``: the parent's CPU per spawn in microseconds, spawns per second and the children's CPU per
    spawn; None without a C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "spawn_floor"
        subprocess.run([compiler, "-O2", "-o", str(exe), str(REPO_ROOT / "bench" / "spawn_floor.c")], check=True)
        out = subprocess.run([str(exe), binary, str(count), str(concurrency)], check=True, env=env,
                             capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1]), float(out[2])


def c_spawn_floor(count: int, concurrency: int) -> Figure | None:
    """The same spawns from C (bench/spawn_floor.c): what spawning costs a parent in any language."""
    measured = spawn_floor_c(BINARY, count, concurrency, TASK_ENV)
    if measured is None:
        return None
    cpu_us, rate, children_us = measured
    return Figure(count, count / rate, cpu_us * count / 1e6, children_cpu_seconds=children_us * count / 1e6)


def broker_cpu_seconds() -> float | None:
    """CPU seconds used so far by the local broker (the JVM), if it was started from this checkout."""
    try:
        pid = (REPO_ROOT / ".cache" / "kafka" / "broker.pid").read_text().strip()
        return stat_cpu_seconds(Path(f"/proc/{pid}/stat"))
    except (OSError, IndexError):
        return None


# --- (b) the engine end to end -------------------------------------------------------------
class TrueHandler(knarr.BaseHandler[None, None]):
    """One task (BINARY, no arguments) per message; one small Kafka output per message."""

    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(source_offsets=[m.offset], metadata={"p": m.partition, "o": m.offset})
                for m in messages]

    async def on_task_complete(self, result):
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(data=result.task.metadata)])


class TimedSource:
    """The Kafka source, with a clock: first consumed batch -> every end offset committed (then stop)."""

    def __init__(self, inner: KafkaSource, ends: dict[int, int]) -> None:
        self.inner = inner
        self.topic = inner.topic
        self.ends = ends
        self.committed: dict[int, int] = {}
        self.first_at: float | None = None
        self.first_cpu = self.first_loop_cpu = self.first_kafka_cpu = self.first_children_cpu = 0.0
        self.done_at: float | None = None
        self.done_cpu = self.done_loop_cpu = self.done_kafka_cpu = self.done_children_cpu = 0.0
        self.first_broker = self.done_broker = None
        self.first_lag = self.done_lag = 0
        self.worker: Worker | None = None
        self.events = 0  # what the flight recorder took, when it is on

    async def start(self, on_assign, on_revoke) -> None:
        await self.inner.start(on_assign, on_revoke)

    async def poll(self, max_records, commits):
        messages, done = await self.inner.poll(max_records, commits)
        if messages and self.first_at is None:
            self.first_at, self.first_cpu, self.first_loop_cpu = time.perf_counter(), cpu_self(), cpu_thread()
            self.first_kafka_cpu, self.first_children_cpu = cpu_librdkafka(), cpu_children()
            self.first_broker = broker_cpu_seconds()
            self.first_lag = self._lag_count()
        self._committed(done)
        return messages, done

    async def commit_now(self, commits):
        done = await self.inner.commit_now(commits)
        self._committed(done)
        return done

    def _committed(self, done: dict[int, int]) -> None:
        self.committed.update(done)
        if self.done_at is None and all(self.committed.get(p, 0) >= end for p, end in self.ends.items()):
            self.done_at, self.done_cpu, self.done_loop_cpu = time.perf_counter(), cpu_self(), cpu_thread()
            self.done_kafka_cpu, self.done_children_cpu = cpu_librdkafka(), cpu_children()
            self.done_broker = broker_cpu_seconds()
            self.done_lag = self._lag_count()
            if self.worker is not None:
                if self.worker.recorder is not None:
                    self.events = self.worker.recorder.describe()["events"]
                self.worker.stop()

    def _lag_count(self) -> int:
        samples = self.worker.loop_lag.samples if self.worker is not None else None
        return len(samples) if samples is not None else 0

    def lag_samples(self) -> list[float] | None:
        samples = self.worker.loop_lag.samples if self.worker is not None else None
        return None if samples is None else samples[self.first_lag:self.done_lag]

    def set_paused(self, partitions) -> None:
        self.inner.set_paused(partitions)

    def lag(self):
        return self.inner.lag()

    @property
    def high_watermarks(self) -> dict[int, int]:  # the debug server's overview reads these
        return getattr(self.inner, "high_watermarks", {})

    @property
    def committed_offsets(self) -> dict[int, int]:
        return dict(self.committed)

    @property
    def finished(self) -> bool:
        return False

    async def close(self) -> None:
        await self.inner.close()


def prefill(bootstrap: str, count: int) -> tuple[str, dict[int, int]]:
    topic = unique_name("bench-engine")
    create_topic(bootstrap, topic, PARTITIONS)
    produce_json(bootstrap, topic, ({"i": i} for i in range(count)), key_fn=lambda r: str(r["i"]))
    return topic, end_offsets(bootstrap, topic)


async def engine_run(bootstrap: str, topic: str, ends: dict[int, int], max_executors: int,
                     profiler: cProfile.Profile | None = None, executor: dict | None = None) -> tuple[Figure, Worker]:
    output = unique_name("bench-engine-out")
    create_topic(bootstrap, output, 1)
    config = config_from_dict({
        "kafka": {"brokers": bootstrap, "source_topic": topic, "consumer_group": unique_name("bench-engine-g"),
                  "session_timeout_ms": 6000, "heartbeat_interval_ms": 500},
        "executor": {"binary_path": BINARY, "max_executors": max_executors, "task_timeout_seconds": 30,
                     **(executor or {})},
        "sinks": {"kafka": {"out": {"topic": output}}},
        "metrics": {"enabled": False},
        "logging": {"level": "WARNING", "format": "json"},
    })
    source = TimedSource(KafkaSource(config.kafka, config.executor, client_id="bench-engine"), ends)
    worker = Worker(config, TrueHandler(), source=source)
    worker.loop_lag.interval = LAG_PROBE_SECONDS
    worker.loop_lag.samples = []
    source.worker = worker
    if profiler is not None:
        profiler.enable()
    try:
        code = await asyncio.wait_for(worker.run(), 900)
    finally:
        if profiler is not None:
            profiler.disable()
    if code != 0 or source.first_at is None or source.done_at is None:
        raise RuntimeError(f"engine run did not finish cleanly (exit {code}); committed {source.committed}, ends {ends}")
    tasks = worker.stats.tasks
    broker = None
    if source.first_broker is not None and source.done_broker is not None:
        broker = source.done_broker - source.first_broker
    figure = Figure(tasks, source.done_at - source.first_at, source.done_cpu - source.first_cpu,
                    source.done_loop_cpu - source.first_loop_cpu, source.done_kafka_cpu - source.first_kafka_cpu,
                    source.done_children_cpu - source.first_children_cpu, broker_cpu_seconds=broker,
                    lag_samples=source.lag_samples())
    return figure, worker


WARM_UP_RUNS = 6  # at most
WARM_UP_SETTLED = 0.75  # the broker's CPU per task fell by less than a quarter from one run to the next


async def warm_broker(bootstrap: str, messages: int, max_executors: int) -> list[float | None]:
    """Untimed engine runs of ``messages`` until the local broker's CPU per task stops falling by a
    quarter or more from one run to the next (at most WARM_UP_RUNS); its CPU per task in each run.

    A broker just started is still compiling its hot paths: `make bench` right after `kafka.sh up`
    once cost the broker 322 us per spawn-mode task, against 66 us in the next run, and after one
    warm-up run of 4,000 messages still 208 us in its rounds, against 30 us an hour later. `make bench`
    starts the broker when none runs, so a first run on a fresh machine is always such a run. Right
    after a start these runs measured 353, 132 and 127 us, and the round shown after them 56 us: the
    broker goes on warming slowly, but no longer weighs four times its steady cost. On a warm broker:
    two runs (47, 45 us). One run where the broker is not this checkout's (no CPU to read).
    """
    warmed: list[float | None] = []
    for run in range(1, WARM_UP_RUNS + 1):
        print(f"warm-up {run}: {messages} messages through the engine, untimed ...", file=sys.stderr)
        figure, _ = await engine_run(bootstrap, *prefill(bootstrap, messages), max_executors)
        warmed.append(figure.broker_us)
        if warmed[-1] is None or (len(warmed) > 1 and warmed[-1] > WARM_UP_SETTLED * warmed[-2]):
            break
    return warmed


async def warm_up(bootstrap: str, messages: int, max_executors: int) -> str:
    """warm_broker's runs of ``messages`` (none when it is 0 or less), told for a bench's header: how
    many, of how many messages, the broker's CPU per task in each; "" when none ran."""
    if messages <= 0:
        return ""
    warmed = await warm_broker(bootstrap, messages, max_executors)
    each = ", ".join("not measured" if us is None else f"{us:.0f} us" for us in warmed)
    return f"warm-up: {len(warmed)} untimed run(s) of {messages} messages; the broker's CPU per task in each: {each}"


WARM_UP_HELP = ("messages of each untimed engine run before the timed ones (0: none); runs go on until the local "
                "broker's CPU per task settles (a broker just started is still compiling its hot paths), at most 6")


# --- report --------------------------------------------------------------------------------
async def persistent_row(bootstrap: str, messages: int, max_executors: int, delay_us: float = 0.0,
                         poll_us: float = 0.0) -> Figure | None:
    """Persistent mode on the same workload, through bench/persistent.py; None where that bench is absent.
    ``delay_us``: each task first sleeps that long in its program (bench/echo_task.py --delay-us).
    ``poll_us``: the program looks for its next request that long before blocking (--poll-us)."""
    try:
        import persistent
    except ImportError:
        return None
    figure, _programs_cpu = await persistent.run_mode(bootstrap, "persistent", messages, max_executors,
                                                      delay_us=delay_us, poll_us=poll_us)
    return figure


async def python_floor_row(bootstrap: str, messages: int, max_executors: int) -> Figure | None:
    """Persistent mode's floor in Python on the same workload (bench/python_floor.py, through
    bench/persistent.py); None where that bench is absent."""
    try:
        import persistent
    except ImportError:
        return None
    return await persistent.python_floor(bootstrap, messages, max_executors)


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
           paces: list[float] | None = None, warmed: str = "") -> None:
    """The figures. The two ratios are read from rounds (a C floor, spawn mode and persistent mode back to
    back): the median of the rounds' ratios is the verdict, a bootstrap interval beside it; the round
    nearest that median is shown in detail. (a) ran twice, before and after the diagnostics: the better run."""
    a = max(spawns, key=lambda f: f.rate)  # the machine is shared: the better of two runs is the ceiling
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
        judged(f"spawn mode / C floor: the median of {len(ratios)} rounds", ratios, TARGET_FLOOR_RATIO, 2, "",
               format(TARGET_FLOOR_RATIO, "g"))
        print(f"  {'    the round nearest the median: C floor, spawn mode':58}{floor.rate:>6.0f}, {b.rate:.0f} /s")
    else:
        print(f"  {'spawn mode: engine end to end (b), the rounds':58}{', '.join(f'{r.b.rate:.0f}' for r in rounds)}  /s"
              "  (no C compiler: no floor)")
    if b_thread is not None:
        print(f"  {'    the same with executor.spawner: thread':58}{b_thread.rate:>10.0f} /s  "
              f"({b_thread.cpu_us:.0f} us CPU/task; native runner: {b.cpu_us - b_thread.cpu_us:+.0f} us)")
    ceiling(floor, b)
    cpu_us = statistics.median(r.b.cpu_us for r in rounds)
    print(f"  {'worker CPU per task, children excluded (d), median':58}"
          f"{cpu_us:>10.{places(cpu_us, TARGET_CPU_US, 0)}f} us  "
          f"{'<= ' + format(TARGET_CPU_US, 'g') + ' us':>10}  {verdict(cpu_us <= TARGET_CPU_US)}")
    lags = [r.b.lag_p99_ms for r in rounds if r.b.lag_p99_ms is not None]
    if lags:
        worst = max(lags)
        print(f"  {'event loop lag p99 under full load, the worst round':58}"
              f"{worst:>10.{places(worst, TARGET_LAG_P99_MS, 1)}f} ms  "
              f"{'<= ' + format(TARGET_LAG_P99_MS, 'g') + ' ms':>10}  {verdict(worst <= TARGET_LAG_P99_MS)}")
    kept_rounds = [r for r in rounds if r.kept is not None]
    if kept_rounds:
        ratios = [r.kept_ratio for r in kept_rounds]
        chosen = kept_rounds[nearest_median(ratios)]
        kept, spawned = chosen.kept, chosen.b
        print(f"  {f'the rounds: persistent ({kept.count} messages) / spawn mode':58}"
              f"{', '.join(f'{r.kept.rate:.0f} / {r.b.rate:.0f}' for r in kept_rounds)}  /s")
        judged(f"persistent / spawn mode: the median of {len(ratios)} rounds", ratios, TARGET_PERSISTENT_RATIO,
               1, "x", f"{TARGET_PERSISTENT_RATIO:g}x")
        print(f"  {'    the round nearest the median: persistent, spawn mode':58}{kept.rate:>6.0f}, {spawned.rate:.0f} /s")
        print(f"  {'    worker CPU per task, persistent mode':58}{kept.cpu_us:>10.0f} us")
        persistent_ceiling(kept, spawned)
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
    other = b.cpu_seconds - b.loop_cpu_seconds - b.kafka_cpu_seconds
    print(f"  {'    of (d), the rest (spawner, other threads)':58}{other / b.count * 1e6:>10.0f} us")
    if b.broker_us is not None:
        print(f"  {'    not in (d): the local broker (JVM), per task':58}{b.broker_us:>10.0f} us")
    print(f"      ({b.count} tasks in {b.seconds:.2f}s, {b.cpu_seconds:.2f} CPU-s of the worker process; "
          f"spawns: {a.count} in {a.seconds:.2f}s)")


def ceiling(floor: Figure | None, b: Figure) -> None:
    """What this machine's cores allow spawn mode at best, from CPU measured in this run.

    The C floor spawns with nothing else running; in spawn mode every task also costs the
    worker's CPU and the local broker's. With all cores busy, tasks/s can be at most
    cores / (child + worker + broker CPU per task): the floor ratio cannot pass that share.
    The child is the C floor's at first; then as it cost in (b), where the same binary, with the
    same environment, shares the cores with the worker and the broker.
    """
    if floor is None or not floor.children_cpu_seconds or b.broker_cpu_seconds is None:
        return
    cores = os.cpu_count() or 1
    child_us = floor.children_us
    spawn_us = floor.cpu_us + child_us
    broker_us = b.broker_us
    print(f"  {'    the C floor: CPU per spawn, parent + child':58}{spawn_us:>10.0f} us  "
          f"(busy cores: {floor.rate * spawn_us / 1e6:.2f} of {cores})")
    print_ceilings("child", child_us, b.cpu_us, broker_us, floor.rate, "{:.2f} x the floor")
    if b.children_cpu_seconds:
        in_b = b.children_us
        print(f"  {'    a task process in (b): its CPU (from C: the child above)':58}{in_b:>10.0f} us  "
              f"({child_us:.0f} us)")
        print_ceilings("child in (b)", in_b, b.cpu_us, broker_us, floor.rate, "{:.2f} x the floor")
        taken_apart(b, floor, "spawn mode", "the floor")
    loop_ceiling(b, floor.rate, "{:.2f} x the floor")


def persistent_ceiling(kept: Figure, b: Figure) -> None:
    """What this machine's cores allow persistent mode at best, as a multiple of spawn mode's rate (b).

    The same reckoning as ``ceiling``: every task costs the program's CPU (bench/echo_task.py,
    a Python program; its start included), the worker's and the local broker's, all on these cores.
    """
    if not kept.children_cpu_seconds or kept.broker_cpu_seconds is None:
        return
    program_us = kept.children_us
    broker_us = kept.broker_us
    print(f"  {'    CPU per task: the program, the local broker':58}{program_us:>7.0f}, {broker_us:.0f} us")
    print_ceilings("program", program_us, kept.cpu_us, broker_us, b.rate, "{:.1f} x spawn mode")
    if b.children_cpu_seconds and b.broker_cpu_seconds is not None:
        taken_apart(kept, b, "persistent", "spawn mode")
    loop_ceiling(kept, b.rate, "{:.1f} x spawn mode")


def task_cpu_us(figure: Figure) -> float:
    """All the CPU one task cost on these cores: its process (or its share of a program's), the worker
    (or the C floor's parent) and the local broker, when it was measured."""
    return figure.children_us + figure.cpu_us + (figure.broker_us or 0.0)


def taken_apart(fast: Figure, slow: Figure, name: str, other: str) -> None:
    """A ratio of two rates taken apart, exactly: tasks/s = busy cores / CPU per task, so
    fast / slow = (slow's CPU per task / fast's) x (fast's busy cores / slow's). The first says
    what cheaper tasks would give, the second whether the cores were kept as busy (one event loop
    cannot fill two cores; a spawn's waits leave them idle)."""
    fast_us, slow_us = task_cpu_us(fast), task_cpu_us(slow)
    fast_busy, slow_busy = fast.rate * fast_us / 1e6, slow.rate * slow_us / 1e6
    print(f"  {f'    {name} / {other}, taken apart: CPU per task, then busy cores':58}"
          f"{slow_us / fast_us:>10.2f} x {fast_busy / slow_busy:.2f}  "
          f"({slow_us:.0f} / {fast_us:.0f} us; {fast_busy:.2f} / {slow_busy:.2f} of {os.cpu_count() or 1} cores)")


def loop_ceiling(figure: Figure, reference: float, against: str) -> None:
    """The other bound: one event loop runs every task's bookkeeping, so tasks/s cannot pass
    1 / (its CPU per task) even with cores to spare; and how busy it was over the run."""
    if not figure.loop_cpu_seconds:
        return
    loop_us = figure.loop_us
    best = 1e6 / loop_us
    print(f"  {'    ceiling, one event loop: 1 / its CPU per task':58}{best:>10.0f} /s  = "
          + against.format(best / reference) + f"  (busy {figure.loop_cpu_seconds / figure.seconds:.0%} of the run)")


def print_ceilings(what: str, task_us: float, worker_us: float, broker_us: float, reference: float,
                   against: str) -> None:
    """The two ceilings: cores / (what + worker + broker CPU per task), and with a worker costing nothing;
    ``against`` formats each as a multiple of ``reference`` tasks/s."""
    cores = os.cpu_count() or 1
    for label, worker in ((f"    ceiling, this worker: cores / ({what} + worker + broker)", worker_us),
                          (f"    ceiling, a worker costing nothing: cores / ({what} + broker)", 0.0)):
        best = cores * 1e6 / (task_us + worker + broker_us)
        print(f"  {label:58}{best:>10.0f} /s  = " + against.format(best / reference))


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
        from persistent import persistent_count  # (it imports this module: not at the top)
        many = persistent_count(args.messages, args.persistent_messages)

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
    paced = least = polled = None
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
    print("(a) raw spawn rate, again ...", file=sys.stderr)
    spawns.append(await spawn_rate(args.spawns, args.max_executors, runner))
    for number in range(2, args.rounds + 1):
        rounds.append(await run_round(number, args.rounds, bootstrap, *round_topics[number - 1], args, many))
    paces += host_pace()
    report(args, rounds, spawns, a_ref, b_unpaused, a_thread, b_thread, paced, least, polled, paces, warmed)

    if args.recorder_messages:
        print("flight recorder off and on, alternating (bench/recorder.py) ...", file=sys.stderr)
        from recorder import measure_recorder_overhead  # bench/recorder.py, runnable alone too

        overhead = await measure_recorder_overhead(bootstrap, args.recorder_messages, max_executors=args.max_executors)
        print("\n" + overhead.report())

    if args.profile_messages:
        print("profiling ...", file=sys.stderr)
        profiler = cProfile.Profile()
        profiled, _ = await engine_run(bootstrap, profile_topic, profile_ends, args.max_executors, profiler)
        profile_report(profiler, profiled.count, args.top)
    return 0  # a MISS is a finding to read, not a crash


if __name__ == "__main__":
    sys.exit(event_loop.run(main()))  # the loop `knarr run` gives a worker
