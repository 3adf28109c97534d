"""make bench's workload (W1) through the engine, shared by the benches: one /bin/echo task per message
and one small Kafka output per message, on a pre-filled topic; the clock from the first consumed batch
to the commit of the last offset (TimedSource); one run (engine_run); the untimed runs that warm the
broker first (warm_up); and what a run measured (Figure)."""

from __future__ import annotations

import asyncio
import cProfile
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # for tests.services.kafka (broker start and topic helpers)

import knarr  # noqa: E402
from clocks import (  # noqa: E402
    broker_between, broker_cpu_seconds, cpu_children, cpu_librdkafka, cpu_runner, cpu_self, cpu_thread)
from knarr.config.loading import config_from_dict  # noqa: E402
from knarr.config.models import ExecutorConfig  # noqa: E402
from knarr.engine.environment import task_environment  # noqa: E402
from knarr.engine.worker import Worker  # noqa: E402
from knarr.sources.kafka import KafkaSource  # noqa: E402

from tests.services.kafka import create_topic, end_offsets, produce_json, unique_name  # noqa: E402

BINARY = "/bin/echo"
# What the engine gives each task by default (executor.env_inherit of this process's variables), and so
# what the raw spawn path and the C floor give theirs too: all three start the same process. It matters:
# with LANG set to a UTF-8 locale, /bin/echo loads that locale, 120-240 us more of its CPU here than with
# PATH alone.
TASK_ENV = task_environment(ExecutorConfig().env_inherit, os.environ, {})
PARTITIONS = 4
LAG_PROBE_SECONDS = 0.01


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
    starved_samples: list[float | None] | None = None  # each lag's part waiting for a CPU, at most (loop_lag.py)
    events: int = 0  # what the flight recorder took, when it was on
    runner_cpu_seconds: float = 0.0  # the native runner's thread's share of cpu_seconds (spawn mode)

    @property
    def lag_p99_ms(self) -> float | None:
        return _p99_ms(self.lag_samples)

    @property
    def own_lag_p99_ms(self) -> float | None:
        """The lag's p99 once each probe's wait for a CPU is taken out: how late the loop's own work made it,
        the host's share (other processes holding the cores) aside. None where the wait was not measured."""
        if not self.lag_samples or not self.starved_samples or None in self.starved_samples:
            return None
        return _p99_ms([lag - starved for lag, starved in zip(self.lag_samples, self.starved_samples)])

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

    def data(self) -> dict:
        """The figure for a bench's --json: what was measured (the lag as its p99, not every sample) and the
        rates and CPU per task made from it."""
        measured = {name: value for name, value in vars(self).items() if name not in ("lag_samples", "starved_samples")}
        return {**measured, "rate": self.rate, "cpu_us": self.cpu_us, "loop_us": self.loop_us,
                "children_us": self.children_us, "broker_us": self.broker_us, "lag_p99_ms": self.lag_p99_ms,
                "own_lag_p99_ms": self.own_lag_p99_ms}


def _p99_ms(samples: list[float] | None) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3


class TrueHandler(knarr.BaseHandler[None, None]):
    """One task (BINARY, no arguments) per message; one small Kafka output per message."""

    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(source_offsets=[m.offset], metadata={"p": m.partition, "o": m.offset})
                for m in messages]

    async def on_task_complete(self, result):
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(data=result.task.metadata)])


@dataclass(frozen=True)
class Clocks:
    """Every clock a run is measured by, read at one moment: the run's figures are two readings' differences."""

    at: float  # time.perf_counter(): the system's monotonic clock, comparable across processes
    cpu: float  # this process, all threads
    loop_cpu: float  # the calling thread (the event loop's)
    kafka_cpu: float  # librdkafka's threads
    children_cpu: float  # reaped children
    runner_cpu: float  # the native runner's thread
    broker: float | None  # the local broker, when it was started from this checkout
    lag: int  # loop-lag probes taken so far

    @classmethod
    def read(cls, lag: int) -> Clocks:
        return cls(time.perf_counter(), cpu_self(), cpu_thread(), cpu_librdkafka(), cpu_children(), cpu_runner(),
                   broker_cpu_seconds(), lag)


class TimedSource:
    """The Kafka source, with a clock: first consumed batch -> every end offset committed (then stop).
    ``first`` and ``done`` are the clocks read at those two moments (None until then)."""

    def __init__(self, inner: KafkaSource, ends: dict[int, int]) -> None:
        self.inner = inner
        self.topic = inner.topic
        self.ends = ends
        self.committed: dict[int, int] = {}
        self.first: Clocks | None = None
        self.done: Clocks | None = None
        self.worker: Worker | None = None
        self.events = 0  # what the flight recorder took, when it is on

    async def start(self, on_assign, on_revoke) -> None:
        await self.inner.start(on_assign, on_revoke)

    async def poll(self, max_records, commits):
        messages, done = await self.inner.poll(max_records, commits)
        if messages and self.first is None:
            self.first = Clocks.read(self._lag_count())
        self._committed(done)
        return messages, done

    async def commit_now(self, commits):
        done = await self.inner.commit_now(commits)
        self._committed(done)
        return done

    def _committed(self, done: dict[int, int]) -> None:
        self.committed.update(done)
        if self.done is None and all(self.committed.get(p, 0) >= end for p, end in self.ends.items()):
            self.done = Clocks.read(self._lag_count())
            if self.worker is not None:
                if self.worker.recorder is not None:
                    self.events = self.worker.recorder.describe()["events"]
                self.worker.stop()

    def _lag_count(self) -> int:
        samples = self.worker.loop_lag.samples if self.worker is not None else None
        return len(samples) if samples is not None else 0

    def lag_samples(self) -> list[float] | None:
        samples = self.worker.loop_lag.samples if self.worker is not None else None
        return None if samples is None else samples[self.first.lag:self.done.lag]

    def starved_samples(self) -> list[float | None] | None:
        starved = self.worker.loop_lag.starved if self.worker is not None else None
        return None if starved is None else starved[self.first.lag:self.done.lag]

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
                     profiler: cProfile.Profile | None = None, executor: dict | None = None,
                     debug: dict | None = None, handler: knarr.BaseHandler | None = None,
                     worker_type: type[Worker] = Worker, name: str = "bench-engine",
                     lag_probe: bool = True) -> tuple[Figure, Worker]:
    """One worker over ``topic`` until every end offset is committed; ``executor`` and ``debug`` add to its
    config (``debug``: the flight recorder's, off by default). ``handler``: W1's (TrueHandler) unless
    another is given; ``worker_type``: a Worker subclass that measures more; ``name`` prefixes the run's
    consumer group, output topic and client id. ``lag_probe``: the loop's lag probed every
    LAG_PROBE_SECONDS and kept in the figure (off: the worker's own probe, at its own pace, keeps nothing)."""
    output = unique_name(f"{name}-out")
    create_topic(bootstrap, output, 1)
    config = config_from_dict({
        "kafka": {"brokers": bootstrap, "source_topic": topic, "consumer_group": unique_name(f"{name}-g"),
                  "session_timeout_ms": 6000, "heartbeat_interval_ms": 500},
        "executor": {"binary_path": BINARY, "max_executors": max_executors, "task_timeout_seconds": 30,
                     **(executor or {})},
        "sinks": {"kafka": {"out": {"topic": output}}},
        "metrics": {"enabled": False},
        "logging": {"level": "WARNING", "format": "json"},
        "debug": debug or {},
    })
    source = TimedSource(KafkaSource(config.kafka, config.executor, client_id=name), ends)
    worker = worker_type(config, handler or TrueHandler(), source=source)
    if lag_probe:
        worker.loop_lag.interval = LAG_PROBE_SECONDS
        worker.loop_lag.samples, worker.loop_lag.starved = [], []
    source.worker = worker
    if profiler is not None:
        profiler.enable()
    try:
        code = await asyncio.wait_for(worker.run(), 900)
    finally:
        if profiler is not None:
            profiler.disable()
    first, last = source.first, source.done
    if code != 0 or first is None or last is None:
        raise RuntimeError(f"engine run did not finish cleanly (exit {code}); committed {source.committed}, ends {ends}")
    figure = Figure(worker.stats.tasks, last.at - first.at, last.cpu - first.cpu, last.loop_cpu - first.loop_cpu,
                    last.kafka_cpu - first.kafka_cpu, last.children_cpu - first.children_cpu,
                    broker_cpu_seconds=broker_between(first.broker, last.broker),
                    lag_samples=source.lag_samples(),
                    starved_samples=source.starved_samples(), events=source.events,
                    runner_cpu_seconds=last.runner_cpu - first.runner_cpu)
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
